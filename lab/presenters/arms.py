"""`lab arms`'s terminal tables: the arms per stored InprocPoint, the ratios and verdicts, and the cache read in
words from the run's ArmsSummary."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from lab.presenters.sweep import VERDICT_STYLE, arm_cell
from lab.schemas import ArmsSummary, InprocPoint, Interval


def _ratio(iv: Interval | None, v: str | None = None) -> str:
    if iv is None:
        return "-"
    return iv.fmt(pct=True) + (f" [{VERDICT_STYLE[v]}]{v}[/{VERDICT_STYLE[v]}]" if v else "")


def _iv(iv: Interval | None, digits: int = 2, pct: bool = False) -> str:
    if iv is None:
        return "-"
    if pct:
        return f"{iv.value:.1%} [{iv.lo:.1%}, {iv.hi:.1%}]"
    return iv.fmt(digits=digits) if iv.n > 1 else f"{iv.value:.{digits}f}"


def arms_table(points: list[InprocPoint]) -> Table:
    t = Table(
        title="in-process arms: median decode ms of the new tokens [95% interval] (baseline: L + new, from "
        "the fill passes and direct reps); the estimate is the fill passes' chunk at depth L"
    )
    plain = any(p.plain.n_ok for p in points)
    direct = any(p.baseline.n_ok for p in points)
    cols = [
        "L",
        "new",
        "baseline (fill)",
        *(["baseline (direct)"] if direct else []),
        "genuine",
        *(["plain genuine"] if plain else []),
        "fake",
        "estimate",
        "cache read",
        "s per rep",
        "reps",
    ]
    for c in cols:
        t.add_column(c, justify="right")
    for p in points:
        t.add_row(
            str(p.L),
            str(p.new),
            arm_cell(p.baseline_fill),
            *([arm_cell(p.baseline)] if direct else []),
            arm_cell(p.genuine),
            *([arm_cell(p.plain)] if plain else []),
            arm_cell(p.fake),
            _iv(p.estimate_ci, 1),
            _iv(p.restore_prep_ci),
            _iv(p.rep_s),
            str(p.reps),
        )
    return t


def ratio_table(points: list[InprocPoint]) -> Table:
    server = any(p.server for p in points)
    plain = any(p.genuine_vs_plain_ci for p in points)
    t = Table(
        title="against the genuine hit, paired by rep [95% interval] and verdict"
        + ("; server / in-process per arm (unpaired)" if server else "")
    )
    cols = [
        "L",
        "new",
        "fake/genuine - 1",
        *(["genuine/plain - 1"] if plain else []),
        "fake/estimate - 1",
        "restore step/genuine - 1",
        "cache-read share",
    ]
    if server:
        cols += ["server/in-proc fake", "server/in-proc genuine", "server fake/genuine - 1"]
    for c in cols:
        t.add_column(c, justify="right")
    for p in points:
        row = [
            str(p.L),
            str(p.new),
            _ratio(p.fake_vs_genuine_ci, p.genuine_verdict),
            *([_ratio(p.genuine_vs_plain_ci, p.plain_verdict)] if plain else []),
            _ratio(p.fake_vs_estimate_ci),
            _ratio(p.restore_step_vs_genuine_ci),
            _iv(p.cache_read_share_ci, pct=True),
        ]
        if server:
            row += [
                _iv(p.server_vs_inproc.get("fake"), 3),
                _iv(p.server_vs_inproc.get("genuine"), 3),
                _ratio(p.server_fake_vs_genuine_ci),
            ]
        t.add_row(*row)
    return t


def restore_lines(points: list[InprocPoint], s: ArmsSummary) -> list[str]:
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
            f"the cache read runs at {_iv(s.restore_vs_memcpy_ci, pct=True)} of memcpy bandwidth "
            f"({_iv(s.restore_gbps_ci)} GB/s vs {_iv(s.memcpy_gbps_ci)} GB/s)"
        )
        if top is not None and top.restore_prep_ci is not None and top.blob_bytes:
            line += (
                f" and costs {_iv(top.restore_prep_ci)} ms at L={top.L} ({top.blob_bytes / 1e6:.1f} MB), "
                f"{_iv(top.cache_read_share_ci, pct=True)} of its step at new={top.new}"
            )
        out.append(line)
    if s.fill_passes:
        out.append(
            f"{s.fill_passes} cumulative fill pass(es) to depth {max(p.L for p in points)} + new: "
            f"{s.fill_s:.1f} s in all; then one rep costs {_iv(s.rep_s_ci, 3)} s (its new tokens)"
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


def print_summary(console: Console, points: list[InprocPoint], s: ArmsSummary | None) -> None:
    console.print(arms_table(points))
    console.print(ratio_table(points))
    for p in points:
        for d in p.diagnostics:
            console.print(f"L={p.L} new={p.new}: {d}", highlight=False)
    for line in restore_lines(points, s) if s else []:
        console.print(line, highlight=False)
    for name, attr, arm in (
        ("fake vs genuine hit", "genuine_verdict", "fake"),
        ("restored vs plain genuine hit", "plain_verdict", "plain"),
    ):
        if not any(getattr(p, arm).n_ok for p in points):
            continue
        counts = {v: sum(getattr(p, attr) == v for p in points) for v in VERDICT_STYLE}
        console.print(f"{name}: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n), highlight=False)
