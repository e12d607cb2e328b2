"""The newest complete run of an experiment per (host, model): the one choice behind the catalog's headline,
`lab sweep`'s closing table and a sweep's plan (the spread of the newest sweep measured here)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from lab.catalog.ingest import IngestError, read_manifest, run_dirs, run_record
from lab.catalog.tables import RunRecord


def newest(records: Iterable[RunRecord], experiment: str) -> list[RunRecord]:
    """The newest complete run of `experiment` per (host, model sha256), newest first: the one choice behind the
    catalog's headline and `lab sweep`'s closing table."""
    best: dict[tuple[str, str], RunRecord] = {}
    mine = (r for r in records if r.experiment == experiment and r.in_figures)
    for r in sorted(mine, key=lambda r: (r.started_utc, r.run_id)):
        best[(r.host, r.model_sha256)] = r
    return sorted(best.values(), key=lambda r: (r.started_utc, r.run_id), reverse=True)


def newest_run(runs_dir: Path, experiment: str, model_sha256: str, host: str) -> Path | None:
    """The newest complete run folder of `experiment` of this model on this host."""
    records = []
    for d in run_dirs(runs_dir):
        try:
            records.append(run_record(d, read_manifest(d)))
        except IngestError:
            continue
    r = next((r for r in newest(records, experiment) if (r.host, r.model_sha256) == (host, model_sha256)), None)
    return None if r is None else runs_dir / r.path
