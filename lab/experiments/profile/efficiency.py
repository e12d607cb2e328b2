"""A profile read against the cost model: each band's achieved GFLOP/s (predicted FLOPs / measured ms), its
share of this host's GEMM peak and its place on a roofline; the predicted crossover beside the measured one;
the attention slope predicted from FLOPs beside the measured one.

The predicted slope in ms needs a rate: it is the FLOP slope done at the rate the MoE FFN achieves in the
same profile (the median over depths), so measured / predicted says how much slower than the FFN's matmuls
attention turns its extra FLOPs into time. Intervals come from the measured side's (the cost model is exact).
"""

from __future__ import annotations

import statistics

from lab.core.schemas import BandDepth, Interval, ProfileSummary
from lab.measure.costmodel import CostModel
from lab.measure.peaks import Peaks


def annotate(rows: list[BandDepth], summary: ProfileSummary, model: CostModel, peaks: Peaks | None) -> None:
    """Fill the prediction and efficiency fields of a profile's band rows and summary."""
    c = model.chunk
    costs = {d: model.bands(d) for d in sorted({r.depth for r in rows})}
    for r in rows:
        cost = costs[r.depth][r.band]  # type: ignore[index]
        r.flops_per_token, r.bytes_per_token = cost.flops / c, cost.bytes / c
        r.intensity = cost.intensity if cost.bytes else None
        if r.ms_per_token > 0 and cost.flops > 0:
            r.gflops = r.flops_per_token / r.ms_per_token / 1e6  # FLOP/ms / 1e6 = GFLOP/s
            if r.ms_per_token_lo and r.ms_per_token_hi:
                r.gflops_lo, r.gflops_hi = (
                    r.flops_per_token / r.ms_per_token_hi / 1e6,
                    r.flops_per_token / r.ms_per_token_lo / 1e6,
                )
            if peaks is not None:
                r.peak_share = r.gflops / peaks.gemm_gflops.value
    h = model.h
    summary.cost_model = f"{h.arch}, {h.file_type}, chunk {c} (lab.measure.costmodel)"
    summary.predicted_crossover_depth = model.crossover()
    if summary.predicted_crossover_depth:
        summary.crossover_vs_predicted_ci = divided(summary.crossover_ci, summary.predicted_crossover_depth)
    summary.attn_flops_per_token_per_1k = model.attn_flops_per_token_per_1k()
    ffn = [r.gflops for r in rows if r.band == "ffn_moe" and r.gflops]
    if ffn and summary.attn_flops_per_token_per_1k:
        predicted = summary.attn_flops_per_token_per_1k / (statistics.median(ffn) * 1e9) * 1e3
        summary.predicted_attn_slope_ms_per_token_per_1k = predicted
        summary.attn_slope_vs_predicted_ci = divided(summary.attn_slope_ci, predicted)
    if peaks is not None:
        summary.peak_gemm_gflops_ci, summary.peak_copy_gbps_ci = peaks.gemm_gflops, peaks.copy_gbps
        summary.peak_gemm_shape = list(peaks.gemm_shape)


def probe_shape(model: CostModel) -> tuple[int, int, int]:
    """The GEMM the peak is probed at: a chunk of tokens times the model's widest projection."""
    h = model.h
    return model.chunk, h.n_embd, max(h.n_ff_exp, h.n_ff_shexp, h.n_ff, h.conv_dim, h.n_embd)


def divided(iv: Interval | None, by: float | None) -> Interval | None:
    return iv.divided(by) if iv is not None and by else None
