"""A measurement session: engine, model, target, and a run folder with its provenance recorded before
anything is measured. Shared by every experiment; resuming checks the run was made with the same parts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lab import __version__
from lab.engine.build import EngineInfo, build_engine, engine_patch_text
from lab.engine.models import resolve_model
from lab.engine.server import LlamaServer
from lab.engine.source import file_sha256
from lab.runs import RunError, RunFolder
from lab.settings import REPO_ROOT, Settings
from lab.snapshot import snapshot_git, snapshot_host
from lab.target import LocalTarget, Target


@dataclass
class Session:
    settings: Settings
    run: RunFolder
    engine: EngineInfo
    model: Path
    target: Target

    def server(self, **overrides: Any) -> LlamaServer:
        server_settings = self.settings.server.model_copy(update=overrides)
        return LlamaServer(self.engine, self.model, server_settings, self.run.path / "logs" / "server.log")

    def record_server(self, srv: LlamaServer) -> None:
        self.run.update(server_config=srv.config.model_dump(mode="json"))


def model_sha256(path: Path, cache_dir: Path) -> str:
    """sha256 of a model file, memoised by (path, size, mtime): a 20 GB GGUF is hashed once."""
    st = path.stat()
    memo_file = cache_dir / "model-sha256.json"
    memo: dict[str, str] = json.loads(memo_file.read_text()) if memo_file.exists() else {}
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    if key not in memo:
        memo[key] = file_sha256(path)
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        memo_file.write_text(json.dumps(memo, indent=1))
    return memo[key]


def engine_record(engine: EngineInfo) -> dict[str, Any]:
    return {
        "source": engine.source.model_dump(mode="json"),
        "patch_sha256": engine.patch_sha256,
        "patches": engine.patches,
        "flags": engine.flags,
        "flavor": engine.flavor,
        "server": str(engine.server),
    }


def open_session(
    settings: Settings, experiment: str, params: dict[str, Any], resume: RunFolder | None = None
) -> Session:
    target = LocalTarget(settings.host_name)
    engine = build_engine(settings.engine, settings.cache_dir, flavor="release", quiet=True)
    model = resolve_model(settings)
    model_rec = {"path": str(model), "sha256": model_sha256(model, settings.cache_dir), "size": model.stat().st_size}
    if resume is not None:
        m = resume.manifest()
        if m.experiment != experiment:
            raise RunError(f"{resume.path.name} is a {m.experiment} run, not {experiment}")
        if m.engine.get("patch_sha256") != engine.patch_sha256 or m.engine.get("flags") != engine.flags:
            raise RunError(f"{resume.path.name} was measured with another engine build; start a new run")
        if m.model.get("sha256") != model_rec["sha256"]:
            raise RunError(f"{resume.path.name} was measured with another model ({m.model.get('path')})")
        resume.begin_resume()
        return Session(settings, resume, engine, model, target)
    run = RunFolder.create(settings.runs_dir, experiment, target.name, params)
    host = snapshot_host(target, run.path / "host")
    lab_git = snapshot_git(REPO_ROOT, run.path / "git", engine_patch_text(engine))
    run.update(
        engine=engine_record(engine),
        model=model_rec,
        host_summary=host,
        lab={"version": __version__, "commit": lab_git["commit"], "dirty": lab_git["dirty"]},
    )
    return Session(settings, run, engine, model, target)


def progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )
