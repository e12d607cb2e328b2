"""When a run folder arrived here, by this machine's clock: the time its manifest was last written here (the
file's ctime, which the kernel sets and neither a file's content, a fetch, `dvc pull` nor a copy can choose). A
run's age is the earlier of the start its manifest claims and its arrival (lab.catalog.newest.age): a folder that
claims a later start than when it arrived, a future one say, is never newer than a run made or fetched after it,
and a run made here (its manifest written when it started, and after) is as old as its start."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path


def arrived_utc(folder: Path) -> str:
    """When folder's manifest was last written here, as a UTC time to the millisecond ("" without one)."""
    try:
        ctime = (folder / "manifest.json").lstat().st_ctime
    except OSError:
        return ""
    return datetime.fromtimestamp(ctime, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


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
