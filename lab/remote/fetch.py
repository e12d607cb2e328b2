"""A run folder fetched from a target host into the local runs folder, write-once: a new run lands in a new
folder only, and a resumed run's local copy only grows (what only this machine added stays; a host's shorter
or other run changes nothing here, in one line)."""

from __future__ import annotations

import filecmp
import os
import shutil
from pathlib import Path

from lab.core.runs import Manifest, RunFolder, check_run_id
from lab.experiments.profile.dump import DUMP
from lab.remote.connect import RemoteError, SshShell


def fetch(t: SshShell, remote: str, runs_dir: Path, run_id: str, resumed: bool) -> Path:
    """The host's copy of a run folder, here. A new run lands in a new folder: a local folder of its id is
    refused (nothing changes here, the host keeps its copy). A resumed run's local copy only grows
    (`merge_resumed`). Only a folder named by a run id directly under runs_dir is ever written."""
    local = runs_dir / check_run_id(run_id, f"{t.name}: run folder")
    where = f"{t.name}:{remote}"
    if local.exists() and not resumed:
        raise RemoteError(
            f"{run_id} already exists here and is not this run's: {where} not fetched (nothing changed here; "
            "the host keeps its copy)"
        )
    tmp = local.with_name(f".{local.name}.fetch")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        t.get_tree(remote, tmp)
        if local.exists():
            merge_resumed(tmp, local, where)
        else:
            tmp.rename(local)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return local


LOCAL_FILES = ("git/bundle/", "git/image.json", "git/pushed-from/")  # what Deployment.record adds here
LOCAL_RESULTS = ("model_push", "clean_room", "clean_room_resumed")  # results only this machine writes
SAME_RUN = ("run_id", "experiment", "host", "started_utc", "params")  # fixed when a run starts
WORKING_FILES = (f"raw/{DUMP}.jsonl", f"raw/{DUMP}.part.jsonl")  # removed by the lab when its run completes


def merge_resumed(there: Path, here: Path, where: str) -> None:
    """A resumed run's copy from the host (`there`) into its local copy (`here`), which only grows. What only the
    local copy has stays (what this machine added: the bundle's git state, the push and clean-room results; a
    file the host's lab has since removed), what only the host's has is added, and a file both have takes the
    host's where it continues the local one: a JSON-lines table with at least as many rows, another file at least
    as new; manifest.json is the host's with this machine's results kept. A host whose copy is another run, or
    shorter (fewer rows, an older file, resumes missing, or files missing though it did not resume the run),
    changes nothing here: one line says why."""
    old, new = manifest_at(here, "the local copy"), manifest_at(there, where)
    differ = [k for k in SAME_RUN if getattr(old, k) != getattr(new, k)]
    if differ:
        raise RemoteError(
            f"{where} is not the run {here.name} here (its {', '.join(differ)} differ): not fetched, nothing changed "
            "here"
        )
    mine, theirs = files_in(here), files_in(there, where)
    shorter, updates = [], []
    if new.resumed_utc[: len(old.resumed_utc)] != old.resumed_utc:
        shorter.append(f"{len(new.resumed_utc)} resumes there, {len(old.resumed_utc)} here")
    for rel, src in theirs.items():
        dst = mine.get(rel)
        if rel == "manifest.json" or (dst is not None and filecmp.cmp(src, dst, shallow=False)):
            continue
        if dst is not None and rel.endswith(".jsonl") and rows(src) < rows(dst):
            shorter.append(f"{rel} has {rows(src)} rows there, {rows(dst)} here")
        elif dst is not None and not rel.endswith(".jsonl") and src.stat().st_mtime < dst.stat().st_mtime:
            shorter.append(f"{rel} is older there")
        else:
            updates.append(rel)
    if len(new.resumed_utc) == len(old.resumed_utc):  # not resumed there: what it lacks, it lost
        lost = [rel for rel in mine if rel not in theirs and not rel.startswith(LOCAL_FILES)]
        shorter += [f"{rel} is missing there" for rel in sorted(lost)]
    # a working file the host's lab removed when it completed the run (the profile's dump, now its Parquet)
    done = [rel for rel in WORKING_FILES if rel in mine and rel not in theirs and ".ready" in theirs]
    if shorter:
        more = f" and {len(shorter) - 3} more" if len(shorter) > 3 else ""
        raise RemoteError(
            f"{where} is shorter than the local copy ({'; '.join(shorter[:3])}{more}): not fetched, nothing changed "
            "here"
        )
    kept = {k: v for k, v in old.results.items() if k in LOCAL_RESULTS or k not in new.results}
    merged = new.model_copy(update={"results": {**new.results, **kept}})
    if (here / ".ready").exists() and (updates or merged != old):
        raise RemoteError(f"{here.name} is complete here and a complete run is never changed: {where} not fetched")
    for rel in [*(r for r in updates if r != ".ready"), "manifest.json", ".ready"]:  # .ready last
        if rel == "manifest.json":
            if merged != old:
                RunFolder(here).write_manifest(merged)
        elif rel in updates:
            (here / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(there / rel, here / rel)
        if rel == "manifest.json":
            for gone in done:
                (here / gone).unlink()


def manifest_at(folder: Path, where: str) -> Manifest:
    try:
        return Manifest.model_validate_json((folder / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        raise RemoteError(
            f"{where}: no readable manifest.json ({type(e).__name__}): not fetched, nothing changed here"
        ) from e


def files_in(folder: Path, where: str | None = None) -> dict[str, Path]:
    """A run folder's files by their path in it; a link in a host's copy (`where`) is refused."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if where is not None and p.is_symlink():
            raise RemoteError(f"{where}: {p.relative_to(folder)} is a link: not fetched, nothing changed here")
        if p.is_file():
            out[p.relative_to(folder).as_posix()] = p
    return out


def rows(path: Path) -> int:
    return sum(1 for line in path.read_bytes().splitlines() if line.strip())
