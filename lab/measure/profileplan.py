"""What a profile costs before it starts: the predicted wall time of `lab profile` per part, at the sweep plan's
rates (lab.measure.plan.Rates), and the most reps a budget affords.

What each part decodes, per process k (lab/instrument/profile_prefill.cpp, lab/experiments/profile/bench.py):
  probes       an untimed warm-up chunk at depth 0; then fill fake: `reps` rounds over the depths, one chunk
               FUSED and one TIMED at each after a fake prefix (free); fill real: per rep two cumulative passes
               (FUSED, TIMED), each decoding every chunk from 0 to the deepest depth
  check        profile.real_check: one real fill to check_depth, and at each checked depth `reps` x 4 chunks
  llama-bench  at each of bench_depths: a warm-up chunk at depth 0, one real fill of d tokens, then `reps`
               chunks at d (it restores the filled state per rep)
TIMED computes each node alone and is planned at FUSED's cost (the profile's TIMED / FUSED check: about equal).
Process starts and model loads are counted only when the rates know what one costs (`process_start_s`).
"""

from __future__ import annotations

from typing import cast

from pydantic import BaseModel

from lab.core.settings import Settings
from lab.core.settings_profile import ProfileSettings
from lab.measure.plan import ArmCost, Plan, Rates, cost, fit_reps

MODES = 2  # FUSED and TIMED: a probe decodes its chunk once in each
CHECK_CHUNKS = 4  # the check's rep: each mode after a restored real state and after a fake prefix


class ProfilePlan(BaseModel):
    """A profile's predicted wall time per part, over all its processes."""

    profile: ProfileSettings
    reps: int
    rates: Rates
    parts: list[ArmCost]

    @property
    def total_s(self) -> float:
        return sum(a.seconds for a in self.parts)

    @property
    def bound_s(self) -> float | None:
        """With profile.max_processes: the most the run may take (every part is per process)."""
        p = self.profile
        return self.total_s * p.max_processes / p.processes if p.max_processes else None

    @property
    def unreferenced(self) -> list[int]:
        """The probe depths no llama-bench call references."""
        bench = set(self.profile.bench_depths) if benched(self.profile) else set()
        return [d for d in self.profile.depths if d not in bench]


def benched(p: ProfileSettings) -> bool:
    """Whether a llama-bench process follows each instrument process (as lab.experiments.profile.run decides)."""
    return p.bench_check and bool(p.bench_depths)


def probes_ms(p: ProfileSettings, r: Rates, reps: int) -> float:
    """One instrument process's probes, its warm-up chunk included."""
    warm = r.chunk(0, p.chunk)
    if p.fill == "real":  # a pass decodes the deepest depth's chunk too
        return warm + reps * MODES * r.ms(0, max(p.depths) + p.chunk)
    return warm + reps * MODES * sum(r.chunk(d, p.chunk) for d in p.depths)


def check_ms(p: ProfileSettings, r: Rates, reps: int) -> float:
    """One instrument process's fake-vs-real check (0 without it)."""
    if p.check_depth is None:
        return 0.0
    return r.ms(0, p.check_depth) + reps * CHECK_CHUNKS * sum(r.chunk(d, p.chunk) for d in p.bench_depths)


def bench_fills_ms(p: ProfileSettings, r: Rates) -> float:
    """One llama-bench process's warm-up chunks and real fills, one each per depth."""
    return sum(r.chunk(0, p.chunk) + r.ms(0, d) for d in p.bench_depths)


def bench_reps_ms(p: ProfileSettings, r: Rates, reps: int) -> float:
    """One llama-bench process's timed chunks."""
    return reps * sum(r.chunk(d, p.chunk) for d in p.bench_depths)


def starts_ms(p: ProfileSettings, r: Rates) -> float:
    """The processes' starts: process_start_s is a sweep process's (a server and a driver, two model loads), so
    an instrument process and its llama-bench process cost one; an instrument process alone, half."""
    assert r.process_start_s is not None
    return p.processes * r.process_start_s * 1e3 * (1.0 if benched(p) else 0.5)


def profile_plan(p: ProfileSettings, r: Rates, reps: int | None = None) -> ProfilePlan:
    """The profile of `p` at profile.processes processes of `reps` reps (default: reps_per_process)."""
    n, k, c = reps or p.reps_per_process, p.processes, p.chunk
    parts: list[ArmCost] = []
    if r.process_start_s is not None:
        loads = f"{k} instrument" + (f" and {k} llama-bench" if benched(p) else "") + " processes loading the model"
        parts.append(cost("process starts", loads, starts_ms(p, r)))
    if p.fill == "real":
        what = f"{n} x two cumulative passes (FUSED, TIMED) to depth {max(p.depths)} in chunks of {c}"
    else:
        what = f"at each of {len(p.depths)} depths {n} x a {c}-token chunk FUSED and TIMED after a fake prefix"
    parts.append(cost("probes", f"{what}; a warm-up chunk", k * probes_ms(p, r, n)))
    if benched(p):
        what = f"a warm-up chunk and a real fill to each of {len(p.bench_depths)} depths"
        parts.append(cost("llama-bench fills", what, k * bench_fills_ms(p, r)))
        what = f"{n} x a chunk at each depth, the filled state restored"
        parts.append(cost("llama-bench reps", what, k * bench_reps_ms(p, r, n)))
    if p.check_depth is not None:
        what = f"a real fill to {p.check_depth}; {n} x {CHECK_CHUNKS} chunks at each of {len(p.bench_depths)} depths"
        parts.append(cost("fake-vs-real check", what, k * check_ms(p, r, n)))
    return ProfilePlan(profile=p, reps=n, rates=r, parts=parts)


def budget_reps(p: ProfileSettings, r: Rates, budget_s: float) -> int | None:
    """The most reps whose plan fits `budget_s` at the most processes the run may take (max_processes when set);
    None when one rep does not fit."""
    most = p.model_copy(update={"processes": p.max_processes or p.processes})
    if profile_plan(most, r, 1).total_s > budget_s:
        return None
    return fit_reps(budget_s, lambda n: cast(Plan, profile_plan(most, r, n)))  # it reads only total_s


def with_reps(settings: Settings, reps: int) -> Settings:
    return settings.model_copy(update={"profile": settings.profile.model_copy(update={"reps": reps})})


def rates_settings(settings: Settings, ref: str | None) -> Settings:
    """The settings whose sweep plan resolves the profile's rates (lab.experiments.sweep.rates.rates_for, one
    resolution for both): `ref` (a rates file, or a profile run's time model up to the deepest probe's chunk),
    else a calibration of a chunk of profile.chunk at the shallowest nonzero depth and at min(deepest, 2048)."""
    p = settings.profile
    Ls = [d for d in p.depths if d > 0] or [p.chunk]
    sw = settings.sweep.model_copy(update={"rates": ref, "Ls": Ls, "news": [p.chunk], "n_out": 0})
    return settings.model_copy(update={"sweep": sw})
