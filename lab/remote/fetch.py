"""A run folder fetched from a target host into the local runs folder, write-once: a new run lands in a new
folder only, and a resumed run's local copy only grows (a file of the host's replaces the local one only where the
local one is a byte prefix of it, or, for a table the host's lab resumed since, where the host kept a prefix of the
local rows and dropped only a tail of them; what only this machine added stays and is never taken from the host; a
host's copy that is shorter, other, or another run changes nothing here, in one line)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from lab.core.errors import warn
from lab.core.run_ids import check_run_id
from lab.core.runs import LOCAL_FILES, Manifest, RunFolder
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
            files_in(tmp, where)  # no link, nothing this machine writes
            tmp.rename(local)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return local


LOCAL_RESULTS = ("model_push", "clean_room", "clean_room_resumed")  # results only this machine writes
SAME_RUN = ("run_id", "experiment", "host", "started_utc", "params")  # fixed when a run starts
WORKING_FILES = (f"raw/{DUMP}.jsonl", f"raw/{DUMP}.part.jsonl")  # removed by the lab when its run completes


def merge_resumed(there: Path, here: Path, where: str) -> None:
    """A resumed run's copy from the host (`there`) into its local copy (`here`), which only grows. What only the
    local copy has stays (what this machine added: the bundle's git state, the push and clean-room results; a
    file the host's lab has since removed), what only the host's has is added, and a file both have takes the
    host's only where it continues the local one (`continues`: the local bytes are a prefix of the host's; or,
    resumed there since, a table the host's resume cut back: `rewound`, said in one line); each manifest.json (the
    run's, an interleaved run's sides') is the host's, the same run, with this machine's results kept. A host
    whose copy is another run, shorter or other (a file cut or rewritten, resumes missing, files missing though it
    did not resume the run) changes nothing here: one line says why."""
    old, new = manifest_at(here, "the local copy"), manifest_at(there, where)
    same_run(old, new, where, here.name)
    mine, theirs = files_in(here), files_in(there, where)
    has_mine = new.resumed_utc[: len(old.resumed_utc)] == old.resumed_utc  # the host's resumes: the local ones, then
    other, updates, dropped = compare(mine, theirs, has_mine and len(new.resumed_utc) > len(old.resumed_utc))
    if not has_mine:
        other.insert(0, f"{len(new.resumed_utc)} resumes there, {len(old.resumed_utc)} here")
    if len(new.resumed_utc) == len(old.resumed_utc):  # not resumed there: what it lacks, it lost
        lost = [rel for rel in mine if rel not in theirs and not rel.startswith(LOCAL_FILES)]
        other += [f"{rel} is missing there" for rel in sorted(lost)]
    # a working file the host's lab removed when it completed the run (the profile's dump, now its Parquet)
    done = [rel for rel in WORKING_FILES if rel in mine and rel not in theirs and ".ready" in theirs]
    if other:
        more = f" and {len(other) - 3} more" if len(other) > 3 else ""
        raise RemoteError(
            f"{where} does not continue the local copy ({'; '.join(other[:3])}{more}): not fetched, nothing "
            "changed here"
        )
    manifests = {rel: merged_manifest(here / rel, there / rel) for rel in theirs if is_manifest(rel)}
    changed = {
        rel: m
        for rel, m in manifests.items()
        if rel not in mine or m != manifest_at((here / rel).parent, "the local copy")
    }
    if (here / ".ready").exists() and (updates or changed):
        raise RemoteError(f"{here.name} is complete here and a complete run is never changed: {where} not fetched")
    ready = [rel for rel in updates if Path(rel).name == ".ready"]
    for rel in [r for r in updates if r not in ready]:
        (here / rel).parent.mkdir(parents=True, exist_ok=True)
        os.replace(there / rel, here / rel)
    for rel, m in sorted(changed.items(), key=lambda x: -x[0].count("/")):  # the sides', then the run's
        (here / rel).parent.mkdir(parents=True, exist_ok=True)
        RunFolder((here / rel).parent).write_manifest(m)
    for gone in done:
        (here / gone).unlink()
    for rel in sorted(ready, key=lambda r: -r.count("/")):  # last: every .ready after what it closes
        os.replace(there / rel, here / rel)
    if dropped := {rel: n for rel, n in dropped.items() if n}:
        per = ", ".join(f"{rel}: {n}" for rel, n in sorted(dropped.items()))
        warn(
            f"{where} resumed the run and dropped {sum(dropped.values())} local rows of work it had not finished "
            f"({per}): the fetch replaces them with the host's"
        )


def differ(old: Manifest, new: Manifest) -> list[str]:
    """What is fixed when a run starts and differs between two manifests of it (none: the same run)."""
    return [k for k in SAME_RUN if getattr(old, k) != getattr(new, k)]


def same_run(old: Manifest, new: Manifest, where: str, name: str) -> None:
    """Refuse a host's manifest that is not the run `old` is."""
    if fields := differ(old, new):
        raise RemoteError(
            f"{where} is not the run {name} here (its {', '.join(fields)} differ): not fetched, nothing changed here"
        )


def compare(
    mine: dict[str, Path], theirs: dict[str, Path], resumed: bool
) -> tuple[list[str], list[str], dict[str, int]]:
    """What in the host's files does not continue the local ones (why, per file), the files the host's copy adds
    or continues, and of those the tables a resume there cut back (`resumed`: the host resumed the run since the
    local copy was fetched) with how many local rows each dropped. A side's manifest must be the same run as the
    local one (its resumes included)."""
    other, updates, dropped = [], [], {}
    for rel, src in theirs.items():
        dst = mine.get(rel)
        if is_manifest(rel):
            if dst is not None and rel != "manifest.json":
                old, new = manifest_at(dst.parent, "the local copy"), manifest_at(src.parent, rel)
                fields = differ(old, new) or (
                    [] if new.resumed_utc[: len(old.resumed_utc)] == old.resumed_utc else ["resumes"]
                )
                if fields:
                    other.append(f"{rel} is not the same run there (its {', '.join(fields)} differ)")
        elif dst is None or continues(dst, src):
            if dst is None or dst.stat().st_size != src.stat().st_size:
                updates.append(rel)
        elif resumed and (n := rewound(dst, src)) is not None:
            updates.append(rel)
            dropped[rel] = n
        elif continues(src, dst):
            other.append(f"{rel} is shorter there")
        else:
            other.append(f"{rel} differs there")
    return other, updates, dropped


def continues(here: Path, there: Path) -> bool:
    """Whether the host's file continues the local one: the local bytes are a prefix of the host's. A JSON-lines
    file's torn last line here (no newline: a writer killed mid-line, which the lab sets aside when it resumes) is
    no part of it."""
    mine = here.read_bytes()
    if here.suffix == ".jsonl":
        mine = mine[: mine.rfind(b"\n") + 1]
    with there.open("rb") as fh:
        return fh.read(len(mine)) == mine


def rewound(here: Path, there: Path) -> int | None:
    """How many local rows the host's resume dropped from a JSON-lines table, when the host's file is what a resume
    makes of the local one (RunFolder.keep_whole: the rows of an unfinished unit of work dropped, the rows it keeps
    written anew, then new rows appended): the local rows up to some line, the same values (however written),
    then rows of its own. None when it is not: not JSON lines, or a local row past the first the host changed is
    found again in the host's file (a row changed in the middle of what it kept). A torn last line on either side
    is no row of it."""
    if here.suffix != ".jsonl":
        return None
    mine = [row_value(x) for x in here.read_bytes().split(b"\n")[:-1]]
    theirs = [row_value(x) for x in there.read_bytes().split(b"\n")[:-1]]
    kept = 0
    while kept < min(len(mine), len(theirs)) and mine[kept] == theirs[kept]:
        kept += 1
    if set(mine[kept:]) & set(theirs[kept:]):
        return None
    return len(mine) - kept


def row_value(line: bytes) -> bytes:
    """A JSON line's value, written one way (a resume rewrites the rows it keeps: `1.500000` becomes `1.5`); a
    line that is not JSON, its bytes."""
    try:
        return json.dumps(json.loads(line), separators=(",", ":")).encode()
    except (ValueError, RecursionError):
        return line


def is_manifest(rel: str) -> bool:
    return Path(rel).name == "manifest.json"


def merged_manifest(here: Path, there: Path) -> Manifest:
    """The host's manifest with the results only this machine writes (or the host's lacks) kept from the local
    one (a side's, new there: the host's)."""
    new = manifest_at(there.parent, str(there))
    if not here.exists():
        return new
    old = manifest_at(here.parent, "the local copy")
    kept = {k: v for k, v in old.results.items() if k in LOCAL_RESULTS or k not in new.results}
    return new.model_copy(update={"results": {**new.results, **kept}})


def manifest_at(folder: Path, where: str) -> Manifest:
    try:
        return Manifest.model_validate_json((folder / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        raise RemoteError(
            f"{where}: no readable manifest.json ({type(e).__name__}): not fetched, nothing changed here"
        ) from e


def files_in(folder: Path, where: str | None = None) -> dict[str, Path]:
    """A run folder's files by their path in it. A host's copy (`where`) holding a link, or a file only this
    machine writes (LOCAL_FILES: it would stand for this machine's record of what the host ran), is refused."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if where is not None and p.is_symlink():
            raise RemoteError(f"{where}: {rel} is a link: not fetched, nothing changed here")
        if where is not None and (rel + "/" if p.is_dir() else rel).startswith(LOCAL_FILES):
            raise RemoteError(
                f"{where}: {rel} is this machine's own record of the run, never the host's: not fetched, nothing "
                "changed here"
            )
        if p.is_file():
            out[rel] = p
    return out
