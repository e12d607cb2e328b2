"""What a sweep costs before it starts: the predicted wall time per arm and in total for a grid on a host, from
two rates, and how many reps fit a budget.

A prefill's time is modelled as a flat cost per token (FFN, projections, recurrent layers: the same at every
depth) plus attention's, which grows with the depth the token attends over:

    ms per token at depth d  =  flat + slope * d / 1000
    ms to decode positions [d0, d1)  =  flat * (d1 - d0) + slope * (d1^2 - d0^2) / 2000

The rates come from a rates file (`flat_ms_per_token`, `attn_ms_per_token_per_1k`), from a profile run (its time
model, lab.measure.timemodel, applied to the sweep's model: ms per token at depths up to the grid's deepest, a curve
the plan integrates piecewise linearly, so a sliding-window model's attention levels off where it should),
or from a short calibration (a few chunks at two depths). The plan counts what each design decodes; process
starts, model loads and HTTP round trips are not in it (a few seconds per run here), so it is a floor on a
quiet host.

Two designs are planned side by side:
  per-rep prefill  the lab before cumulative fills: every rep prefills the baseline (L + new), the genuine hit's
                   prefix (L) and a llama-bench call for the estimate (it fills the depth once per call, then
                   restores that state for its `bench_reps` reps, after a warm-up chunk)
  cumulative       every rep decodes only new tokens (fake, restored genuine, the estimate's chunk after a warm-up
                   chunk, a 16-token server warm-up); the deepest L is prefilled once for the server's saved states
                   and once per fill pass in process; a direct baseline (optional) runs in `baseline_reps` reps only
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, Field, ValidationError

from lab.core.errors import UsageError, validation_line
from lab.engine.contract import WARM_UP

Design = Literal["per-rep prefill", "cumulative"]
Where = Literal["server", "inproc", "both"]


class Rates(BaseModel):
    """ms per token of a prefill: flat, and attention's growth per 1,000 tokens of depth."""

    flat_ms_per_token: float = Field(gt=0)
    attn_ms_per_token_per_1k: float = Field(ge=0)
    source: str = ""
    curve: list[tuple[float, float]] = Field(
        default_factory=list,
        description="(position, ms per token) from a time model, in position order; when set it replaces the line "
        "(linear between points, and beyond the last along its last segment)",
    )

    decode_ms_per_token: float | None = Field(
        default=None, gt=0, description="a generated token's ms at depth 0 (the sweep's n_out); None: not known"
    )
    decode_ms_per_token_per_1k: float = Field(default=0.0, ge=0, description="... and its growth per 1,000 depth")
    process_start_s: float | None = Field(
        default=None, ge=0, description="starting one of a sweep's processes (model loads, states read back)"
    )

    def decode_ms(self, d0: int, d1: int) -> float:
        """Generating the tokens at positions [d0, d1), one per step."""
        if self.decode_ms_per_token is None:
            raise UsageError("the rates have no decode rate (decode_ms_per_token) for sweep.n_out")
        return self.decode_ms_per_token * (d1 - d0) + self.decode_ms_per_token_per_1k * (d1 * d1 - d0 * d0) / 2000

    def describe(self) -> str:
        decode = (
            f"; decode {self.decode_ms_per_token:.2f} ms/token + {self.decode_ms_per_token_per_1k:.3f} per 1k depth"
            if self.decode_ms_per_token is not None
            else ""
        )
        return self._prefill() + decode

    def _prefill(self) -> str:
        if self.curve:
            (x0, y0), (x1, y1) = self.curve[0], self.curve[-1]
            return f"{y0:.3f} ms/token at position {x0:,.0f} to {y1:.3f} at {x1:,.0f}"
        return f"{self.flat_ms_per_token:.3f} ms/token + {self.attn_ms_per_token_per_1k:.4f} per 1k depth"

    def per_token(self, p: float) -> float:
        """ms to decode the token at position p."""
        c = self.curve
        if not c:
            return self.flat_ms_per_token + self.attn_ms_per_token_per_1k * p / 1000
        if len(c) == 1:
            return c[0][1]
        i = min(max(bisect.bisect_right([x for x, _ in c], p) - 1, 0), len(c) - 2)
        (x0, y0), (x1, y1) = c[i], c[i + 1]
        return y0 + (y1 - y0) * (p - x0) / (x1 - x0)

    def ms(self, d0: int, d1: int) -> float:
        """Decoding positions [d0, d1)."""
        if not self.curve:
            return self.flat_ms_per_token * (d1 - d0) + self.attn_ms_per_token_per_1k * (d1 * d1 - d0 * d0) / 2000
        cuts = sorted({float(d0), float(d1), *(x for x, _ in self.curve if d0 < x < d1)})
        return sum((b - a) * (self.per_token(a) + self.per_token(b)) / 2 for a, b in itertools.pairwise(cuts))

    def chunk(self, L: int, new: int) -> float:
        return self.ms(L, L + new)


class ArmCost(BaseModel):
    arm: str
    what: str
    seconds: float


class Plan(BaseModel):
    design: Design
    where: Where
    reps: int = Field(description="the reps a point may take at most (max_reps), or the fixed count")
    points: int
    rates: Rates
    arms: list[ArmCost]
    reps_each: list[int] = Field(default_factory=list, description="the reps planned at each point")
    spread_source: str = Field(default="", description="a prediction: where the spread it assumes comes from")
    bound_s: float | None = Field(default=None, description="a prediction: the same grid at max_reps everywhere")
    took: tuple[float, float] | None = Field(
        default=None, description="a prediction: the range of what runs took against their plan (actual / predicted)"
    )
    took_source: str = Field(default="", description="a prediction: the runs that range comes from")
    said: bool = Field(
        default=True,
        description="whether the prediction is said; False where nothing here predicts the reps yet (no sweep of the "
        "model measured on this host): only the bound, and the prediction after the run's first processes",
    )

    @property
    def total_s(self) -> float:
        return sum(a.seconds for a in self.arms)

    def times(self, k: int) -> Plan:
        """The plan of k configurations measured interleaved, each costing what this one does (`--vs`)."""
        arms = [a.model_copy(update={"seconds": a.seconds * k}) for a in self.arms]
        bound = self.bound_s * k if self.bound_s is not None else None
        return self.model_copy(update={"arms": arms, "bound_s": bound})


Point = tuple[int, int]  # (L, only_new)


@dataclass(frozen=True)
class Grid:
    """The points a plan costs, the reps each gets, and the rates it costs them at."""

    points: list[Point]
    counts: list[int]
    rates: Rates

    def each(self, ms: Callable[[int, int], float]) -> float:
        """ms(L, new) of one rep, over every point's reps."""
        return sum(k * ms(L, n) for k, (L, n) in zip(self.counts, self.points, strict=True))

    @property
    def deepest(self) -> int:
        return max(L for L, _ in self.points)


def plan(
    design: Design,
    where: Where,
    points: list[Point],
    reps: int,
    arms: list[str],
    rates: Rates,
    *,
    fill_passes: int = 3,
    baseline_reps: int | None = 3,
    bench_reps: int = 3,
    bench_check: bool = True,
    n_out: int = 0,
    processes: int = 1,
    reps_each: list[int] | None = None,
    batch_chunk: int = 0,
) -> Plan:
    """The predicted seconds per arm for `reps` reps at every point (the most a point may take: max_reps), or
    `reps_each[i]` at point i (the reps each point is predicted to need); with n_out the fake arm also generates
    n_out tokens at depth L + new."""
    g = Grid(points, reps_each or [reps] * len(points), rates)
    r = rates
    base_reps = reps if baseline_reps is None or design == "per-rep prefill" else min(baseline_reps, reps)
    out: list[ArmCost] = []
    if processes > 1 and r.process_start_s is not None and design != "per-rep prefill":
        what = f"{processes} server and driver processes, each loading the model and reading the depth-L states back"
        out.append(cost("process starts", what, processes * r.process_start_s * 1e3))
    if "baseline" in arms:
        baseline = base_reps * sum(r.ms(0, L + n) for L, n in points)
        out.append(cost("baseline", f"L + new from empty, {base_reps} reps", baseline))
    if "fake" in arms:
        out.append(cost("fake", "new tokens after a fabricated prefix", g.each(r.chunk)))
        if n_out:
            decode = g.each(lambda L, n: r.decode_ms(L + n, L + n + n_out))
            out.append(cost("fake: decode", f"{n_out} tokens generated at depth L + new, one at a time", decode))
    if design == "per-rep prefill":
        out += per_rep_prefill_costs(g, arms, bench_reps)
    else:
        out += reuse_costs(g, where, arms, fill_passes, bench_reps, bench_check, batch_chunk)
    return Plan(design=design, where=where, reps=reps, points=len(points), rates=r, arms=out, reps_each=g.counts)


def cost(arm: str, what: str, ms: float) -> ArmCost:
    return ArmCost(arm=arm, what=what, seconds=ms / 1e3)


def per_rep_prefill_costs(g: Grid, arms: list[str], bench_reps: int) -> list[ArmCost]:
    """The old design: every rep of the genuine arm prefills its prefix, every estimate fills its depth."""
    r, out = g.rates, []
    if "genuine" in arms:
        out.append(
            cost("genuine", "prefix L prefilled, then new, every rep", g.each(lambda L, n: r.ms(0, L) + r.chunk(L, n)))
        )
    if "estimate" in arms:  # one llama-bench call per rep: it fills the depth once, then restores it per rep
        what = f"llama-bench -d L -r {bench_reps} per rep (a depth fill, a warm-up, {bench_reps} chunks)"
        out.append(cost("estimate", what, g.each(lambda L, n: r.ms(0, L) + (bench_reps + 1) * r.chunk(L, n))))
    return out


def reuse_costs(
    g: Grid, where: Where, arms: list[str], fill_passes: int, bench_reps: int, bench_check: bool, batch_chunk: int = 0
) -> list[ArmCost]:
    """The lab's design: each depth is reached once (saved states, fill passes), so a rep costs its new tokens;
    `batch_chunk`: the fill passes also time a chunk of that size at every L (the batch-size reference)."""
    r, out = g.rates, []
    if "genuine" in arms:
        states = r.ms(0, g.deepest) if where == "server" else 0.0  # the server's saved states: one cumulative fill
        what = "new tokens after a restored depth-L state" + (" (+ the states, once)" if states else "")
        out.append(cost("genuine", what, states + g.each(r.chunk)))
    if "plain" in arms:
        out.append(
            cost("plain", "prefix L prefilled, then new, every rep", g.each(lambda L, n: r.ms(0, L) + r.chunk(L, n)))
        )
    if where == "inproc" or "estimate" in arms:
        Ls = sorted({L for L, _ in g.points})
        chunks = sum(r.chunk(L, n) for L, n in g.points) + sum(r.chunk(L, batch_chunk) for L in Ls)
        what = f"{fill_passes} cumulative passes to depth {g.deepest}" + (
            f", a {batch_chunk}-token chunk at every L" if batch_chunk else ""
        )
        out.append(cost("fill passes", what, fill_passes * (r.ms(0, g.deepest) + chunks)))
    if where == "inproc" and "estimate" in arms:  # beside the driver's own arms: the chunk alone
        out.append(cost("estimate", "the chunk at depth L beside the rep's arms", g.each(r.chunk)))
    if where == "server" and "estimate" in arms:  # the chunk, its warm-up chunk, the server's short warm-up
        what = "the chunk at depth L in process, after a warm-up chunk; a short server warm-up"
        out.append(cost("estimate", what, g.each(lambda L, n: 2 * r.chunk(L, n) + r.chunk(L, min(n, WARM_UP)))))
        if bench_check:
            Ls, n0 = sorted({L for L, _ in g.points})[:2], min(n for _, n in g.points)
            check = sum(r.ms(0, L) + (bench_reps + 1) * r.chunk(L, n0) for L in Ls)
            out.append(cost("llama-bench check", f"once at L = {', '.join(map(str, Ls))}, new = {n0}", check))
    return out


def fit_reps(budget_s: float, plan_of: Callable[[int], Plan]) -> int:
    """The most reps (1..200) whose plan fits `budget_s`; a budget that one rep exceeds is a one-line error."""
    one = plan_of(1)
    if one.total_s > budget_s:
        raise UsageError(
            f"--budget {fmt_duration(budget_s)}: one rep of this grid already takes about "
            f"{fmt_duration(one.total_s)}; give more time or a smaller grid"
        )
    lo, hi = 1, 200
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if plan_of(mid).total_s <= budget_s else (lo, mid - 1)
    return lo


DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> float:
    """`30m`, `1h30m`, `90s`, `2h` -> seconds; anything else is a one-line error."""
    m = DURATION.match(text.strip())
    if not text.strip() or m is None or not any(m.groups()):
        raise UsageError(f"--budget: expected a duration like 30m, 1h30m or 90s, got {text!r}")
    h, mi, s = (int(g) if g else 0 for g in m.groups())
    return float(h * 3600 + mi * 60 + s)


def fmt_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def rates_from_file(path: Path) -> Rates:
    """A YAML or JSON rates file: flat_ms_per_token and attn_ms_per_token_per_1k."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise UsageError(f"--rates {path}: cannot read it as YAML or JSON ({e})") from e
    if not isinstance(data, dict):
        raise UsageError(f"--rates {path}: expected a mapping with flat_ms_per_token and attn_ms_per_token_per_1k")
    unknown = sorted(set(data) - {"flat_ms_per_token", "attn_ms_per_token_per_1k", "source"})
    if unknown:
        raise UsageError(f"--rates {path}: unknown key {unknown[0]!r} (flat_ms_per_token, attn_ms_per_token_per_1k)")
    try:
        return Rates.model_validate({"source": f"file {path}", **data})
    except ValidationError as e:
        raise UsageError(f"--rates {path}: {validation_line(e, limit=1)}") from e


def rates_from_chunks(chunks: list[tuple[int, int, float]], source: str) -> Rates:
    """Rates fitted to chunks (L, new, ms): ms / new = flat + slope * (L + new / 2) / 1000, least squares."""
    from lab.core.stats import linear_fit

    xs = [(L + n / 2) / 1000 for L, n, _ in chunks]
    ys = [ms / n for _, n, ms in chunks]
    slope, flat, _ = linear_fit(xs, ys)
    if flat <= 0:
        flat, slope = min(ys), 0.0
    return Rates(flat_ms_per_token=flat, attn_ms_per_token_per_1k=max(0.0, slope), source=source)


def plan_line(new: Plan, actual_s: float | None = None, after: Plan | None = None) -> str:
    """The plan in one line (a sweep prints it as it starts, and with what it took at the end)."""
    each = sorted(set(new.reps_each))
    if new.bound_s is not None and each and not new.said:  # nothing here predicts the reps yet: the bound alone
        line = (
            f"at most {fmt_duration(new.bound_s)} for {new.points} points at {new.reps} reps; predicted after the "
            "run's first processes (no sweep of this model measured here yet)"
        )
    elif new.bound_s is not None and each:  # a prediction: the reps each point is expected to need, and the bound
        reps = f"{each[0]}" if len(each) == 1 else f"{each[0]}-{each[-1]}"
        span = ""
        if new.took is not None:  # never above the bound: no point takes more than max_reps
            lo, hi = new.total_s * new.took[0], min(new.total_s * new.took[1], new.bound_s)
            span = f" ({fmt_duration(lo)} to {fmt_duration(hi)}: {new.took_source})"
        line = (
            f"predicted {fmt_duration(new.total_s)}{span} for {new.points} points at {reps} reps each (from "
            f"{new.spread_source}); at most {fmt_duration(new.bound_s)} at {new.reps} reps"
        )
    else:
        line = f"predicted {fmt_duration(new.total_s)} for {new.points} points at up to {new.reps} reps"
    if actual_s is not None:
        against = [f"{actual_s / new.total_s:.2f}x the prediction"] if new.said and new.total_s else []
        if after is not None and after.total_s:
            ratio, first = actual_s / after.total_s, "the one" if against else "the prediction"
            against.append(f"{ratio:.2f}x {first} after its first processes, {fmt_duration(after.total_s)}")
        line += f"; took {fmt_duration(actual_s)}" + (f" ({', '.join(against)})" if against else "")
    return line
