"""The sweep's terminal table: one row per stored SweepPoint, then each point's notes and the verdict counts."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from lab.schemas import ArmStats, Interval, SweepPoint

VERDICT_STYLE = {"agree": "green", "disagree": "red", "undecided": "yellow"}


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def arm_cell(a: ArmStats) -> str:
    """`12.3 [11.9-12.8]`: the median ms and its 95% interval."""
    if a.median_ms is None:
        return "-"
    if a.median_lo_ms is None or a.median_hi_ms is None or a.n_ok < 2:
        return f"{a.median_ms:.1f}"
    return f"{a.median_ms:.1f} [{a.median_lo_ms:.1f}-{a.median_hi_ms:.1f}]"


def _est(p: SweepPoint) -> str:
    iv = p.estimate_ci
    if p.opt_prefill_ms is None or iv is None or iv.n < 2:
        return _ms(p.opt_prefill_ms)
    return f"{p.opt_prefill_ms:.1f} [{iv.lo:.1f}-{iv.hi:.1f}]"


def _ratio(iv: Interval | None, v: str) -> str:
    if iv is None:
        return "-"
    return f"{iv.fmt(pct=True)} [{VERDICT_STYLE[v]}]{v}[/{VERDICT_STYLE[v]}]"


def summary_table(points: list[SweepPoint], notes: dict[str, int]) -> Table:
    sources = sorted({p.baseline_source for p in points if p.baseline_source})
    t = Table(
        title="fake-prefix sweep: median prompt_ms per arm [95% interval] vs the estimate only_new / prefill_tps(L)"
        " + encode; ratios paired by rep, with their interval and verdict"
        + (f"; baseline from {' and '.join(sources)}" if sources else "")
    )
    images = any(p.image for p in points)
    plain = any(p.plain.n_ok for p in points)
    check = any(p.bench_check_ci for p in points)
    cols = (
        "L",
        "new",
        *(("image", "img tok", "encode") if images else ()),
        "baseline",
        "fake",
        "genuine",
        *(("plain genuine",) if plain else ()),
        "estimate",
        *(("llama-bench",) if check else ()),
    )
    ratios = ("fake/estimate - 1", "fake/genuine - 1", *(("genuine/plain - 1",) if plain else ()))
    for col in (*cols, *ratios, "reps", "note"):
        t.add_column(col, justify="right")
    for p in points:
        enc = p.encode_ci.fmt(digits=0) if p.encode_ci and p.encode_ci.n > 1 else _ms(p.encode_ms)
        img = (p.image or "-", str(p.image_tokens or "-"), enc) if images else ()
        bench = (p.bench_check_ci.fmt(digits=1) if p.bench_check_ci else "-",) if check else ()
        t.add_row(
            str(p.L),
            str(p.new),
            *img,
            arm_cell(p.baseline),
            arm_cell(p.fake),
            arm_cell(p.genuine),
            *((arm_cell(p.plain),) if plain else ()),
            _est(p),
            *bench,
            _ratio(p.fake_vs_estimate_ci, p.estimate_verdict),
            _ratio(p.fake_vs_genuine_ci, p.genuine_verdict),
            *((_ratio(p.genuine_vs_plain_ci, p.plain_verdict),) if plain else ()),
            str(p.reps),
            f"[{notes[p.point]}]" if p.point in notes else "",
        )
    return t


def print_summary(console: Console, points: list[SweepPoint]) -> None:
    """The table, then each point's notes under its number, then the verdict counts."""
    noted = [p for p in points if p.diagnostics]
    console.print(summary_table(points, {p.point: i for i, p in enumerate(noted, start=1)}))
    for i, p in enumerate(noted, start=1):
        for d in p.diagnostics:
            console.print(f"[{i}] L={p.L} new={p.new}: {d}", highlight=False)
    plain = any(p.plain.n_ok for p in points)
    for name, attr in (
        ("fake vs genuine hit", "genuine_verdict"),
        ("fake vs estimate", "estimate_verdict"),
        *((("restored vs plain genuine hit", "plain_verdict"),) if plain else ()),
    ):
        counts = {v: sum(getattr(p, attr) == v for p in points) for v in VERDICT_STYLE}
        console.print(f"{name}: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n), highlight=False)
