"""Time from FLOPs: each band's achieved rate, measured by a profile, turns the cost model's FLOPs at any depth
into ms per token, and predicts the depth where attention overtakes the FFN in time, not only in FLOPs.

Per band b, with F_b(d) the cost model's FLOPs per token of a chunk at depth d (lab.costmodel):

    ms_b(d) = F_b(d) / rate_b,    rate_b = the median over the profiled depths of F_b(d) / measured ms_b(d)

The FFN's, the projections' and the recurrent layers' FLOPs do not grow with depth, so neither does their
time; attention's grow with every key a query reads, window-capped on sliding layers, so its time grows at
F'(d) / rate and a sliding-window model's levels off where its FLOPs do. A band with no counted FLOPs keeps
its measured ms as a per-token overhead. The median makes one odd depth (the first chunk of a cycle, say)
harmless. A free intercept and slope per band was tried as well: from a profile to 1024 it extrapolated worse
to 4096 on both the tiny hybrid and a pretrained sliding-window model (docs/cost-model.md).

Applied to another model (`lab model cost OTHER --rates RUN`), the rates keep their GFLOP/s and an overhead
scales with the count of the layers it occurs in; that transfer is an assumption the docs name. Intervals come
from a bootstrap over the profile's cycles (a resample draws whole cycles), like every profile number: they say
how well this profile pins the rates, not how another run, host or day would differ.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from pydantic import BaseModel, Field

from lab.costmodel import CostModel
from lab.schemas import BANDS, Band, BandCycle, Interval
from lab.stats import from_draws, resamples

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
    cycles); a band with no counted FLOPs keeps its median ms as a per-token overhead."""
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


def time_crossover(p: Params, flops: FlopTable, scale: Mapping[Band, float]) -> float | None:
    """The depth at which attn_core's predicted ms/token reaches ffn_moe's (None when it never does up to LIMIT,
    e.g. when every attention layer has a window)."""

    def gap(d: int) -> float:
        m = predict_ms(p, flops, d, scale)
        return m["attn_core"] - m["ffn_moe"]

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


class BandAt(BaseModel):
    depth: int
    band: str = Field(description="a band, or total (all bands)")
    ms_per_token: Interval


class TimePrediction(BaseModel):
    """What a time model predicts for a model at some depths: the record `lab model cost --rates` prints and a
    profile's summary keeps (its own rates applied to its own model)."""

    source: str = Field(description="the profile the rates come from: run, depths fitted, cycles")
    model: str = Field(description="the model the FLOPs are counted for")
    fitted_depths: list[int]
    rates: dict[str, BandRate]
    at: list[BandAt] = Field(default_factory=list)
    crossover: Interval | None = Field(default=None, description="attn_core ms/token = ffn_moe's (bootstrap)")
    crossover_note: str = Field(default="", description="why there is no crossover, or what share of draws had one")
    flop_crossover: float | None = Field(default=None, description="attn_core FLOPs = ffn_moe FLOPs")

    def band_at(self, depth: int, band: str) -> Interval | None:
        return next((r.ms_per_token for r in self.at if r.depth == depth and r.band == band), None)


@dataclass
class TimeFit:
    """The point fit and its bootstrap replicates (each a fit to a resample of whole cycles)."""

    params: Params
    draws: list[Params]
    depths: list[int]
    cycles: int
    flops: FlopTable


def cycle_cells(rows: Iterable[BandCycle], max_depth: int | None) -> dict[tuple[int, Band, int], float]:
    out: dict[tuple[int, Band, int], float] = {}
    for r in rows:
        if max_depth is None or r.depth <= max_depth:
            out[(r.depth, r.band, r.cycle)] = r.ms_per_token  # type: ignore[index]
    return out


def fit(rows: Iterable[BandCycle], cost: CostModel, max_depth: int | None = None, key: str = "") -> TimeFit:
    """The time model from a profile's per-cycle band rows at depths up to `max_depth` (all when None)."""
    cells = cycle_cells(rows, max_depth)
    depths = sorted({d for d, _, _ in cells})
    cycles = sorted({c for _, _, c in cells})
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

    point = fit_params(medians(cycles), flops, depths)
    draws = [
        fit_params(medians([cycles[i] for i in idx]), flops, depths)
        for idx in resamples(len(cycles), f"timemodel/{key}/{max_depth}", count=DRAWS)
    ]
    return TimeFit(point, draws, depths, len(cycles), flops)


def predict(tf: TimeFit, target: CostModel | None, depths: list[int], source: str, model: str) -> TimePrediction:
    """The fit applied to `target` (the profiled model when None) at `depths`, each number with its interval."""
    flops = tf.flops if target is None else FlopTable(target)
    src_layers, dst_layers = layer_counts(tf.flops.cost), layer_counts(flops.cost)
    scale = {b: (dst_layers[b] / src_layers[b] if src_layers[b] else 0.0) for b in BANDS}
    n = tf.cycles
    at = []
    for d in depths:
        point = predict_ms(tf.params, flops, d, scale)
        reps = [predict_ms(p, flops, d, scale) for p in tf.draws]
        for b in (*BANDS, "total"):
            value = sum(point.values()) if b == "total" else point[b]  # type: ignore[index]
            iv = from_draws(value, [sum(r.values()) if b == "total" else r[b] for r in reps], n)  # type: ignore[index]
            if iv is not None:
                at.append(BandAt(depth=d, band=b, ms_per_token=iv))
    rates: dict[str, BandRate] = {}
    for b in BANDS:
        rate = tf.params[b].flop_per_ms
        gf = from_draws(rate / 1e6, [p[b].flop_per_ms / 1e6 for p in tf.draws], n) if rate else None
        oh = tf.params[b].overhead_ms
        ov = from_draws(oh, [p[b].overhead_ms for p in tf.draws], n) if oh or not rate else None
        rates[b] = BandRate(gflops=gf, overhead_ms_per_token=ov)
    out = TimePrediction(
        source=source, model=model, fitted_depths=tf.depths, rates=rates, at=at, flop_crossover=flops.cost.crossover()
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
        if len(reached) < len(drawn):
            out.crossover_note = f"{len(drawn) - len(reached)} of {len(drawn)} resamples never cross"
    return out
