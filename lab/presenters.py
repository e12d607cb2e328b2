"""What the CLI prints, apart from the experiments' own tables: engine info, the run listing, one run's
provenance and a comparison. Each takes the library's records and returns a printable (rich) or text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Column, Table

from lab.catalog.compare import CompareRow, Comparison
from lab.catalog.ingest import IngestError, read_manifest, read_spec, run_dirs, run_record
from lab.catalog.tables import SPECS
from lab.engine.build import EngineInfo


def engine_table(info: EngineInfo) -> Table:
    t = Table(show_header=False)
    for k, v in info.model_dump().items():
        t.add_row(k, str(v))
    return t


def runs_table(runs_dir: Path) -> Table:
    """Every run folder: id, experiment, host, engine commit, status (an unreadable one says why)."""
    t = Table("experiment", "host", "engine", "status", "started (UTC)")
    t.columns.insert(0, Column("run", no_wrap=True))
    for d in run_dirs(runs_dir):
        try:
            r = run_record(d, read_manifest(d))
        except IngestError as e:
            t.add_row(d.name, "?", "?", "?", f"[red]unreadable: {e}[/red]", "")
            continue
        status = r.status if r.status == "complete" else f"[yellow]{r.status}[/yellow] {r.reason}".rstrip()
        t.add_row(r.run_id, r.experiment, r.host, r.engine_commit or "-", status, r.started_utc)
    return t


def run_details(folder: Path) -> list[str]:
    """One run's provenance (the catalog's run record), its inputs and results, and its tables."""
    m = read_manifest(folder)
    rec = run_record(folder, m)
    lines = [f"{field:>14}: {value}" for field, value in rec.model_dump().items() if field != "params_json"]
    lines.append(f"{'params':>14}: {rec.params_json}")
    if m.results:
        lines.append(f"{'results':>14}: {json.dumps(m.results, sort_keys=True)}")
    for spec in SPECS:
        if m.experiment in spec.experiments and rec.in_figures:
            lines.append(f"{'table':>14}: {spec.name} ({len(read_spec(folder, spec))} rows)")
    return lines


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def _ratio_cell(r: CompareRow) -> str:
    if r.ci is None:
        return "-" if r.ratio is None else f"{r.ratio:.3f}"
    if not r.significant:
        return f"[dim]{r.ci.fmt()} within noise[/dim]"
    style = "red" if r.ci.value > 1 else "green"
    return f"[{style}]{r.ci.fmt()} {'slower' if r.ci.value > 1 else 'faster'}[/{style}]"


def compare_table(c: Comparison) -> Table:
    """B/A per key and metric with its 95% interval from both runs' samples: significant slowdowns red,
    speedups green, the rest marked within noise; then the geometric mean over the grid per metric."""
    t = Table(*c.keys, "metric", "A", "B", "B/A [95%]", title=f"A = {c.run_a}\nB = {c.run_b}")
    for r in c.rows:
        t.add_row(*(_fmt(k) for k in r.key), r.metric, _fmt(r.a), _fmt(r.b), _ratio_cell(r))
    for r in c.summary:
        t.add_row("geomean", *[""] * (len(c.keys) - 1), r.metric, "", "", _ratio_cell(r), end_section=False)
    return t
