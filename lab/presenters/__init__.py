"""What the CLI prints, apart from the experiments' own tables: engine info, the run listing, one run's
provenance, a comparison, the cost model and the headline. Each takes the library's records and returns a
printable (rich) or text; `print_headline` prints the headline itself, wherever it is printed.

They format the records they are given: they may import the records of the catalog, the conversation, the
measurement parts, the engine and the core; never an experiment, an engine build or server, the run folders
(lab.core.runs), a report or the CLI (pyproject.toml, [tool.importlinter]). What builds, runs or reads the runs
folder is the experiments' (the CLI calls it and passes the result here).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from lab.catalog.compare import CompareRow, Comparison
from lab.catalog.headline import HeadlineProfile, HeadlineStep, summary_lines
from lab.catalog.tables import RunRecord
from lab.core.schemas import BANDS, cell
from lab.measure.costmodel import CostModel, band_label
from lab.measure.timemodel import TimePrediction


def engine_table(info: BaseModel) -> Table:
    """`lab engine info`: the built engine's record (lab.engine.build.EngineInfo), a field a row."""
    t = Table(show_header=False)
    for k, v in info.model_dump().items():
        t.add_row(k, str(v))
    return t


def runs_listing(runs: list[RunRecord | tuple[str, str]]) -> Table:
    """Every run folder: id, experiment, host, engine commit, status (an unreadable one says why)."""
    t = Table("experiment", "host", "engine", "status", "started (UTC)")
    t.columns.insert(0, Column("run", no_wrap=True))
    for r in runs:
        if not isinstance(r, RunRecord):
            t.add_row(r[0], "?", "?", "?", f"[red]unreadable: {r[1]}[/red]", "")
            continue
        status = r.status if r.status == "complete" else f"[yellow]{r.status}[/yellow] {r.reason}".rstrip()
        t.add_row(r.run_id, r.experiment, r.host, r.engine_commit or "-", status, r.started_utc)
    return t


def run_details(detail: dict[str, Any]) -> list[str]:
    """`lab catalog show`: the run's detail as lines."""
    rec = detail["record"]
    lines = [f"{field:>14}: {value}" for field, value in rec.items() if field != "params_json"]
    lines.append(f"{'params':>14}: {rec['params_json']}")
    if detail["results"]:
        lines.append(f"{'results':>14}: {json.dumps(detail['results'], sort_keys=True)}")
    lines += [f"{'table':>14}: {name} ({n} rows)" for name, n in detail["tables"].items()]
    return lines


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def _ratio_cell(r: CompareRow, paired: bool) -> str:
    if r.ci is None:
        return "-" if r.ratio is None else f"{r.ratio:.3f}"
    if not r.significant:
        return f"[dim]{r.ci.fmt()} within noise[/dim]"
    if paired:  # a ratio of two arms, not a time: higher or lower, neither better
        return f"[yellow]{r.ci.fmt()} {'higher' if r.ci.value > 1 else 'lower'}[/yellow]"
    style = "red" if r.ci.value > 1 else "green"
    return f"[{style}]{r.ci.fmt()} {'slower' if r.ci.value > 1 else 'faster'}[/{style}]"


CALLED_STYLE = {"faster": "green", "slower": "red", "same": "dim", "undecided": "default"}


def _called_cell(r: CompareRow, called: str) -> str:
    """The interval alone where the row is called (one verdict per row, in its own column)."""
    if r.ci is None:
        return "-" if r.ratio is None else f"{r.ratio:.3f}"
    return f"[{CALLED_STYLE[called]}]{r.ci.fmt()}[/{CALLED_STYLE[called]}]"


def compare_table(c: Comparison) -> Table:
    """B/A per key and metric with its 95% interval from both runs' samples: significant slowdowns red,
    speedups green, the rest marked within noise; then the geometric mean over the grid per metric. The two
    sides of an interleaved run also get each row called at the run's tolerance."""
    within = any(r.ci is not None and r.ci.processes < 2 for r in c.rows)
    caption = (
        "within-run: a run measured in one process; its interval misses what a rerun varies by, so a difference "
        "called significant there may be the next run's noise"
        if within
        else "one run, both configurations in alternating processes: each interval resamples the slots (a process "
        "of each side, next in time), then the reps, the same draws on both sides, so the host's drift from one "
        f"minute to the next falls on both; 'called' at 1 +- {c.tolerance:.0%}"
        if c.paired and c.tolerance is not None
        else f"each interval carries both runs' spread between processes and a run-to-run drift of {c.drift:.1%} "
        "(--run-drift, from the A/A test: docs/repetition.md)"
        if c.drift > 0
        else "each interval carries both runs' spread between processes, not a drift of the host between the two "
        "runs (--run-drift: docs/repetition.md, the A/A test; interleave them in one run with --vs: docs/versus.md)"
    )
    if c.kind.paired:
        caption += "; a ratio of two arms run back to back in one process (fake / genuine) carries no drift"
    called = c.tolerance is not None
    t = Table(
        *c.keys,
        "metric",
        "A",
        "B",
        "B/A [95%]",
        *(["called"] if called else []),
        "interval over",
        title=f"A = {c.run_a}\nB = {c.run_b}\n{escape(c.model_line())}",  # a host's file name is not markup
        caption=caption,
    )
    for r in [*c.rows, *c.summary]:
        scope = r.ci.scope.replace("processes", "slots") if r.ci and c.paired else r.ci.scope if r.ci else ""
        verdict = [r.called(c.tolerance)] if c.tolerance is not None else []
        cell = _called_cell(r, verdict[0]) if verdict else _ratio_cell(r, r.metric in c.kind.paired)
        key = [_fmt(k) for k in r.key] if r.key else ["geomean", *[""] * (len(c.keys) - 1)]
        a, b = (_fmt(r.a), _fmt(r.b)) if r.key else ("", "")
        t.add_row(*key, r.metric, a, b, cell, *verdict, scope)
    return t


def cost_tables(m: CostModel, depths: list[int]) -> list[Any]:
    """`lab model cost`: every term at the first depth, then each band's FLOPs per token and arithmetic intensity
    at every depth, then the predicted crossover and attention slope."""
    h, c = m.h, m.chunk
    kinds = ", ".join(f"{h.count(k)} {k}" for k in ("attention", "sliding", "recurrent") if h.count(k))
    weights = f"{h.weight_bits:g} bits per weight"
    if m.band_bits:
        per = ", ".join(f"{band_label(b, h)} {m.band_bits[b]:.3g}" for b in BANDS if b in m.band_bits)
        weights = f"{per} bits per weight, from the tensor types"
    head = (
        f"{h.arch}: {h.n_layer} layers ({kinds}), n_embd {h.n_embd}, vocab {h.n_vocab:,}, {h.file_type} "
        f"({weights}); a chunk of {c} tokens"
    )
    terms = Table(
        "term",
        "band",
        "layers",
        "MFLOP/token",
        "MB/chunk",
        "formula (per layer)",
        title=f"the terms of a chunk at depth {depths[0]}",
    )
    for t in m.terms(depths[0]):
        terms.add_row(
            t.name, t.band, f"{t.layers} {t.kind}", f"{t.flops / c / 1e6:.4g}", f"{t.bytes / 1e6:.4g}", t.formula
        )
    bands = Table(
        "depth", *(band_label(b, h) for b in BANDS), "total", title="MFLOP per token by band (FLOP per byte moved)"
    )
    for d in depths:
        cost = m.bands(d)
        total = sum(x.flops for x in cost.values()) / c / 1e6
        bands.add_row(
            str(d), *(f"{cost[b].flops / c / 1e6:.4g} ({cost[b].intensity:.3g})" for b in BANDS), f"{total:.4g}"
        )
    cross = m.crossover()
    tail = (
        f"predicted crossover (attn_core FLOPs = ffn_moe FLOPs): "
        f"{'none' if cross is None else f'depth {cross:,.0f}'}; attention adds "
        f"{m.attn_flops_per_token_per_1k() / 1e6:.4g} MFLOP per token per 1,000 tokens of depth"
    )
    return [head, terms, bands, tail]


def time_tables(p: TimePrediction, m: CostModel) -> list[Any]:
    """`lab model cost --rates`: each band's predicted ms/token [95% interval] at every depth, the rates they come
    from, and the crossover in time beside the FLOP one."""
    depths = sorted({r.depth for r in p.at})
    names = [band_label(b, m.h) for b in BANDS]
    t = Table("depth", *names, "total", title=f"predicted ms per token by band [95% interval], {p.model}")
    for d in depths:
        t.add_row(str(d), *(cell(p.band_at(d, b), 4) for b in (*BANDS, "total")))
    rates = ", ".join(
        f"{b} {r.gflops.fmt(digits=1)} GFLOP/s" if r.gflops else f"{b} {cell(r.overhead_ms_per_token, 4)} ms flat"
        for b, r in p.rates.items()
    )
    oh = p.rates["attn_core"].overhead_ms_per_token if "attn_core" in p.rates else None
    t.caption = f"rates from {p.source}: {rates}" + (
        f" (+ attn_core {oh.fmt(digits=4)} ms/token that does not grow)"
        if oh is not None and p.rates["attn_core"].gflops
        else ""
    )
    moved = {b: t for b, t in p.trend.items() if abs(t - 1) >= 0.005}
    if moved:
        t.caption += "; the rates' trend per doubling of depth, inside the intervals: " + ", ".join(
            f"{b} x{x:.3f}" for b, x in moved.items()
        )
    cross = p.crossover.fmt(digits=0) if p.crossover else "none"
    note = f" ({p.crossover_note})" if p.crossover_note else ""
    flop = "none" if p.flop_crossover is None else f"{p.flop_crossover:,.0f}"
    return [t, f"predicted crossover in time (attn_core ms/token = ffn_moe's): {cross}{note}; from FLOPs: {flop}"]


def headline_tables(steps: list[HeadlineStep], profiles: list[HeadlineProfile]) -> list[Table]:
    """The answer per host and model: the step with the cache, re-prefilled, the speedup; where time goes."""
    out = []
    if steps:
        t = Table(
            "host",
            "model",
            "L",
            "new",
            "with the cache (ms)",
            "re-prefilled (ms)",
            "speedup",
            title="an agent step's prefill: the first L tokens cached (fake prefix) vs re-prefilled "
            "(baseline); medians and speedup [95% interval]",
        )
        for s in steps:
            new = f"{s.new} + {s.image}" if s.image else str(s.new)
            t.add_row(s.host, s.model, str(s.L), new, cell(s.cached_ms, 1), cell(s.reprefill_ms, 1), cell(s.speedup, 1))
        out.append(t)
    if profiles:
        t = Table(
            "host",
            "model",
            "depth",
            *BANDS,
            "crossover (measured)",
            "predicted",
            title="where a prefill chunk's time goes at the deepest profiled depth (newest profile)",
        )
        for p in profiles:
            shares = (f"{p.shares[b]:.0%}" for b in BANDS)
            t.add_row(p.host, p.model, str(p.depth), *shares, p.crossover_text, p.predicted_text)
        out.append(t)
    return out


def print_headline(
    console: Console, steps: list[HeadlineStep], profiles: list[HeadlineProfile], empty: str | None = None
) -> None:
    """The answer (`lab catalog headline`, the end of `lab sweep`): its tables, then its lines in words (`empty`
    when there are none)."""
    for t in headline_tables(steps, profiles):
        console.print(t)
    for line in summary_lines(steps, profiles) or ([empty] if empty else []):
        console.print(line, highlight=False)


def cost_report_parts(model: CostModel, depths: list[int], timed: TimePrediction | None) -> list[Any]:
    """What `lab model cost` prints (lab.experiments.profile.rates.CostReport): the cost model's tables, then the
    time model's with --rates, in order."""
    times = time_tables(timed, model) if timed else []
    return cost_tables(model, depths) + times
