"""`lab dvc-setup`: the lab's DVC settings for this clone (idempotent; `make setup` runs it).

- host-key verification for SSH remotes (lab.dvc_hostkeys, via a .pth file in the venv);
- analytics off (also in the committed .dvc/config) and a site cache directory under the lab's cache
  instead of /var/tmp/dvc, both in .dvc/config.local (per clone, not committed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lab.core.errors import LabError
from lab.dvc_hostkeys import install_pth


class DvcError(LabError):
    """A dvc command the lab ran failed."""


def dvc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, capture_output=True, text=True)


def dvc_setup(repo: Path, cache_dir: Path) -> list[str]:
    done = [f"host-key check for SSH remotes: {install_pth()}"]
    if not (repo / ".dvc").is_dir():
        return [*done, f"{repo} is not a DVC repository (no .dvc/): skipped the repository settings"]
    for key, value in (("core.analytics", "false"), ("core.site_cache_dir", str(cache_dir / "dvc-site"))):
        r = dvc("config", "--local", key, value, cwd=repo)
        if r.returncode != 0:
            raise DvcError(f"dvc config --local {key} {value} failed: {r.stderr.strip()}")
        done.append(f"{key} = {value} (.dvc/config.local)")
    return done


def changed_since_tracked(run_dir: Path) -> bool:
    """No .dvc file yet, or a file in the folder newer than it."""
    tracked = run_dir.with_name(run_dir.name + ".dvc")
    if not tracked.exists():
        return True
    since = tracked.stat().st_mtime_ns
    return any(f.stat().st_mtime_ns > since for f in run_dir.rglob("*") if f.is_file())


def track_runs(runs_dir: Path, repo: Path, only: list[Path] | None = None) -> list[str]:
    """`dvc add` every finished run folder (or those of `only`) that has no .dvc file yet, or whose content
    changed after it was tracked (a resumed run: its push must ship the whole folder, not the partial one); a
    running one is left alone. DVC's repository lock refuses a second concurrent `dvc add`: callers in threads
    serialise."""
    from lab.catalog.folders import IngestError, read_manifest, run_dirs

    todo = []
    for d in run_dirs(runs_dir) if only is None else only:
        try:
            status = read_manifest(d).status
        except IngestError:
            continue
        if status != "running" and changed_since_tracked(d):
            todo.append(str(d.resolve()))
    if todo:
        r = dvc("add", *todo, cwd=repo)
        if r.returncode != 0:
            raise DvcError(f"dvc add failed: {(r.stderr + r.stdout).strip()}")
    return todo
