"""The run folders as `lab catalog ls` and `lab catalog show` list them: each folder's run record (an unreadable
one with why), and one run's provenance, inputs, results and tables' row counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.catalog.arrivals import arrived_utc
from lab.catalog.folders import IngestError, current_manifest, run_folders, skipped_line
from lab.catalog.ingest import run_record, run_rows
from lab.catalog.tables import SPEC_BY_NAME, SPECS, RunRecord


def listed_runs(runs_dir: Path) -> list[RunRecord | tuple[str, str]]:
    """Every run folder's record (an unreadable one: its name and why)."""
    out: list[RunRecord | tuple[str, str]] = []

    def unreadable(run_dir: Path, e: IngestError) -> None:
        out.append((run_dir.name, skipped_line(e)))

    for f in run_folders(runs_dir, skipped=unreadable):
        out.append(run_record(f.path, f.manifest, f.name, f.arrived_utc))
    return out


def listing_record(runs: list[RunRecord | tuple[str, str]]) -> list[dict[str, Any]]:
    """`lab catalog ls --json`: the records the listing is printed from."""
    return [r.model_dump(mode="json") if isinstance(r, RunRecord) else {"run_id": r[0], "error": r[1]} for r in runs]


def run_detail(folder: Path) -> dict[str, Any]:
    """One run's provenance (the catalog's run record), its inputs and results, and its tables' row counts."""
    m = current_manifest(folder)
    rec = run_record(folder, m, arrived_utc=arrived_utc(folder))
    tables = {
        name: len(run_rows(folder, m.experiment, name))
        for name in SPEC_BY_NAME
        if rec.in_figures and any(m.experiment in s.experiments for s in SPECS if s.name == name)
    }
    return {"record": rec.model_dump(mode="json"), "params": m.params, "results": m.results, "tables": tables}
