"""`lab rebuild exact|span|cost`: run the pure-Python rebuild labs and land their results in a run folder
like every other experiment: the printed tables (raw/tables.txt), JSON rows per table, and provenance."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from pydantic import BaseModel
from rich.console import Console

from lab.core.errors import UsageError
from lab.core.rawtable import RawTable
from lab.core.runs import RunFolder
from lab.core.schemas import RebuildCostRow, RebuildExactRow, RebuildRowWork, RebuildSpanRow
from lab.core.schemas.raw import REBUILD_COST, REBUILD_EXACT, REBUILD_ROW_WORK, REBUILD_SPAN
from lab.core.settings import RebuildSettings, Settings
from lab.experiments.protocol import Experiment, OpenRun, Outcome, RunParts, run_experiment
from lab.rebuild import cost, span, tables, toy


@dataclass
class LabResult:
    text: str  # what the command prints (the tables)
    tables: dict[RawTable[Any], list[Any]]  # rows per table
    summary: dict[str, Any]
    ok: bool = True  # False: a check failed (the run is still written, marked failed)


def exact_lab(p: RebuildSettings) -> LabResult:
    x = Fraction(p.next_input) if p.next_input is not None else Fraction(p.length + 1)
    inputs = toy.integers(p.length)
    comps = [toy.compare(inputs, p.depth, p.window, p.keep, x, shared) for shared in (True, False)]
    rows: list[BaseModel] = [
        RebuildExactRow(
            kv_source="shared" if c.kv_source == "shared" else "per-layer",
            window=p.window,
            depth=p.depth,
            length=p.length,
            keep=p.keep,
            next_input=str(x),
            last_full=str(c.last_full),
            last_suffix=str(c.last_suffix),
            next_full=str(c.next_full),
            next_suffix=str(c.next_suffix),
            last_full_value=float(c.last_full),
            last_suffix_value=float(c.last_suffix),
            next_full_value=float(c.next_full),
            next_suffix_value=float(c.next_suffix),
            first_diff_layer=c.first_diff[0] if c.first_diff else None,
            first_diff_pos=c.first_diff[1] if c.first_diff else None,
            exact=c.exact,
        )
        for c in comps
    ]
    head = (
        f"inputs 1..{p.length}, {p.depth} layers, window {p.window}; rebuild from the last {p.keep} inputs, "
        f"then one decode step with input {x}"
    )
    text = "\n".join([head, "", tables.exact_table(comps), "", *(tables.first_diff_line(c) for c in comps)])
    return LabResult(text, {REBUILD_EXACT: rows}, {"exact": {c.kv_source: c.exact for c in comps}})


def span_lab(p: RebuildSettings) -> LabResult:
    verdicts = span.check_all(p.span_windows, p.span_depths)
    rows: list[BaseModel] = [RebuildSpanRow.model_validate(v, from_attributes=True) for v in verdicts]
    head = (
        "R = W + (D-1)(W-1); every 0/1 input of length R+2: shared rebuild of W and per-layer rebuild of R "
        "reproduce the final row, the retained KV and one decode step; per-layer R-1 changes a result"
    )
    total = sum(v.cases for v in verdicts)
    all_ok = all(v.ok for v in verdicts)
    summary = {"cases": total, "all_ok": all_ok}
    return LabResult(f"{head}\n\n{tables.span_table(verdicts)}", {REBUILD_SPAN: rows}, summary, ok=all_ok)


def cost_lab(p: RebuildSettings) -> LabResult:
    check = cost.check_formulas()
    work: dict[str, dict[str, cost.Work]] = {}
    rows: list[BaseModel] = []
    for case, chunk in cost.EXAMPLES.items():
        work[case] = {}
        for mode in cost.MODES:
            w = cost.consumer_work(chunk, p.cost_window, p.cost_keep, mode)
            ref = cost.reference_work(chunk, p.cost_window, p.cost_keep, mode)
            if w != ref:
                check.mismatches.append(f"example {case} {mode}: formula {w}, reference {ref}")
            work[case][mode] = w
            setting = {"case": case, "window": p.cost_window, "keep": p.cost_keep, "mode": mode}
            reference = {"reference_rows": ref.rows, "reference_pairs": ref.pairs}
            rows.append(RebuildCostRow.model_validate({**setting, **asdict(chunk), **asdict(w), **reference}))
    rw = [cost.row_work(n, p.producer_layers, p.consumer_layers, p.row_keep) for n in p.lengths]
    layers = {"producer_layers": p.producer_layers, "consumer_layers": p.consumer_layers, "keep": p.row_keep}
    rw_rows: list[BaseModel] = [RebuildRowWork.model_validate({**asdict(r), **layers, "ratio": r.ratio}) for r in rw]
    per_chunk = cost.chunked_consumer_rows(p.chunked_length, p.chunk, p.row_keep)
    one = cost.chunked_consumer_rows(p.chunked_length, p.chunked_length, p.row_keep)[0]
    verdict = f"formulas vs pair-enumerating reference: {check.cases:,} cases, " + (
        "all agree" if not check.mismatches else f"{len(check.mismatches)} MISMATCH(ES):"
    )
    text = "\n".join(
        [
            tables.cost_table(p.cost_window, p.cost_keep, work),
            "",
            tables.row_work_table(rw, p.producer_layers, p.consumer_layers, p.row_keep),
            "",
            tables.chunked_line(p.chunked_length, p.chunk, p.row_keep, per_chunk, one),
            "",
            verdict,
            *check.mismatches[:20],
        ]
    )
    summary = {
        "formula_cases": check.cases,
        "mismatches": len(check.mismatches),
        "chunked": {
            "length": p.chunked_length,
            "chunk": p.chunk,
            "keep": p.row_keep,
            "per_chunk": per_chunk,
            "total": sum(per_chunk),
            "one_chunk": one,
        },
    }
    return LabResult(text, {REBUILD_COST: rows, REBUILD_ROW_WORK: rw_rows}, summary, ok=not check.mismatches)


LABS: dict[str, Callable[[RebuildSettings], LabResult]] = {"exact": exact_lab, "span": span_lab, "cost": cost_lab}


class RebuildLab(Experiment):
    """One rebuild lab (`exact`, `span` or `cost`): pure Python, no engine. Its result is computed in `prepare`,
    so bad options never leave a run folder behind; `measure` writes it into the run."""

    needs_engine = False
    records = ("rebuild",)

    def __init__(self, which: str) -> None:
        if which not in LABS:
            raise UsageError(f"unknown rebuild lab {which!r}; one of {', '.join(LABS)}")
        self.which = which
        self.name = f"rebuild_{which}"  # one experiment name per lab
        self.result: LabResult | None = None

    def prepare(self, settings: Settings, parts: RunParts) -> None:
        try:
            self.result = LABS[self.which](settings.rebuild)
        except (ValueError, ArithmeticError) as e:
            raise UsageError(f"rebuild {self.which}: {e}") from e

    def measure(self, sess: OpenRun, console: Console) -> Outcome:
        result = self.result
        assert result is not None
        for table, rows in result.tables.items():
            sess.run.rewrite(table, rows)
        sess.run.write_raw("tables.txt", result.text + "\n")
        sess.run.write_raw("summary.json", json.dumps(result.summary, indent=2) + "\n")
        return Outcome(failure="" if result.ok else "a rebuild check failed; see raw/tables.txt")


def run_rebuild_lab(settings: Settings, which: str, console: Console | None = None) -> tuple[RunFolder, LabResult]:
    """Run one lab and write its run folder (tables.txt, one JSONL per table, summary.json, provenance)."""
    lab = RebuildLab(which)
    run = run_experiment(lab, settings, console=console)
    assert lab.result is not None
    return run, lab.result


def lab_output(run: RunFolder, result: LabResult, as_json: bool) -> str:
    """What `lab rebuild ...` prints: the tables then the run folder, or (--json) one document with the run
    folder under 'run', whether every check held, the summary and the rows of each table."""
    if not as_json:
        return f"{result.text}\n{run.path}"
    tables = {k.name: [r.model_dump(mode="json") for r in rows] for k, rows in result.tables.items()}
    return json.dumps({"run": str(run.path), "ok": result.ok, "summary": result.summary, **tables}, indent=2)
