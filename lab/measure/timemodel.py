"""Time from FLOPs: each band's achieved rate, measured by a profile, turns the cost model's FLOPs at any depth
into ms per token, and predicts the depth where attention overtakes the FFN in time, not only in FLOPs.

Per band b, with F_b(d) the cost model's FLOPs per token of a chunk at depth d (lab.measure.costmodel):

    ms_b(d) = F_b(d) / rate_b,    rate_b = the median over the profiled depths of F_b(d) / measured ms_b(d)

The FFN's, the projections' and the recurrent layers' FLOPs do not grow with depth, so neither does their
time; attention's grow with every key a query reads, window-capped on sliding layers, so its time grows at
F'(d) / rate and a sliding-window model's levels off where its FLOPs do. A band with no counted FLOPs keeps
its measured ms as a per-token overhead. The median makes one odd depth (the first chunk of a pass, say)
harmless. A free intercept and slope per band was tried as well: from a profile to 1024 it extrapolated worse
to 4096 on both the tiny hybrid and a pretrained sliding-window model (docs/cost-model.md).

Applied to another model (`lab model cost OTHER --rates RUN`), the rates keep their GFLOP/s and an overhead
scales with the count of the layers it occurs in; that transfer is an assumption the docs name.

Intervals come from a bootstrap that draws whole processes and, independently, the depths a rate's median is taken
over. The processes say how well this profile pins each rate; the depths say how far a band's rate moves across the
depths it was fitted on, which is the model's own error (a constant rate per band). The intervals also reach to
the rate's trend continued: the profile is fitted again on its depths up to D/2 (D its deepest), and measured /
predicted at D (a band whose kernels grow more efficient with depth comes in under its prediction) is applied
once per doubling of depth past the median fitted depth, the depth a median rate stands for. None of this says
how another run, host or day would differ.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from pydantic import BaseModel, Field

from lab.core.schemas import BANDS, Band, BandAt, BandProcess, Interval
from lab.core.stats import from_draws, resamples
from lab.measure.costmodel import CostModel

FLAT: tuple[Band, ...] = ("ffn_moe", "proj", "gdn", "other")
LIMIT = 1 << 22  # the deepest depth a crossover is looked for (4M tokens)
DRAWS = 400


@dataclass(frozen=True)
class BandTime:
    """One band's fitted time: a per-token overhead and a rate (FLOPs per ms; inf when FLOPs cost no time)."""

    overhead_ms: float
    flop_per_ms: float

    def ms(self, flops_per_token: float) -> float:
        return self.overhead_ms + (flops_per_token / self.flop_per_ms if self.flop_per_ms else 0.0)


Params = dict[Band, BandTime]


class FlopTable:
    """The cost model's FLOPs per token per band at a depth, each depth computed once."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self.at = lru_cache(maxsize=None)(self._at)

    def _at(self, depth: int) -> dict[Band, float]:
        return {b: c.flops / self.cost.chunk for b, c in self.cost.bands(depth).items()}


def layer_counts(cost: CostModel) -> dict[Band, int]:
    """The layers each band's overhead occurs in (attention layers for attn_core, every layer otherwise)."""
    h = cost.h
    attn = h.count("attention") + h.count("sliding")
    return {
        b: (attn if b in ("attn_core", "proj") else h.count("recurrent") if b == "gdn" else h.n_layer) for b in BANDS
    }


def fit_params(ms: Mapping[tuple[int, Band], float], flops: FlopTable, depths: list[int]) -> Params:
    """Each band's rate: the median over `depths` of its FLOPs per token / its ms per token there (medians over
    processes); a band with no counted FLOPs keeps its median ms as a per-token overhead."""
    out: Params = {}
    for b in BANDS:
        rates = [flops.at(d)[b] / ms[(d, b)] for d in depths if ms[(d, b)] > 0 and flops.at(d)[b] > 0]
        if rates:
            out[b] = BandTime(0.0, statistics.median(rates))
        else:
            out[b] = BandTime(statistics.median(ms[(d, b)] for d in depths), 0.0)
    return out


def predict_ms(p: Params, flops: FlopTable, depth: int, scale: Mapping[Band, float]) -> dict[Band, float]:
    f = flops.at(depth)
    return {b: p[b].overhead_ms * scale[b] + (f[b] / p[b].flop_per_ms if p[b].flop_per_ms else 0.0) for b in BANDS}


Trend = Callable[[int], Mapping[Band, float]]  # a factor per band at a depth (the rates' trend continued)


def time_crossover(
    p: Params, flops: FlopTable, scale: Mapping[Band, float], trend: Trend | None = None
) -> float | None:
    """The depth at which attn_core's predicted ms/token reaches ffn_moe's (None when it never does up to LIMIT,
    e.g. when every attention layer has a window)."""

    def gap(d: int) -> float:
        m = predict_ms(p, flops, d, scale)
        f = trend(d) if trend else {"attn_core": 1.0, "ffn_moe": 1.0}
        return m["attn_core"] * f["attn_core"] - m["ffn_moe"] * f["ffn_moe"]

    if gap(0) >= 0:
        return 0.0
    if gap(LIMIT) < 0:
        return None
    lo, hi = 0, LIMIT
    while hi - lo > 1:  # attention's FLOPs grow with depth, the FFN's do not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    g0, g1 = gap(lo), gap(hi)
    return lo + (-g0) / (g1 - g0)


class BandRate(BaseModel):
    """A band's fitted time, as stored: GFLOP/s achieved on its counted FLOPs, and its per-token overhead."""

    gflops: Interval | None = Field(default=None, description="counted FLOPs / the time they add (None: no FLOPs)")
    overhead_ms_per_token: Interval | None = Field(default=None, description="the per-token time that does not grow")


class TimePrediction(BaseModel):
    """What a time model predicts for a model at some depths: the record `lab model cost --rates` prints and a
    profile's summary keeps (its own rates applied to its own model)."""

    source: str = Field(description="the profile the rates come from: run, depths fitted, processes")
    model: str = Field(description="the model the FLOPs are counted for")
    fitted_depths: list[int]
    rates: dict[str, BandRate]
    at: list[BandAt] = Field(default_factory=list)
    crossover: Interval | None = Field(default=None, description="attn_core ms/token = ffn_moe's (bootstrap)")
    crossover_note: str = Field(default="", description="why there is no crossover, or what share of draws had one")
    flop_crossover: float | None = Field(default=None, description="attn_core FLOPs = ffn_moe FLOPs")
    trend: dict[str, float] = Field(
        default_factory=dict,
        description="per band, measured / predicted at the deepest fitted depth from the depths up to half of it; "
        "the intervals reach to it, once per doubling past the median fitted depth",
    )

    def band_at(self, depth: int, band: str) -> Interval | None:
        return next((r.ms_per_token for r in self.at if r.depth == depth and r.band == band), None)


@dataclass
class TimeFit:
    """The point fit and its bootstrap replicates (each a fit to a resample of whole processes)."""

    params: Params
    draws: list[Params]
    depths: list[int]
    processes: int
    flops: FlopTable
    trend: dict[Band, float]

    def beyond(self, depth: int) -> dict[Band, float]:
        """The trend's factor per band at `depth`: the trend once per doubling past the median fitted depth (the
        depth a median rate stands for), 1 before it."""
        middle = statistics.median_low(self.depths)
        k = math.log2(depth / middle) if depth > middle > 0 else 0.0
        return {b: self.trend[b] ** k for b in BANDS}


def rate_trend(ms: Mapping[tuple[int, Band], float], flops: FlopTable, depths: list[int]) -> dict[Band, float]:
    """Per band, measured / predicted at the deepest depth when the rates are fitted on the depths up to half of
    it (1 where fewer than two depths are that shallow)."""
    deepest = depths[-1]
    half = [d for d in depths if d <= deepest / 2]
    if len(half) < 2:
        return dict.fromkeys(BANDS, 1.0)
    pred = predict_ms(fit_params(ms, flops, half), flops, deepest, dict.fromkeys(BANDS, 1.0))
    return {b: ms[(deepest, b)] / pred[b] if pred[b] > 0 and ms[(deepest, b)] > 0 else 1.0 for b in BANDS}


def process_cells(rows: Iterable[BandProcess], max_depth: int | None) -> dict[tuple[int, Band, int], float]:
    out: dict[tuple[int, Band, int], float] = {}
    for r in rows:
        if max_depth is None or r.depth <= max_depth:
            out[(r.depth, r.band, r.process)] = r.ms_per_token  # type: ignore[index]
    return out


def fit(rows: Iterable[BandProcess], cost: CostModel, max_depth: int | None = None, key: str = "") -> TimeFit:
    """The time model from a profile's per-process band rows at depths up to `max_depth` (all when None)."""
    cells = process_cells(rows, max_depth)
    depths = sorted({d for d, _, _ in cells})
    processes = sorted({c for _, _, c in cells})
    if len(depths) < 2:
        raise ValueError(f"a time model needs at least two profiled depths (has {depths})")
    flops = FlopTable(cost)

    def medians(chosen: list[int]) -> dict[tuple[int, Band], float]:
        by: dict[tuple[int, Band], list[float]] = defaultdict(list)
        for c in chosen:
            for d in depths:
                for b in BANDS:
                    if (d, b, c) in cells:
                        by[(d, b)].append(cells[(d, b, c)])
        return {k: statistics.median(v) for k, v in by.items()}

    ms = medians(processes)
    point = fit_params(ms, flops, depths)
    by_process = resamples(len(processes), f"timemodel/{key}/{max_depth}", count=DRAWS)
    by_depth = resamples(len(depths), f"timemodel/{key}/{max_depth}/depths", count=DRAWS)
    draws = [
        fit_params(medians([processes[i] for i in ci]), flops, [depths[j] for j in dj])
        for ci, dj in zip(by_process, by_depth, strict=True)
    ]
    return TimeFit(point, draws, depths, len(processes), flops, rate_trend(ms, flops, depths))


def predict(tf: TimeFit, model_cost: CostModel | None, depths: list[int], source: str, model: str) -> TimePrediction:
    """The fit applied to `model_cost` (the profiled model when None) at `depths`, each number with its interval."""
    flops = tf.flops if model_cost is None else FlopTable(model_cost)
    src_layers, dst_layers = layer_counts(tf.flops.cost), layer_counts(flops.cost)
    scale = {b: (dst_layers[b] / src_layers[b] if src_layers[b] else 0.0) for b in BANDS}
    n = tf.processes
    at = []
    for d in depths:
        point, trend = with_total(predict_ms(tf.params, flops, d, scale)), tf.beyond(d)
        reps = [with_total(predict_ms(p, flops, d, scale)) for p in tf.draws]
        total = sum(point[b] * trend[b] for b in BANDS) / point["total"] if point["total"] else 1.0
        f = {str(b): v for b, v in trend.items()} | {"total": total}
        for b in point:
            iv = from_draws(point[b], [r[b] for r in reps], n)
            if iv is not None:
                at.append(BandAt(depth=d, band=b, ms_per_token=widen(iv, f[b])))
    rates: dict[str, BandRate] = {}
    for b in BANDS:
        rate = tf.params[b].flop_per_ms
        gf = from_draws(rate / 1e6, [p[b].flop_per_ms / 1e6 for p in tf.draws], n) if rate else None
        oh = tf.params[b].overhead_ms
        ov = from_draws(oh, [p[b].overhead_ms for p in tf.draws], n) if oh or not rate else None
        rates[b] = BandRate(gflops=gf, overhead_ms_per_token=ov)
    out = TimePrediction(
        source=source,
        model=model,
        fitted_depths=tf.depths,
        rates=rates,
        at=at,
        flop_crossover=flops.cost.crossover(),
        trend={b: round(t, 4) for b, t in tf.trend.items()},
    )
    point_x = time_crossover(tf.params, flops, scale)
    drawn = [time_crossover(p, flops, scale) for p in tf.draws]
    reached = [x for x in drawn if x is not None]
    if point_x is None:
        out.crossover_note = f"not before depth {LIMIT:,}" + (
            " (every attention layer is window-capped)" if not flops.cost.h.count("attention") else ""
        )
    else:
        out.crossover = from_draws(point_x, reached, n)
        trended = time_crossover(tf.params, flops, scale, tf.beyond)
        if out.crossover is not None and point_x > 0:
            out.crossover = widen(out.crossover, (trended if trended is not None else LIMIT) / point_x)
        if len(reached) < len(drawn):
            out.crossover_note = f"{len(drawn) - len(reached)} of {len(drawn)} resamples never cross"
    return out


def with_total(per_band: Mapping[Band, float]) -> dict[str, float]:
    out = {str(b): v for b, v in per_band.items()}
    out["total"] = sum(per_band.values())
    return out


def widen(iv: Interval, factor: float) -> Interval:
    """The interval reaching to the estimate's ends moved by `factor` too (the rates' trend continued)."""
    if factor == 1.0:
        return iv
    return iv.model_copy(update={"lo": min(iv.lo, iv.lo * factor), "hi": max(iv.hi, iv.hi * factor)})
