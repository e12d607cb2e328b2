"""The sweep's terminal tables, one per place (through the server, in one process): one row per stored
SweepPoint, then each point's notes and the verdict counts, and the cache read in words from ArmsSummary."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from lab.core.components import reps_per_process
from lab.core.console import key_columns
from lab.core.schemas import (
    BATCH_CHUNK,
    ArmsSummary,
    ArmStats,
    Components,
    Interval,
    ServerShare,
    SweepPoint,
    Where,
    cell,
)
from lab.core.verdicts import VERDICTS, styled


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
    return f"{p.opt_prefill_ms:.1f} [{iv.lo:.1f}, {iv.hi:.1f}]{iv.thin_note()}"


def _ratio(iv: Interval | None, v: str | None = None) -> str:
    if iv is None:
        return "-"
    return iv.fmt(pct=True) + (f" {styled(v)}" if v else "")


TITLES: dict[Where, str] = {
    "server": "through llama-server: median prompt_ms per arm [95% interval] vs the estimate only_new / "
    "prefill_tps(L) + encode; ratios paired by rep, with their interval and verdict",
    "inproc": "in one process (libllama, no server): median decode ms of the new tokens [95% interval] vs the "
    "estimate, the chunk at depth L beside every rep; ratios paired by rep",
}


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
    """The sweep's whole table for the points of one place (`--wide`): the arms, the estimate, the ratios and
    verdicts, and what only that place has (in one process: the cache read; with both places: the server's own
    share)."""
    t = Table(title=_title(points))
    shown = [c for c in COLUMNS if c.shown(points)]
    for c in shown:
        t.add_column(c.header, justify="right")
    t.add_column("note", justify="right")
    for p in points:
        t.add_row(*(c.cell(p) for c in shown), f"[{notes[p.point]}]" if p.point in notes else "")
    return key_columns(t, 2)


ARMS_TITLES: dict[Where, str] = {
    "server": "through llama-server: median prompt_ms per arm [95% interval]",
    "inproc": "in one process (libllama, no server): median decode ms of the new tokens [95% interval]",
}


def _title(points: list[SweepPoint], titles: dict[Where, str] | None = None) -> str:
    where = points[0].where if points else "server"
    sources = sorted({p.baseline_source for p in points if p.baseline_source})
    procs = max((p.processes for p in points), default=1)
    scope = f"; every interval over {procs} processes" if procs > 1 else "; within-run intervals (one process)"
    head = (titles or TITLES)[where]
    return head + (f"; baseline from {' and '.join(sources)}" if sources else "") + scope


def ms_interval(iv: Interval | None, value: float | None = None) -> str:
    """`1965 [1849, 2006]`, `48.3 [46.2, 51.6]`, `5.31 [5.20, 5.44]`: a median and its 95% interval in 4 or so
    significant digits (the value alone without an interval)."""
    if iv is None:
        return ms_text(value) if value is not None else "-"
    size = max(abs(iv.value), abs(iv.hi))
    digits = 0 if size >= 100 else 1 if size >= 10 else 2
    if iv.n < 2:
        return f"{iv.value:.{digits}f}"
    return f"{iv.value:.{digits}f} [{iv.lo:.{digits}f}, {iv.hi:.{digits}f}]{iv.thin_note()}"


def _arm(a: ArmStats) -> str:
    if a.median_ms is None or a.median_lo_ms is None or a.median_hi_ms is None or a.n_ok < 2:
        return ms_text(a.median_ms)
    return ms_interval(Interval(value=a.median_ms, lo=a.median_lo_ms, hi=a.median_hi_ms, n=a.n_ok))


def _estimate(p: SweepPoint) -> str:
    iv = p.estimate_ci
    return ms_interval(iv if iv is not None and iv.n >= 2 else None, p.opt_prefill_ms)


def _key(p: SweepPoint, images: bool) -> list[str]:
    return [str(p.L), str(p.new), *([p.image or "-"] if images else [])]


def arms_table(points: list[SweepPoint], notes: dict[str, int]) -> Table:
    """The answer for the points of one place: each arm's median ms [95% interval] per (L, new)."""
    images = _images(points)
    t = Table(title=_title(points, ARMS_TITLES) + "; the checks below; every column: lab show RUN --wide")
    for c in ("L", "new", *(["image"] if images else []), "baseline", "fake", "genuine", "note"):
        t.add_column(c, justify="left" if c == "image" else "right")
    for p in points:
        note = f"[{notes[p.point]}]" if p.point in notes else ""
        t.add_row(*_key(p, images), _arm(p.baseline), _arm(p.fake), _arm(p.genuine), note)
    return key_columns(t, 3 if images else 2)


CHECKS: tuple[tuple[str, Callable[[SweepPoint], ArmStats | Interval | None], str, str], ...] = (
    # the check, what the fake (or restored) arm is set against, its ratio's field, its verdict's field
    ("fake / genuine", lambda p: p.genuine, "fake_vs_genuine_ci", "genuine_verdict"),
    ("fake / estimate", lambda p: p.estimate_ci, "fake_vs_estimate_ci", "estimate_verdict"),
    ("genuine / plain", lambda p: p.plain, "genuine_vs_plain_ci", "plain_verdict"),
)


def checks_table(points: list[SweepPoint]) -> Table:
    """The checks for the points of one place, a row each: the ratio paired by rep - 1 [95% interval] and its
    verdict, beside the median ms [95% interval] it is set against."""
    images = _images(points)
    t = Table(
        title="checks: each ratio paired by rep - 1 [95% interval] and its verdict; against: the median ms [95% "
        "interval] of the arm or estimate in its denominator"
    )
    for c in ("L", "new", *(["image"] if images else []), "check", "against (ms)", "ratio - 1", "verdict"):
        t.add_column(c, justify="left" if c in ("image", "check", "verdict") else "right")
    for p in points:
        for name, against, ratio, said in CHECKS:
            iv = getattr(p, ratio)
            if iv is None:
                continue
            ref = against(p)
            ref_text = _arm(ref) if isinstance(ref, ArmStats) else _estimate(p)
            v = getattr(p, said)
            if v is None:  # through the server fake / estimate is no check: the share below measures it
                continue
            t.add_row(*_key(p, images), name, ref_text, iv.fmt(pct=True), styled(v))
    return key_columns(t, 3 if images else 2)


def share_table(points: list[SweepPoint]) -> Table:
    """Through the server, per point: what the server adds to the estimate for a step with the cache, measured
    (genuine - estimate and genuine / estimate - 1, paired by rep), not a verdict."""
    images = _images(points)
    t = Table(
        title="the server's per-request share: genuine - estimate, paired by rep, in ms and in % [95% interval]: "
        "what llama-server adds to only_new / prefill_tps(L)"
    )
    for c in ("L", "new", *(["image"] if images else []), "estimate (ms)", "share (ms)", "share (%)"):
        t.add_column(c, justify="left" if c == "image" else "right")
    for p in points:
        if p.server_share_ms_ci is not None or p.genuine_vs_estimate_ci is not None:
            pct = p.genuine_vs_estimate_ci.fmt(pct=True) if p.genuine_vs_estimate_ci else "-"
            t.add_row(*_key(p, images), _estimate(p), ms_interval(p.server_share_ms_ci), pct)
    return key_columns(t, 3 if images else 2)


def share_line(share: ServerShare) -> str:
    """The share fitted over the grid, each term with its interval over processes."""
    terms = [f"{ms_interval(share.fixed_ms_ci)} ms"]
    if share.per_new_ms_ci is not None:
        terms.append(f"{share.per_new_ms_ci.fmt(digits=4)} ms per new token")
    if share.per_1k_cached_ms_ci is not None:
        terms.append(f"{share.per_1k_cached_ms_ci.fmt(digits=3)} ms per 1k cached tokens")
    pct = f" ({share.share_ci.fmt(pct=True)} of the estimate)" if share.share_ci else ""
    return (
        f"server: its per-request share over {share.points} points, fitted in each of {share.processes} processes: "
        + " + ".join(terms)
        + pct
    )


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
    console: Console,
    points: list[SweepPoint],
    summary: ArmsSummary | None = None,
    starts: list[float] | None = None,
    wide: bool = False,
    share: ServerShare | None = None,
) -> None:
    """Per place: the arms and the checks (`wide`: the whole table), each point's notes under its number, the
    verdict counts, how the reps vary between processes; then the cache read in words (in one process), the
    server's per-request share per point and over the grid (through the server)."""
    for where in ("inproc", "server"):
        mine = [p for p in points if p.where == where]
        if not mine:
            continue
        noted = [p for p in mine if p.diagnostics]
        notes = {p.point: i for i, p in enumerate(noted, start=1)}
        if wide:
            console.print(summary_table(mine, notes))
        else:
            console.print(arms_table(mine, notes))
            console.print(checks_table(mine))
        if where == "server" and any(p.server_share_ms_ci for p in mine):
            console.print(share_table(mine))
        if where == "server" and share is not None:
            console.print(share_line(share), highlight=False)
        for i, p in enumerate(noted, start=1):
            for d in p.diagnostics:
                console.print(f"[{i}] L={p.L} new={p.new}: {d}", highlight=False)
        plain = any(p.plain.n_ok for p in mine)
        for name, attr in (
            ("fake vs genuine hit", "genuine_verdict"),
            *((("fake vs estimate", "estimate_verdict"),) if any(p.estimate_verdict for p in mine) else ()),
            *((("restored vs plain genuine hit", "plain_verdict"),) if plain else ()),
        ):
            counts = {v: sum(getattr(p, attr) == v for p in mine) for v in VERDICTS}
            told = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
            console.print(f"{PLACE[where]} {name}: {told}", highlight=False)
        spread = spread_line(mine, starts or [])
        if spread:
            console.print(f"{PLACE[where]} {spread}", highlight=False)
        if where == "inproc" and summary is not None:
            for line in restore_lines(mine, summary):
                console.print(line, highlight=False)


PLACE: dict[Where, str] = {"server": "server:", "inproc": "in one process:"}
