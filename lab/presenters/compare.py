"""`lab compare`'s table: B/A per key and metric with its interval, each row called at the comparison's tolerance
(one vocabulary and colour, lab.core.verdicts), then the geometric means (lab.catalog.compare.Comparison)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from lab.catalog.compare import CompareRow, Comparison
from lab.core.console import shown
from lab.core.verdicts import styled


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def _called_cell(r: CompareRow, called: str | None) -> str:
    """The interval in its row's verdict's colour (the verdict itself in a column of its own)."""
    if r.ci is None:
        return "-" if r.ratio is None else f"{r.ratio:.3f}"
    return styled(called, r.ci.fmt()) if called else r.ci.fmt()


def compare_table(c: Comparison, wide: bool = False) -> Table:
    """B/A per key and metric with its 95% interval from both runs' samples, each row called faster, slower
    (lower, higher for a ratio of two arms), the same or undecided at the comparison's tolerance, in its
    verdict's colour; then the geometric mean over the grid per metric. `wide`: each side's value (A, B) and
    what each interval is over in columns of their own (by default what the intervals are over is said once
    when it is the same for all rows)."""
    within = any(r.ci is not None and r.ci.processes < 2 for r in c.rows)
    caption = (
        "within-run: a run measured in one process; its interval misses what a rerun varies by, so a difference "
        "called there may be the next run's noise"
        if within
        else "one run, both configurations in alternating processes: each interval resamples the process pairs (a "
        "process of each side, next in time), then the reps, the same draws on both sides, so the host's drift from "
        f"one minute to the next falls on both; 'called' at 1 +- {c.tolerance:.0%}"
        if c.paired and c.tolerance is not None
        else f"each interval carries both runs' spread between processes and a run-to-run drift of {c.drift:.1%} "
        "(--run-drift, from the A/A test: docs/repetition.md)"
        if c.drift > 0
        else "each interval carries both runs' spread between processes, not a drift of the host between the two "
        "runs (--run-drift: docs/repetition.md, the A/A test; interleave them in one run with --vs: docs/versus.md)"
    )
    if not c.paired and c.tolerance is not None:
        caption += f"; 'called' at 1 +- {c.tolerance:.0%}"
    if c.kind.paired:
        caption += "; a ratio of two arms paired by rep (fake / genuine, back to back in one process) carries no drift"
    called = c.tolerance is not None
    scopes = {_scope(r, c) for r in [*c.rows, *c.summary] if r.ci}
    over = wide or len(scopes) > 1
    if not over and scopes:
        caption += f"; every interval over {scopes.pop()}"
    t = Table(
        *c.keys,
        "metric",
        *(["A", "B"] if wide else []),
        "B/A [95%]",
        *(["called"] if called else []),
        *(["interval over"] if over else []),
        title=f"A = {c.run_a}\nB = {c.run_b}\n{shown(c.model_line())}",  # a host's file name is not markup
        caption=caption,
    )
    for r in [*c.rows, *c.summary]:
        scope = _scope(r, c)
        verdict = [r.called(c.tolerance)] if c.tolerance is not None else []
        cell = _called_cell(r, verdict[0] if verdict else None)
        key = [shown(_fmt(k)) for k in r.key] if r.key else ["geomean", *[""] * (len(c.keys) - 1)]  # a task id: text
        a, b = (_fmt(r.a), _fmt(r.b)) if r.key else ("", "")
        t.add_row(*key, r.metric, *([a, b] if wide else []), cell, *map(styled, verdict), *([scope] if over else []))
    return t


def _scope(r: CompareRow, c: Comparison) -> str:
    return r.ci.scope.replace("processes", "process pairs") if r.ci and c.paired else r.ci.scope if r.ci else ""
