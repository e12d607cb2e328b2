"""The profile's printers: the band table, achieved GFLOP/s, and the crossover and prediction lines, from its stored
rows and summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.table import Table

from lab.core.console import key_columns
from lab.core.schemas import BANDS, AttnKind, BandDepth, ProfileSummary, cell
from lab.core.verdicts import styled


def _pm(value: float, lo: float | None, hi: float | None, digits: int = 3) -> str:
    """`0.123 +-3%`: a value and its 95% interval's half-width, relative."""
    if lo is None or hi is None or not value:
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} +-{(hi - lo) / 2 / value:.0%}"


def profile_table(rows: list[BandDepth], s: ProfileSummary, wide: bool = False) -> Table:
    """Per depth each band's ms/token with its interval (`wide`: and the checks' columns, checks_table's)."""
    t = Table(
        title=f"prefill ms/token per band vs depth (TIMED share x FUSED chunk ms / chunk; +- the 95% interval over "
        f"{s.processes} processes of {s.reps} reps, depth by {'fake prefix' if s.fill == 'fake' else 'real fill'})"
    )
    t.add_column("depth", justify="right")
    for b in BANDS:
        t.add_column(b, justify="right")
    if wide:
        t.add_column("TIMED/FUSED - 1", justify="right")
        t.add_column("FUSED/bench", justify="right")
    for depth in sorted({r.depth for r in rows}):
        per = {r.band: r for r in rows if r.depth == depth}
        t.add_row(
            str(depth),
            *(_pm(per[b].ms_per_token, per[b].ms_per_token_lo, per[b].ms_per_token_hi) for b in BANDS),
            *(_checks(s, depth) if wide else ()),
        )
    t.caption = (
        f"crossover attn_core > ffn_moe: {crossover_text(s)}; attention slope {cell(s.attn_slope_ci, digits=4)} "
        f"ms/token per 1k depth, R^2 {cell(s.attn_r2_ci, digits=4)}; mean gap {s.timed_vs_fused_gap_mean:+.1%}"
        + bench_note(s)
    )
    return t


def _checks(s: ProfileSummary, depth: int) -> tuple[str, str]:
    """TIMED/FUSED - 1 and FUSED/bench at a depth, each [95% interval] with its verdict."""
    gap = s.timed_vs_fused_gap_ci.get(str(depth))
    bench = s.fused_vs_bench_ci.get(str(depth))
    ratio = s.fused_vs_bench.get(str(depth))
    return (
        _judged(
            cell(gap, pct=True) if gap else f"{s.timed_vs_fused_gap[str(depth)]:+.1%}",
            s.timed_vs_fused_verdict,
            depth,
        ),
        _judged(
            cell(bench) if bench else (f"{ratio:.3f}" if ratio is not None else "-"),
            s.fused_vs_bench_verdict,
            depth,
        ),
    )


def checks_table(rows: list[BandDepth], s: ProfileSummary) -> Table:
    """The band table's checks per depth: TIMED (the per-node sum) / FUSED (the chunk's wall) - 1 and FUSED /
    llama-bench, each [95% interval] with its verdict (`-`: llama-bench did not run at that depth)."""
    tols = [
        f"{what} at +-{tol:.0%}"
        for what, tol in (("TIMED/FUSED", s.timed_tolerance), ("FUSED/bench", s.bench_tolerance))
        if tol is not None
    ]
    t = Table(title="checks per depth [95% interval] and verdict" + (f" ({', '.join(tols)})" if tols else ""))
    for c in ("depth", "TIMED/FUSED - 1", "FUSED/bench"):
        t.add_column(c, justify="right")
    for depth in sorted({r.depth for r in rows}):
        t.add_row(str(depth), *_checks(s, depth))
    return t


def bench_note(s: ProfileSummary) -> str:
    """Where llama-bench did not run: the depths deeper than a real fill reaches, which rest on fake / real."""
    beyond = [d for d in s.depths if d not in s.bench_depths]
    if not s.bench_depths or not beyond:
        return ""
    return (
        f"; llama-bench at depths to {max(s.bench_depths)} (a real fill each), none at {', '.join(map(str, beyond))}: "
        "those rest on the fake-vs-real check"
    )


def attn_kind_table(s: ProfileSummary) -> Table:
    """attn_core split by layer kind on a sliding-window model: ms/token per depth and each kind's slope."""
    t = Table(title="attn_core by layer kind: ms/token (+- the 95% interval)")
    t.add_column("depth", justify="right")
    for k in s.attn_kinds:
        t.add_column(f"{k.kind} ({k.layers} layers)", justify="right")
    for depth in sorted({int(d) for k in s.attn_kinds for d in k.ms_per_token}, key=int):
        ivs = [k.ms_per_token.get(str(depth)) for k in s.attn_kinds]
        t.add_row(str(depth), *(_pm(iv.value, iv.lo, iv.hi) if iv else "-" for iv in ivs))
    t.caption = "; ".join(slope_text(k) for k in s.attn_kinds)
    return t


def fake_real_table(s: ProfileSummary, wide: bool = False) -> Table:
    """The fake-vs-real check: per depth, fake / real of the total and each band [95% interval], with the verdict
    where there is one (the total and the bands holding >= 5% of the time); a row per depth and part (`wide`: a
    column per part)."""
    tol = f" at +-{s.real_tolerance:.0%}" if s.real_tolerance is not None else ""
    t = Table(title=f"fake / real depth: the chunk after a fake prefix over the same after a real fill{tol}")
    # the total, the bands, then attn_core in the layers of each kind (a sliding-window model: full, window)
    kinds = sorted({c for ivs in s.fake_vs_real.values() for c in ivs if c.startswith("attn_core ")})
    parts = ("total", *BANDS, *kinds)
    if not wide:
        for c in ("depth", "part", "fake / real [95%]", "verdict"):
            t.add_column(c, justify="right" if c in ("depth", "fake / real [95%]") else "left")
        for depth, ivs in sorted(s.fake_vs_real.items(), key=lambda kv: int(kv[0])):
            said = s.fake_vs_real_verdict.get(depth, {})
            for c in parts:
                if c in ivs:
                    t.add_row(depth, c, ivs[c].fmt(), styled(said[c]) if c in said else "-")
        return key_columns(t, 1)
    t.add_column("depth", justify="right")
    for col in parts:
        t.add_column(col, justify="right")
    for depth, ivs in sorted(s.fake_vs_real.items(), key=lambda kv: int(kv[0])):
        said = s.fake_vs_real_verdict.get(depth, {})
        t.add_row(
            depth,
            *(f"{ivs[c].fmt()} {styled(said[c]) if c in said else ''}".strip() if c in ivs else "-" for c in parts),
        )
    return t


def slope_text(k: AttnKind) -> str:
    """`window: 0.0012 [-0.0004, 0.0030] ms/token per 1k depth from depth 512: flat (the interval holds 0)`."""
    where = f" from depth {k.fit_from}" if k.fit_from else ""
    if k.slope_ci is None:
        return f"{k.kind}: no slope{where} (fewer than two depths)"
    iv = k.slope_ci
    trend = "grows" if iv.lo > 0 else "falls" if iv.hi < 0 else "flat (the interval holds 0)"
    return f"{k.kind}: {iv.fmt(digits=4)} ms/token per 1k depth{where}: {trend}"


def _judged(text: str, verdicts: Mapping[str, str], depth: int) -> str:
    v = verdicts.get(str(depth))
    return f"{text} {styled(v)}" if v else text


def reference_lines(s: ProfileSummary) -> list[str]:
    """How the checks came out: agree / disagree / undecided counted over the depths at their tolerance, and over
    all depths at once where there is that interval."""
    out = []
    for what, verdicts, tol, whole, whole_verdict in (
        (
            "TIMED / FUSED",
            s.timed_vs_fused_verdict,
            s.timed_tolerance,
            s.timed_vs_fused_all,
            s.timed_vs_fused_all_verdict,
        ),
        (
            "FUSED / llama-bench",
            s.fused_vs_bench_verdict,
            s.bench_tolerance,
            s.fused_vs_bench_all,
            s.fused_vs_bench_all_verdict,
        ),
    ):
        if verdicts and tol is not None:
            line = f"{what} at +-{tol:.0%}: {counted(list(verdicts.values()))} of {len(verdicts)} depths"
            if whole is not None:
                line += f"; over all depths {whole.fmt()} {whole_verdict}"
            out.append(line)
    if s.layout:
        out.append(f"what the kernels see: {s.layout}")
    if s.fake_vs_real_verdict and s.real_tolerance is not None:
        flat = [v for per in s.fake_vs_real_verdict.values() for v in per.values()]
        overall = ", ".join(f"{k} {s.fake_vs_real_all[k].fmt()} {v}" for k, v in s.fake_vs_real_all_verdict.items())
        out.append(
            f"fake / real depth at +-{s.real_tolerance:.0%} (total and bands >= 5% of the time): {counted(flat)} of "
            f"{len(flat)} at {len(s.fake_vs_real_verdict)} depths" + (f"; over all depths {overall}" if overall else "")
        )
    return out


def band_fit_line(s: ProfileSummary) -> str:
    """Each band's slope against depth with its interval, and the fit's R^2: attention grows, the others stay."""
    parts = [
        f"{b} {s.band_slope_ci[b].fmt(digits=4)} (R^2 {s.band_r2_ci[b].value:.3f})"
        for b in BANDS
        if b in s.band_slope_ci and b in s.band_r2_ci
    ]
    return f"ms/token per 1k depth by band: {', '.join(parts)}" if parts else ""


def counted(verdicts: Sequence[str]) -> str:
    """`2 agree, 1 undecided`: each verdict's count, in a fixed order."""
    return ", ".join(f"{n} {v}" for v in ("agree", "disagree", "undecided") if (n := verdicts.count(v)))


def efficiency_table(rows: list[BandDepth], s: ProfileSummary, wide: bool = False) -> Table:
    """Achieved GFLOP/s per band and depth +- its 95% interval (`wide`: the interval's ends and the share of the
    probed GEMM peak)."""
    peak = s.peak_gemm_gflops_ci
    t = Table(
        title="achieved GFLOP/s by band (predicted FLOPs / measured ms) "
        + ("[95% interval]" if wide else "+- the 95% interval")
        + (f"; share of this host's GEMM peak {peak.fmt(digits=1)} GFLOP/s" if peak and wide else "")
    )
    t.add_column("depth", justify="right")
    for b in BANDS:
        t.add_column(b, justify="right")
    for depth in sorted({r.depth for r in rows}):
        per = {r.band: r for r in rows if r.depth == depth}
        cells = []
        for b in BANDS:
            r = per.get(b)
            if r is None or r.gflops is None:
                cells.append("-")
                continue
            if not wide:
                cells.append(_pm(r.gflops, r.gflops_lo, r.gflops_hi, 1))
                continue
            ci = f" [{r.gflops_lo:.1f}, {r.gflops_hi:.1f}]" if r.gflops_lo and r.gflops_hi else ""
            cells.append(f"{r.gflops:.1f}{ci}" + (f" {r.peak_share:.0%}" if r.peak_share is not None else ""))
        t.add_row(str(depth), *cells)
    return t


def crossover_text(s: ProfileSummary) -> str:
    """The measured crossover, its number once: `2658 [2567, 2729]`, or `not reached by depth 1024`."""
    return s.crossover_ci.fmt(digits=0) if s.crossover_ci is not None else s.crossover_note


def time_crossover_text(s: ProfileSummary) -> str:
    if s.time_crossover_ci is None:
        return s.time_crossover_note or "-"
    note = f" ({s.time_crossover_note})" if s.time_crossover_note else ""
    return s.time_crossover_ci.fmt(digits=0) + note


def prediction_lines(s: ProfileSummary) -> list[str]:
    """The crossover predicted in time (this profile's rates) and from FLOPs beside the measured one, and the
    attention slope."""
    if s.predicted_crossover_depth is None and s.attn_flops_per_token_per_1k is None:
        return [f"cost model: {s.cost_model}"] if s.cost_model else []
    out = []
    pred = s.predicted_crossover_depth
    line = (
        f"crossover: measured {crossover_text(s)}; predicted in time {time_crossover_text(s)}; "
        f"from FLOPs {'none' if pred is None else f'{pred:.0f}'}"
    )
    if s.crossover_vs_predicted_ci is not None:
        line += f" (measured / FLOP prediction {s.crossover_vs_predicted_ci.fmt()})"
    out.append(line)
    if s.band_gflops_ci:
        rates = ", ".join(f"{b} {iv.fmt(digits=1)}" for b, iv in s.band_gflops_ci.items())
        oh = s.attn_overhead_ms_ci
        overhead = f"; attn_core's per-token overhead {oh.fmt(digits=4)} ms" if oh is not None else ""
        out.append(f"rates (GFLOP/s on counted FLOPs): {rates}{overhead}")
    if s.attn_flops_per_token_per_1k is not None:
        line = f"attention slope: {s.attn_flops_per_token_per_1k / 1e6:.4g} MFLOP per token per 1k depth predicted"
        if s.predicted_attn_slope_ms_per_token_per_1k is not None:
            line += (
                f", {s.predicted_attn_slope_ms_per_token_per_1k:.4f} ms/token per 1k at the rate ffn_moe "
                f"achieves; measured {cell(s.attn_slope_ci, digits=4)}"
            )
        if s.attn_slope_vs_predicted_ci is not None:
            line += f" (measured / predicted {s.attn_slope_vs_predicted_ci.fmt()})"
        out.append(line)
    if s.peak_copy_gbps_ci is not None and s.peak_gemm_gflops_ci is not None:
        out.append(
            f"this host: GEMM {s.peak_gemm_gflops_ci.fmt(digits=1)} GFLOP/s at {tuple(s.peak_gemm_shape)}, "
            f"memcpy {s.peak_copy_gbps_ci.fmt(digits=2)} GB/s ({s.cost_model})"
        )
    return out
