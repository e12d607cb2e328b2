"""The sweep's terminal tables, one per place (through the server, in one process): one row per stored
SweepPoint, then each point's notes and the verdict counts, and the cache read in words from ArmsSummary."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from lab.core.console import key_columns
from lab.core.schemas import (
    BATCH_CHUNK,
    FILL_PASSES,
    ArmsSummary,
    ArmStats,
    Components,
    Interval,
    SweepPoint,
    Where,
    cell,
)
from lab.core.stats import reps_per_process

VERDICT_STYLE = {"agree": "green", "disagree": "red", "undecided": "yellow"}


def ms_text(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def arm_cell(a: ArmStats) -> str:
    """`12.3 [11.9, 12.8]`: the median ms and its 95% interval (the median alone from fewer than two samples)."""
    iv = a.median
    return ms_text(a.median_ms) if iv is None or a.n_ok < 2 else iv.fmt(digits=1)


def _est(p: SweepPoint) -> str:
    iv = p.estimate_ci
    if p.opt_prefill_ms is None or iv is None or iv.n < 2:
        return ms_text(p.opt_prefill_ms)
    return f"{p.opt_prefill_ms:.1f} [{iv.lo:.1f}-{iv.hi:.1f}]{iv.thin_note()}"


def _ratio(iv: Interval | None, v: str | None = None) -> str:
    if iv is None:
        return "-"
    return iv.fmt(pct=True) + (f" [{VERDICT_STYLE[v]}]{v}[/{VERDICT_STYLE[v]}]" if v else "")


TITLES: dict[Where, str] = {
    "server": "through llama-server: median prompt_ms per arm [95% interval] vs the estimate only_new / "
    "prefill_tps(L) + encode; ratios paired by rep, with their interval and verdict",
    "inproc": "in one process (libllama, no server): median decode ms of the new tokens [95% interval] vs the "
    "estimate, the chunk at depth L beside every rep; ratios paired by rep",
}
FILL_TITLE = (  # in one process, a run from before the estimate stood beside the reps
    "in one process (libllama, no server): median decode ms of the new tokens [95% interval]; the estimate is "
    "the fill passes' chunk at depth L; ratios paired by rep (the estimate's unpaired)"
)


@dataclass(frozen=True)
class Column:
    """A column of the sweep's table: its header, a point's cell, and whether a run's points show it."""

    header: str
    cell: Callable[[SweepPoint], str]
    shown: Callable[[list[SweepPoint]], bool] = lambda _points: True


def _images(points: list[SweepPoint]) -> bool:
    return any(p.image for p in points)


def _plain(points: list[SweepPoint]) -> bool:
    return any(p.plain.n_ok for p in points)


def _inproc(points: list[SweepPoint]) -> bool:
    return any(p.where == "inproc" for p in points)


def _share(points: list[SweepPoint]) -> bool:
    return any(p.vs_inproc for p in points)


def _server_share(points: list[SweepPoint]) -> bool:
    return any(p.genuine_vs_estimate_ci and p.where == "server" for p in points)


def _encode(p: SweepPoint) -> str:
    return p.encode_ci.fmt(digits=0) if p.encode_ci and p.encode_ci.n > 1 else ms_text(p.encode_ms)


COLUMNS = (  # the sweep's table, left to right; L and new name a row (repeated when the table is stacked)
    Column("L", lambda p: str(p.L)),
    Column("new", lambda p: str(p.new)),
    Column("image", lambda p: p.image or "-", _images),
    Column("img tok", lambda p: str(p.image_tokens or "-"), _images),
    Column("encode", _encode, _images),
    Column("baseline", lambda p: arm_cell(p.baseline)),
    Column("fake", lambda p: arm_cell(p.fake)),
    Column("genuine", lambda p: arm_cell(p.genuine)),
    Column("plain genuine", lambda p: arm_cell(p.plain), _plain),
    Column("estimate", lambda p: _est(p)),
    Column(
        "llama-bench",
        lambda p: p.bench_check_ci.fmt(digits=1) if p.bench_check_ci else "-",
        lambda ps: any(p.bench_check_ci for p in ps),
    ),
    Column("fake/estimate - 1", lambda p: _ratio(p.fake_vs_estimate_ci, p.estimate_verdict)),
    Column("fake/genuine - 1", lambda p: _ratio(p.fake_vs_genuine_ci, p.genuine_verdict)),
    Column("genuine/plain - 1", lambda p: _ratio(p.genuine_vs_plain_ci, p.plain_verdict), _plain),
    # fake / estimate's split: the server's per-request share, and the batch-size effect beside it
    Column("server share - 1", lambda p: _ratio(p.genuine_vs_estimate_ci), _server_share),
    Column(
        f"per token vs {BATCH_CHUNK} - 1",
        lambda p: _ratio(p.batch_effect_ci),
        lambda ps: any(p.batch_effect_ci for p in ps),
    ),
    Column("cache read ms", lambda p: cell(p.restore_prep_ci, 2), _inproc),
    Column("restore step/genuine - 1", lambda p: _ratio(p.restore_step_vs_genuine_ci), _inproc),
    Column("cache-read share", lambda p: cell(p.cache_read_share_ci, share=True), _inproc),
    Column("server/in-proc fake", lambda p: cell(p.vs_inproc.get("fake"), 3), _share),
    Column("server/in-proc genuine", lambda p: cell(p.vs_inproc.get("genuine"), 3), _share),
    Column("decode ms/token at L+new", lambda p: cell(p.decode_ci, 2), lambda ps: any(p.decode_ci for p in ps)),
    Column("s per rep", lambda p: cell(p.rep_s, 3)),
    Column("reps", lambda p: str(p.reps)),
)


def summary_table(points: list[SweepPoint], notes: dict[str, int]) -> Table:
    """The sweep's table for the points of one place: the arms, the estimate, the ratios and verdicts, and what
    only that place has (in one process: the cache read; with both places: the server's own share)."""
    where = points[0].where if points else "server"
    sources = sorted({p.baseline_source for p in points if p.baseline_source})
    procs = max((p.processes for p in points), default=1)
    scope = f"; every interval over {procs} processes" if procs > 1 else "; within-run intervals (one process)"
    head = FILL_TITLE if any(p.estimate_source == FILL_PASSES for p in points) else TITLES[where]
    t = Table(title=head + (f"; baseline from {' and '.join(sources)}" if sources else "") + scope)
    shown = [c for c in COLUMNS if c.shown(points)]
    for c in shown:
        t.add_column(c.header, justify="right")
    t.add_column("note", justify="right")
    for p in points:
        t.add_row(*(c.cell(p) for c in shown), f"[{notes[p.point]}]" if p.point in notes else "")
    return key_columns(t, 2)


def restore_lines(points: list[SweepPoint], s: ArmsSummary) -> list[str]:
    """The restore cost in words: what the blob holds, how fast it is read back, what it costs at the top L."""
    out = []
    if s.bytes_per_cell is not None and s.fixed_bytes is not None:
        line = f"state blob: {s.bytes_per_cell:,.0f} B per cell + {s.fixed_bytes:,.0f} B fixed (measured over L)"
        if s.predicted_bytes_per_cell is not None:
            line += (
                f"; the GGUF predicts {s.predicted_bytes_per_cell:,} B per cell ({s.attention_layers} attention "
                f"layers x K+V rows + cell metadata) + {s.predicted_fixed_bytes:,} B ({s.recurrent_layers} "
                "recurrent layers x conv + recurrent state)"
            )
        out.append(line)
    top = max((p for p in points if p.restore_prep_ci is not None), key=lambda p: p.L, default=None)
    if s.restore_vs_memcpy_ci is not None and s.restore_gbps_ci is not None and s.memcpy_gbps_ci is not None:
        line = (
            f"the cache read runs at {cell(s.restore_vs_memcpy_ci, share=True)} of memcpy bandwidth "
            f"({cell(s.restore_gbps_ci, 2)} GB/s vs {cell(s.memcpy_gbps_ci, 2)} GB/s)"
        )
        if top is not None and top.restore_prep_ci is not None and top.blob_bytes:
            line += (
                f" and costs {cell(top.restore_prep_ci, 2)} ms at L={top.L} ({top.blob_bytes / 1e6:.1f} MB), "
                f"{cell(top.cache_read_share_ci, share=True)} of its step at new={top.new}"
            )
        out.append(line)
    if s.fill_passes:
        out.append(
            f"{s.fill_passes} cumulative fill pass(es) to depth {max(p.L for p in points)} + new: "
            f"{s.fill_s:.1f} s in all; then one rep costs {cell(s.rep_s_ci, 3)} s (its new tokens)"
        )
    if s.fake_vs_genuine_ci is not None:
        out.append(f"fake/genuine over every point's reps: {s.fake_vs_genuine_ci.fmt(pct=True)}")
    if s.genuine_vs_plain_ci is not None:
        out.append(f"restored genuine / plain genuine over every point's reps: {s.genuine_vs_plain_ci.fmt(pct=True)}")
    if s.restore_step_vs_genuine_ci is not None:
        out.append(
            f"the no-patch fallback (cache read + decode) / genuine over every point's reps: "
            f"{s.restore_step_vs_genuine_ci.fmt(pct=True)}"
        )
    return out


def spread_line(points: list[SweepPoint], starts: list[float]) -> str:
    """How the fake arm's times vary between the run's processes and within one (medians over the points), and
    the reps per process that narrow the intervals most per second at what a start and a rep cost here."""
    comps = [p.components["fake"] for p in points if "fake" in p.components]
    if not comps:
        return ""
    between = statistics.median(c.between for c in comps)
    within = statistics.median(c.within for c in comps)
    line = (
        f"reps spread over {max(p.processes for p in points)} processes: the fake arm varies {between:.1%} between "
        f"processes and {within:.1%} within one (medians over {len(comps)} points)"
    )
    rep_s = [p.rep_s.value for p in points if p.rep_s is not None]
    if starts and rep_s:
        start, rep = statistics.median(starts), statistics.median(rep_s)
        best = reps_per_process(Components(between=between, within=within, processes=2, reps=2), start, rep)
        advice = f"{best} reps per process" if best < 1000 else "all reps in one process (processes do not differ)"
        line += f"; at {start:.1f} s a start and {rep:.2f} s a rep, {advice} narrow the intervals most per second"
    return line


def print_summary(
    console: Console, points: list[SweepPoint], summary: ArmsSummary | None = None, starts: list[float] | None = None
) -> None:
    """Per place: the table, each point's notes under its number, the verdict counts, how the reps vary between
    processes; then the cache read in words (in one process)."""
    for where in ("inproc", "server"):
        mine = [p for p in points if p.where == where]
        if not mine:
            continue
        noted = [p for p in mine if p.diagnostics]
        console.print(summary_table(mine, {p.point: i for i, p in enumerate(noted, start=1)}))
        for i, p in enumerate(noted, start=1):
            for d in p.diagnostics:
                console.print(f"[{i}] L={p.L} new={p.new}: {d}", highlight=False)
        plain = any(p.plain.n_ok for p in mine)
        for name, attr in (
            ("fake vs genuine hit", "genuine_verdict"),
            *((("fake vs estimate", "estimate_verdict"),) if any(p.estimate_paired for p in mine) else ()),
            *((("restored vs plain genuine hit", "plain_verdict"),) if plain else ()),
        ):
            counts = {v: sum(getattr(p, attr) == v for p in mine) for v in VERDICT_STYLE}
            told = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
            console.print(f"{PLACE[where]} {name}: {told}", highlight=False)
        spread = spread_line(mine, starts or [])
        if spread:
            console.print(f"{PLACE[where]} {spread}", highlight=False)
        if where == "inproc" and summary is not None:
            for line in restore_lines(mine, summary):
                console.print(line, highlight=False)


PLACE: dict[Where, str] = {"server": "server:", "inproc": "in one process:"}
