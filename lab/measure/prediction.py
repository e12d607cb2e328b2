"""How many reps a sweep's point will take before its verdicts are decided, and how sure a plan can be of it: the
lab's default spread per place, the widened interval's arithmetic a spread predicts reps by, the reps an
undecided point takes in each further process, and the range a plan's time is said with (what the runs here took
against their plans). lab.measure.plan prices the reps; lab.experiments.sweep.planning says which to expect."""

from __future__ import annotations

import math

from lab.core.components import reps_per_process
from lab.core.schemas import Components, Interval
from lab.core.stats import expansion

Z95 = 1.96
# what a ratio varies by when nothing here has measured it yet, between processes and within one, per place: the
# spread that predicts the reps the default grid took on this kind of 2-core VM with the widened intervals
# (2026-12-07, two default sweeps: 17 to 64 reps a point, median 32; two `lab arms` runs: 283 and 349 reps over 8
# points, fake / estimate deciding too; the variance components measured there,
# 0.03 to 0.14 between and 0.04 to 0.16 within, predict 2 to 2.5x those reps, since the stop rule meets an
# interval that narrows unevenly). A sweep measured here before gives each point its own reps instead
# (lab.experiments.sweep.planning.predicted_counts), and the plan after the run's first processes reads their
# own pairs (lab.experiments.sweep.planning.plan_after).
DEFAULT_SPREADS: dict[str, Components] = {
    "server": Components(between=0.06, within=0.04, processes=0, reps=0),
    "inproc": Components(between=0.07, within=0.045, processes=0, reps=0),
}
DEFAULT_SPREAD = DEFAULT_SPREADS["server"]


# what a plan's time was off by where no runs here have a plan yet: on a 2-core VM (2026-12-07) sixteen default
# `lab sweep` and `lab arms` runs took 0.33 to 3.26x their plan, the host quiet in one session, busy in another,
# beside a CPU hog in a third (docs/repetition.md: the plan against the run); with runs of its own (PLAN_RUNS of
# the newest that made a plan) a host's range is theirs
DEFAULT_TOOK = (0.33, 3.3)
PLAN_RUNS = 6


def took_range(ratios: list[float]) -> tuple[tuple[float, float], str]:
    """The range a plan is said with: what the newest runs here took against their plans (actual / predicted,
    newest first), the narrowest and widest of the newest PLAN_RUNS, once there are three; else the default."""
    mine = ratios[:PLAN_RUNS]
    if len(mine) < 3:
        return DEFAULT_TOOK, f"runs took {DEFAULT_TOOK[0]:.2f}-{DEFAULT_TOOK[1]:.2f}x their plan on a 2-core VM"
    lo, hi = min(mine), max(mine)
    return (lo, hi), f"the {len(mine)} newest runs here took {lo:.2f}-{hi:.2f}x their plan"


def predicted_reps(
    spreads: dict[str, tuple[Components, float]],
    bounds: dict[str, tuple[float, float]],
    min_reps: int,
    max_reps: int,
    processes: int,
    default: Components = DEFAULT_SPREAD,
) -> int:
    """The reps a point is predicted to take before it stops: each process adds ceil(min_reps / processes) reps
    (r), and a ratio's interval after P processes is about e(P) x 1.96 x sqrt((between^2 + 2 within^2 / r) / P)
    wide each side (the two-stage bootstrap counts the within spread twice; e(P), the widening for few processes,
    lab.core.stats.expansion); the point stops once every ratio is decided
    (its interval inside 1 +- tolerance, so narrower than the tolerance less how far the ratio sat from 1) and as
    narrow as its target. `spreads`: per ratio its spread and that distance (else `default` at 1); `bounds`:
    per ratio (target half-width, tolerance). At least `processes` processes, at most max_reps reps."""
    per = math.ceil(min_reps / processes)
    need = processes
    for name, (target, tolerance) in bounds.items():
        spread, gap = spreads.get(name, (default, 0.0))
        room = min(target, tolerance - gap)
        if room <= 0:
            return max_reps  # it sat on the bound: no number of reps decides it
        one = spread.between**2 + 2 * spread.within**2 / per
        need = max(need, processes_to_narrow(one, room, need, math.ceil(max_reps / per)))
    return min(max_reps, per * need)


def processes_to_narrow(one: float, room: float, at_least: int, at_most: int) -> int:
    """The fewest processes (at least `at_least`) whose widened interval, e(P) x 1.96 x sqrt(one / P) each side,
    fits `room` (`at_most` when none up to it does)."""
    for p in range(max(2, at_least), at_most + 1):
        if expansion(p) * Z95 * math.sqrt(one / p) <= room:
            return p
    return max(at_least, at_most)


def spread_of(iv: Interval) -> Components | None:
    """The spread an interval over several processes implies when its run kept no components (one rep per
    process: the within-process part cannot be told apart): all of it between processes, as the standard
    deviation of a process's log value (the half-width is about e(P) x 1.96 of those over sqrt(processes), e(P) the
    widening for few processes)."""
    if iv.processes < 2 or iv.value <= 0 or iv.lo <= 0:
        return None
    half = (math.log(iv.hi) - math.log(iv.lo)) / 2 / expansion(iv.processes)
    return Components(between=half / Z95 * math.sqrt(iv.processes), within=0.0, processes=iv.processes, reps=iv.n)


def processes_needed(reps: int, share: int, processes: int, per_extra: int) -> int:
    """The processes a point of `reps` reps runs in: `share` reps in each of the run's first `processes`, then
    `per_extra` in each further one (the sweep's ledger: lab.experiments.sweep.rounds)."""
    first = share * processes
    if reps <= first:  # done within its first processes (a point at max_reps stops there)
        return math.ceil(reps / share)
    return processes + math.ceil((reps - first) / max(1, per_extra))


def reps_in_further_process(spread: Components, start_s: float, rep_s: float, share: int, most: int) -> int:
    """The reps an undecided point takes in each process past its first ones (the sweep's ledger and the plan
    alike): as many as narrow its interval most per second (lab.core.components.reps_per_process, Kalibera and
    Jones), at least its share per process, at most `most` (sweep.min_reps: a process far larger than the point's
    others would weigh on its interval alone, and once processes differ at all more processes are what narrow
    it)."""
    return max(share, min(reps_per_process(spread, start_s, rep_s), most))
