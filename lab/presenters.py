"""What the CLI prints, apart from the experiments' own tables: engine info, the run listing, one run's
provenance and a comparison. Each takes the library's records and returns a printable (rich) or text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Column, Table

from lab.catalog.compare import Comparison
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


def compare_table(c: Comparison, tolerance: float) -> Table:
    """B/A per key and metric; ratios beyond `tolerance` red (slower) or green (faster)."""
    t = Table(*c.keys, "metric", "A", "B", "B/A", title=f"A = {c.run_a}\nB = {c.run_b}")
    for r in c.rows:
        ratio = r.ratio
        style = "" if ratio is None or abs(ratio - 1) <= tolerance else ("red" if ratio > 1 else "green")
        cell = "-" if ratio is None else (f"[{style}]{ratio:.3f}[/{style}]" if style else f"{ratio:.3f}")
        t.add_row(*(_fmt(k) for k in r.key), r.metric, _fmt(r.a), _fmt(r.b), cell)
    return t
