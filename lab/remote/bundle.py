"""The engine bundle pushed to a target host without Docker: the built engine (bin/ + its stamp + applied
patch), the lab as a wheel, the tiny model when it is the default, and the local git state it came from.
Built once per content key under cache_dir/bundles/; a host that already has the same key is skipped.

Beside it, a wheelhouse: the lab's runtime dependencies at exactly the versions requirements.lock pins, as wheels
(cache_dir/wheelhouses/<key>/). The host installs from it with no package index, so it runs what was tested
here and needs no internet."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from lab.core.lockfile import LOCK, LockError, pins
from lab.core.settings import REPO_ROOT
from lab.core.shell import LocalShell
from lab.core.snapshot import snapshot_git
from lab.engine.build import STAMP, EngineInfo, engine_patch_text
from lab.engine.source import locked
from lab.remote.connect import RemoteError


def lab_source_sha() -> str:
    """The lab's own source (what the wheel is built from; wheel bytes carry timestamps)."""
    h = hashlib.sha256()
    files = sorted(p for p in (REPO_ROOT / "lab").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for p in [*files, REPO_ROOT / "pyproject.toml"]:
        h.update(str(p.relative_to(REPO_ROOT)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def bundle_key(engine: EngineInfo, models: list[Path], tools: list[Path]) -> str:
    h = hashlib.sha256()
    for tool in tools:
        h.update(hashlib.sha256(tool.read_bytes()).digest())
    h.update((engine.build_dir / STAMP).read_bytes())
    h.update(lab_source_sha().encode())
    for m in models:
        h.update(f"{m.name}|{m.stat().st_size}|{m.stat().st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def build_wheel(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO_ROOT)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RemoteError(f"building the lab wheel failed:\n{r.stderr[-2000:]}")
    return next(out.glob("*.whl"))


def make_bundle(
    engine: EngineInfo, cache_dir: Path, model: Path | None, tools: list[Path], projector: Path | None = None
) -> Path:
    """A directory ready to push: engine/ (with the compiled tools: the profiler, the in-process driver), wheel/,
    models/ (the tiny model and its vision projector when they are the default), lab-git/, bundle.json. Locked:
    hosts pushed in parallel (and concurrent `fab` runs) share the staging directory."""
    key = bundle_key(engine, [m for m in (model, projector) if m is not None], tools)
    out = cache_dir / "bundles" / key
    with locked(cache_dir / "bundles.lock"):
        if not (out / "bundle.json").exists():
            _assemble(engine, cache_dir, model, projector, tools, key, out)
    return out


def _assemble(
    engine: EngineInfo,
    cache_dir: Path,
    model: Path | None,
    projector: Path | None,
    tools: list[Path],
    key: str,
    out: Path,
) -> None:
    wheel = build_wheel(cache_dir / "bundles" / "staging" / "wheel")
    tmp = cache_dir / "bundles" / f".{key}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(engine.build_dir / "bin", tmp / "engine" / "bin", symlinks=True)
    shutil.copyfile(engine.build_dir / STAMP, tmp / "engine" / STAMP)
    for tool in tools:
        shutil.copy2(tool, tmp / "engine" / "bin" / tool.name)
    (tmp / "engine" / "engine.patch").write_text(engine_patch_text(engine))
    shutil.copytree(wheel.parent, tmp / "wheel")
    for m in (model, projector):
        if m is not None:
            (tmp / "models").mkdir(exist_ok=True)
            shutil.copyfile(m, tmp / "models" / m.name)
    git = snapshot_git(LocalShell(), REPO_ROOT, tmp / "lab-git")
    meta = {
        "key": key,
        "wheel": wheel.name,
        "model": model.name if model else None,
        "lab_git": git,
        "mmproj": projector.name if projector else None,
        "engine_patch_sha256": engine.patch_sha256,
        "engine_commit": engine.source.commit,
    }
    (tmp / "bundle.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def runtime_requirements() -> list[str]:
    """The lab's runtime dependencies for this interpreter, exactly as the committed requirements.lock pins
    them (lab.core.lockfile)."""
    try:
        return pins(LOCK)
    except LockError as e:
        raise RemoteError(str(e)) from e


def python_tag() -> str:
    """What a wheelhouse fits: the interpreter (cpython-311) and the machine (x86_64)."""
    import platform

    return f"{sys.implementation.cache_tag} {platform.machine()}"


def make_wheelhouse(cache_dir: Path) -> tuple[str, Path]:
    """(key, directory) of the wheels of runtime_requirements() for this interpreter; built once per key."""
    reqs = runtime_requirements()
    key = hashlib.sha256("\n".join([python_tag(), *reqs]).encode()).hexdigest()[:16]
    out = cache_dir / "wheelhouses" / key
    with locked(cache_dir / "wheelhouses.lock"):
        if not (out / "requirements.txt").exists():
            tmp = out.with_name(f".{key}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp), *reqs]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise RemoteError(f"building the dependency wheelhouse failed:\n{r.stderr[-2000:]}")
            (tmp / "requirements.txt").write_text("\n".join(reqs) + "\n")
            (tmp / "python.txt").write_text(python_tag() + "\n")
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
    return key, out
