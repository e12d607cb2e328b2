"""When each run folder arrived here, by this lab's own clock: recorded when a fetch from a target host lands one
(lab.remote.fetch), and for any other (made here, brought by `dvc pull` or a copy) the first time a reader sees
it. A run's age is the earlier of the start its manifest claims and its arrival (lab.catalog.newest.age): a
folder that claims a later start than when it arrived, a future one say, is never newer than a run made or
fetched after it.

<runs>/.arrivals.jsonl holds one {"run_id", "arrived_utc"} per line, appended under a lock; a run's first line is
the one that counts. A torn last line is set aside before appending; a file that is not the lab's record (a bad
line, a link) is set aside whole, after which every run counts as first seen again."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, Field

from lab.core.errors import warn
from lab.core.locks import open_lock
from lab.core.runs import RUN_ID, RunError, read_jsonl, set_aside_torn_tail, utc_now
from lab.core.schemas.manifest import UtcTime

ARRIVALS = ".arrivals.jsonl"  # hidden: no run folder, and no reader lists it


class Arrival(BaseModel):
    run_id: str = Field(pattern=RUN_ID.pattern)
    arrived_utc: UtcTime


def arrivals(runs_dir: Path, seen: Iterable[str] = ()) -> dict[str, str]:
    """Every recorded arrival, by run id; the runs of `seen` (run ids) not recorded yet are recorded now. A runs
    folder that cannot be written to (read-only) gives them now without recording it."""
    known = _read(runs_dir / ARRIVALS)
    new = [r for r in dict.fromkeys(seen) if r not in known]
    if new:
        now = utc_now(ms=True)
        with _locked(runs_dir):
            known = _read(runs_dir / ARRIVALS)  # another reader may have recorded them meanwhile
            new = [r for r in new if r not in known]
            _append(runs_dir / ARRIVALS, [Arrival(run_id=r, arrived_utc=now) for r in new])
        known.update({r: now for r in new if r not in known})
    return known


def age_utc(started_utc: str, arrived_utc: str) -> str:
    """A run's age, what orders it among runs (lab.catalog.newest): when it started, or when its folder arrived
    here where that is earlier; the same for a run in every clone unless it claims a start after it arrived."""
    started, arrived = utc_time(started_utc), utc_time(arrived_utc)
    return arrived_utc if arrived is not None and (started is None or arrived < started) else started_utc


def utc_time(text: str) -> datetime | None:
    """A UTC time as the lab writes it, parsed (None for anything else)."""
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


def record_arrival(runs_dir: Path, run_id: str, when: str | None = None) -> None:
    """A run folder landed in runs_dir now (or at `when`): recorded, unless it already is (its first arrival
    stays: a resumed run fetched again arrived when it first did)."""
    with _locked(runs_dir):
        if run_id not in _read(runs_dir / ARRIVALS):
            _append(runs_dir / ARRIVALS, [Arrival(run_id=run_id, arrived_utc=when or utc_now(ms=True))])


def _read(path: Path) -> dict[str, str]:
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        if path.is_symlink():
            raise RunError(f"{path}: a link, not the lab's record of arrivals")
        rows: list[Arrival] = read_jsonl(path, Arrival, tolerate_torn_tail=True)
    except RunError as e:
        aside = path.with_name(f"{path.name}.bad-{utc_now(ms=True).replace(':', '')}")
        with contextlib.suppress(OSError):
            path.rename(aside)
        warn(f"{e}; set aside as {aside.name}: every run folder counts as first seen now")
        return {}
    out: dict[str, str] = {}
    for r in rows:
        out.setdefault(r.run_id, r.arrived_utc)
    return out


def _append(path: Path, rows: list[Arrival]) -> None:
    if not rows:
        return
    try:
        set_aside_torn_tail(path)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:  # a read-only runs folder: the arrivals hold for this reader only
        warn(f"{path}: cannot record when {len(rows)} run folder(s) arrived ({e.strerror})")
        return
    try:
        os.write(fd, "".join(r.model_dump_json() + "\n" for r in rows).encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(runs_dir: Path) -> Iterator[None]:
    """The runs folder's one writer of its record of arrivals, among this machine's processes."""
    key = hashlib.sha256(str(runs_dir.resolve()).encode()).hexdigest()[:16]
    fd = open_lock(f"arrivals-{key}.lock")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
