"""`lab replay exact|span|cost` (seed 001): run the pure-Python labs and land their results in a run folder
like every other experiment: the printed tables (raw/tables.txt), JSON rows per table, and provenance."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from pydantic import BaseModel

from lab import __version__
from lab.replay import cost, span, tables, toy
from lab.runs import RunError, RunFolder
from lab.schemas import ReplayCostRow, ReplayExactRow, ReplayRowWork, ReplaySpanRow
from lab.settings import REPO_ROOT, ReplaySettings, Settings
from lab.snapshot import snapshot_git, snapshot_host
from lab.target import LocalTarget

EXACT, SPAN, COST, ROW_WORK = "replay_exact", "replay_span", "replay_cost", "replay_row_work"


@dataclass
class LabResult:
    text: str  # what the command prints (the seed's tables)
    tables: dict[str, list[BaseModel]]  # JSON rows per table
    summary: dict[str, Any]
    ok: bool = True  # False: a check failed (the run is still written, marked failed)


def exact_lab(p: ReplaySettings) -> LabResult:
    x = Fraction(p.next_input) if p.next_input is not None else Fraction(p.length + 1)
    inputs = toy.integers(p.length)
    comps = [toy.compare(inputs, p.depth, p.window, p.keep, x, shared) for shared in (True, False)]
    rows: list[BaseModel] = [
        ReplayExactRow(
            kv_source="shared" if c.kv_source == "shared" else "per-layer",
            window=p.window, depth=p.depth, length=p.length, keep=p.keep, next_input=str(x),
            last_full=str(c.last_full), last_suffix=str(c.last_suffix),
            next_full=str(c.next_full), next_suffix=str(c.next_suffix),
            last_full_value=float(c.last_full), last_suffix_value=float(c.last_suffix),
            next_full_value=float(c.next_full), next_suffix_value=float(c.next_suffix),
            first_diff_layer=c.first_diff[0] if c.first_diff else None,
            first_diff_pos=c.first_diff[1] if c.first_diff else None,
            exact=c.exact,
        )
        for c in comps
    ]  # fmt: skip
    head = (
        f"inputs 1..{p.length}, {p.depth} layers, window {p.window}; replay of the last {p.keep} inputs, "
        f"then one decode step with input {x}"
    )
    text = "\n".join([head, "", tables.exact_table(comps), "", *(tables.first_diff_line(c) for c in comps)])
    return LabResult(text, {EXACT: rows}, {"exact": {c.kv_source: c.exact for c in comps}})


def span_lab(p: ReplaySettings) -> LabResult:
    verdicts = span.check_all(p.span_windows, p.span_depths)
    rows: list[BaseModel] = [
        ReplaySpanRow(
            window=v.window, depth=v.depth, span=v.span, cases=v.cases,
            shared_window_exact=v.shared_window_exact, per_layer_span_exact=v.per_layer_span_exact,
            shorter_fails=v.shorter_fails, counterexample=v.counterexample, ok=v.ok,
        )
        for v in verdicts
    ]  # fmt: skip
    head = (
        "R = W + (D-1)(W-1); every 0/1 input of length R+2: shared replay of W and per-layer replay of R "
        "reproduce the final row, the retained KV and one decode step; per-layer R-1 changes a result"
    )
    total = sum(v.cases for v in verdicts)
    all_ok = all(v.ok for v in verdicts)
    summary = {"cases": total, "all_ok": all_ok}
    return LabResult(f"{head}\n\n{tables.span_table(verdicts)}", {SPAN: rows}, summary, ok=all_ok)


def cost_lab(p: ReplaySettings) -> LabResult:
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
            rows.append(
                ReplayCostRow(
                    case=case, window=p.cost_window, keep=p.cost_keep, length=chunk.length, start=chunk.start,
                    end=chunk.end, valid_start=chunk.valid_start, mode=mode, rows=w.rows, pairs=w.pairs,
                    reference_rows=ref.rows, reference_pairs=ref.pairs,
                )
            )  # fmt: skip
    rw = [cost.row_work(n, p.producer_layers, p.consumer_layers, p.row_keep) for n in p.lengths]
    rw_rows: list[BaseModel] = [
        ReplayRowWork(
            length=r.length, producer_layers=p.producer_layers, consumer_layers=p.consumer_layers, keep=p.row_keep,
            full=r.full, compact=r.compact, ratio=r.ratio,
        )
        for r in rw
    ]  # fmt: skip
    per_chunk = cost.chunked_consumer_rows(p.chunked_length, p.chunk, p.row_keep)
    one = cost.chunked_consumer_rows(p.chunked_length, p.chunked_length, p.row_keep)[0]
    verdict = f"formulas vs pair-enumerating reference: {check.cases:,} cases, " + (
        "all agree" if not check.mismatches else f"{len(check.mismatches)} MISMATCH(ES):"
    )
    text = "\n".join(
        [
            tables.cost_table(p.cost_window, p.cost_keep, work), "",
            tables.row_work_table(rw, p.producer_layers, p.consumer_layers, p.row_keep), "",
            tables.chunked_line(p.chunked_length, p.chunk, p.row_keep, per_chunk, one), "",
            verdict, *check.mismatches[:20],
        ]
    )  # fmt: skip
    summary = {
        "formula_cases": check.cases,
        "mismatches": len(check.mismatches),
        "chunked": {"length": p.chunked_length, "chunk": p.chunk, "keep": p.row_keep, "per_chunk": per_chunk,
                    "total": sum(per_chunk), "one_chunk": one},
    }  # fmt: skip
    return LabResult(text, {COST: rows, ROW_WORK: rw_rows}, summary, ok=not check.mismatches)


LABS: dict[str, Callable[[ReplaySettings], LabResult]] = {"exact": exact_lab, "span": span_lab, "cost": cost_lab}


def run_replay_lab(settings: Settings, which: str) -> tuple[RunFolder, LabResult]:
    """Run one lab and write its run folder (tables.txt, one JSONL per table, summary.json, provenance)."""
    if which not in LABS:
        raise RunError(f"unknown replay lab {which!r}; one of {', '.join(LABS)}")
    result = LABS[which](settings.replay)  # compute first: bad options never leave a run folder behind
    target = LocalTarget(settings.host_name)
    run = RunFolder.create(
        settings.runs_dir, f"replay_{which}", target.name, {"replay": settings.replay.model_dump(mode="json")}
    )
    with run.guard():
        host = snapshot_host(target, run.path / "host")
        lab_git = snapshot_git(REPO_ROOT, run.path / "git")
        lab = {"version": __version__, "commit": lab_git["commit"], "dirty": lab_git["dirty"]}
        run.update(host_summary=host, lab=lab)
        for name, rows in result.tables.items():
            run.rewrite(name, rows)
        (run.path / "raw" / "tables.txt").write_text(result.text + "\n")
        (run.path / "raw" / "summary.json").write_text(_json(result.summary))
        if not result.ok:
            run.fail("a replay check failed; see raw/tables.txt")
        else:
            run.complete()
    return run, result


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=2) + "\n"
