"""The run folders as `lab catalog ls` and `lab catalog show` list them: each folder's run record (an unreadable
one with why), and one run's provenance, inputs, results and tables' row counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.catalog.ingest import IngestError, current_manifest, run_dirs, run_record, run_rows
from lab.catalog.tables import SPEC_BY_NAME, SPECS, RunRecord


def listed_runs(runs_dir: Path) -> list[RunRecord | tuple[str, str]]:
    """Every run folder's record (an unreadable one: its name and why)."""
    out: list[RunRecord | tuple[str, str]] = []
    for d in run_dirs(runs_dir):
        try:
            out.append(run_record(d, current_manifest(d)))
        except IngestError as e:
            out.append((d.name, str(e)))
    return out


def listing_record(runs: list[RunRecord | tuple[str, str]]) -> list[dict[str, Any]]:
    """`lab catalog ls --json`: the records the listing is printed from."""
    return [r.model_dump(mode="json") if isinstance(r, RunRecord) else {"run_id": r[0], "error": r[1]} for r in runs]


def run_detail(folder: Path) -> dict[str, Any]:
    """One run's provenance (the catalog's run record), its inputs and results, and its tables' row counts."""
    m = current_manifest(folder)
    rec = run_record(folder, m)
    tables = {
        name: len(run_rows(folder, m.experiment, name))
        for name in SPEC_BY_NAME
        if rec.in_figures and any(m.experiment in s.experiments for s in SPECS if s.name == name)
    }
    return {"record": rec.model_dump(mode="json"), "params": m.params, "results": m.results, "tables": tables}
