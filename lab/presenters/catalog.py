"""The catalog's tables: the run listing (`lab catalog ls`), one run's provenance (`lab catalog show`), and the
headline (`lab catalog headline`, the end of `lab sweep`) from its record (lab.catalog.headline.headline)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Column, Table

from lab.catalog.headline import Headline, HeadlineProfile, HeadlineStep, headline
from lab.catalog.tables import RunRecord
from lab.core.console import shown
from lab.core.errors import plain


def runs_listing(runs: list[RunRecord | tuple[str, str]]) -> Table:
    """Every run folder: id, experiment, host, engine commit, status (an unreadable one says why)."""
    t = Table("experiment", "host", "engine", "status", "started (UTC)")
    t.columns.insert(0, Column("run", no_wrap=True))
    for r in runs:  # every string of a record is the folder's: shown as text (lab.core.console.shown)
        if not isinstance(r, RunRecord):
            t.add_row(shown(r[0]), "?", "?", "?", f"[red]unreadable: {shown(r[1])}[/red]", "")
            continue
        status = (
            shown(r.status) if r.status == "complete" else f"[yellow]{r.status}[/yellow] {shown(r.reason)}".rstrip()
        )
        cells = (r.run_id, r.experiment, r.host, r.engine_commit or "-")
        t.add_row(*map(shown, cells), status, shown(r.started_utc))
    return t


def run_details(detail: dict[str, Any]) -> list[str]:
    """`lab catalog show`: the run's detail as lines."""
    rec = detail["record"]  # printed as it is (not markup), its control characters shown (lab.core.console.plain)
    lines = [f"{field:>14}: {plain(value)}" for field, value in rec.items() if field != "params_json"]
    lines.append(f"{'params':>14}: {plain(rec['params_json'])}")
    if detail["results"]:
        lines.append(f"{'results':>14}: {json.dumps(detail['results'], sort_keys=True)}")
    lines += [f"{'table':>14}: {name} ({n} rows)" for name, n in detail["tables"].items()]
    return lines


def headline_tables(h: Headline) -> list[Table]:
    """The answer per host and model: the step with the cache, re-prefilled, the speedup; where time goes."""
    out = []
    for table in h.tables:
        t = Table(*table.columns, title=shown(table.title))  # a host or model name: text, not markup
        for row in table.rows:  # hosts' and models' names among them: text, not markup
            t.add_row(*map(shown, row))
        out.append(t)
    return out


def print_headline(
    console: Console, steps: list[HeadlineStep], profiles: list[HeadlineProfile], empty: str | None = None
) -> None:
    """The answer (`lab catalog headline`, the end of `lab sweep`): its tables, then its lines in words (`empty`
    when there are none)."""
    h = headline(steps, profiles)
    for t in headline_tables(h):
        console.print(t)
    for line in h.lines or ([empty] if empty else []):
        console.print(shown(line), highlight=False)
