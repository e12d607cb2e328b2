"""The newest complete run of an experiment, by one rule (`age`): per host, model and engine, the catalog's
headline and `lab sweep`'s closing table; per host and model, whatever its engine, a sweep's plan (the spread and
reps of the newest sweep measured here: the host's noise is the host's); of all runs, the one a report's chart
shows first."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from lab.catalog.arrivals import utc_time
from lab.catalog.folders import IngestError, UnknownFormat, run_folders, warn_skipped
from lab.catalog.ingest import run_record
from lab.catalog.tables import RunRecord


def age(r: RunRecord) -> tuple[datetime, str]:
    """What orders runs oldest to newest: when each started, or when its folder arrived here where that is
    earlier (`age_utc`, lab.catalog.arrivals), so a folder claiming a later start than it arrived, a future one
    say, is never newer than a run made or fetched after it (a record without an age: its start,
    or now if that is earlier); its id breaks a tie."""
    now = datetime.now(UTC)
    when = utc_time(r.age_utc) or min(utc_time(r.started_utc) or now, now)
    return (when, r.run_id)


def newest(records: Iterable[RunRecord], experiment: str) -> list[RunRecord]:
    """The newest complete run of `experiment` per (host, model sha256, engine commit), newest first: the one
    choice behind the catalog's headline (a pin run and a newer release's stand side by side)."""
    best: dict[tuple[str, str, str], RunRecord] = {}
    for r in sorted(complete(records, experiment), key=age):
        best[(r.host, r.model_sha256, r.engine_commit)] = r
    return sorted(best.values(), key=age, reverse=True)


def newest_of(records: Iterable[RunRecord], experiment: str | None = None) -> RunRecord | None:
    """The newest complete run (of `experiment` when given), whatever its host and model: the run a report's
    chart shows first."""
    return max(complete(records, experiment), key=age, default=None)


def complete(records: Iterable[RunRecord], experiment: str | None) -> list[RunRecord]:
    """The complete runs (those the figures draw) of `experiment`, or of every experiment."""
    return [r for r in records if r.in_figures and experiment in (None, r.experiment)]


def newest_runs(runs_dir: Path, experiment: str, model_sha256: str, host: str, engine_commit: str | None) -> list[Path]:
    """The complete run folders of `experiment` of this model on this host and engine (None: any engine), newest
    first (a folder that fails a check is skipped in one line; one of a format the lab no longer reads, silently:
    it is no `experiment`)."""

    def skipped(run_dir: Path, e: IngestError) -> None:
        if not isinstance(e, UnknownFormat):
            warn_skipped(run_dir, e)

    records = [run_record(f.path, f.manifest, f.name, f.arrived_utc) for f in run_folders(runs_dir, skipped=skipped)]
    mine = [
        r
        for r in complete(records, experiment)
        if (r.host, r.model_sha256) == (host, model_sha256) and engine_commit in (None, r.engine_commit)
    ]
    return [runs_dir / r.path for r in sorted(mine, key=age, reverse=True)]


def newest_run(runs_dir: Path, experiment: str, model_sha256: str, host: str, engine_commit: str) -> Path | None:
    """The newest complete run folder of `experiment` of this model on this host and engine."""
    return next(iter(newest_runs(runs_dir, experiment, model_sha256, host, engine_commit)), None)
