"""`lab model cost`'s report: the cost model's terms and FLOPs per band, and with --rates the time model's
ms/token per band (lab.measure.costmodel, lab.measure.timemodel); a profile's closing tables reuse the latter."""

from __future__ import annotations

import math
from typing import Any

from rich.table import Table

from lab.core.schemas import BANDS, Interval, cell
from lab.measure.costmodel import CostModel, band_label
from lab.measure.timemodel import TimePrediction


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


def time_tables(p: TimePrediction, m: CostModel, wide: bool = False) -> list[Any]:
    """`lab model cost --rates`: each band's predicted ms/token +- its 95% interval (`wide`: the interval's ends)
    at every depth, the rates they come from, and the crossover in time beside the FLOP one."""
    depths = sorted({r.depth for r in p.at})
    names = [band_label(b, m.h) for b in BANDS]
    said = "[95% interval]" if wide else "+- the 95% interval"
    t = Table("depth", *names, "total", title=f"predicted ms per token by band {said}, {p.model}")
    for d in depths:
        t.add_row(str(d), *(_band_cell(p.band_at(d, b), wide) for b in (*BANDS, "total")))
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


def _band_cell(iv: Interval | None, wide: bool) -> str:
    """`0.0123 +-4%`, three significant digits: the interval is wider than a fourth would say (`wide`:
    `0.0123 [0.0118, 0.0128]`)."""
    if wide or iv is None or iv.n < 2 or not iv.value:
        return cell(iv, 4)
    digits = max(0, 2 - math.floor(math.log10(abs(iv.value))))
    return f"{iv.value:.{digits}f} +-{(iv.hi - iv.lo) / 2 / abs(iv.value):.0%}{iv.thin_note()}"


def cost_report_parts(model: CostModel, depths: list[int], timed: TimePrediction | None) -> list[Any]:
    """What `lab model cost` prints (lab.experiments.profile.rates.CostReport): the cost model's tables, then the
    time model's with --rates, in order."""
    times = time_tables(timed, model) if timed else []
    return cost_tables(model, depths) + times
