"""A sweep's plan on this host: the rates (a rates file, a profile run, or a short calibration with the in-process
driver), the grid's predicted wall time per arm for the lab's design and for one that prefills per rep, the
reps a budget affords, and after a run, predicted against actual (lab.measure.plan holds the arithmetic)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from lab.catalog.newest import newest_runs
from lab.core.errors import warn
from lab.core.runs import RunError, RunFolder
from lab.core.schemas import Components, InprocFill, SweepPoint, SweepSample
from lab.core.schemas.raw import SWEEP_POINTS
from lab.core.settings import Settings
from lab.engine.imagegrid import ImageGeometry
from lab.experiments.sweep.estimate import batch_chunk
from lab.experiments.sweep.points import decided, rep_values
from lab.experiments.sweep.rates import rates_for, resolve_rates
from lab.measure.plan import (
    Plan,
    Rates,
    Where,
    fit_reps,
    parse_duration,
    plan,
    plan_line,
    rates_from_chunks,
)
from lab.measure.prediction import (
    DEFAULT_SPREADS,
    predicted_reps,
    processes_needed,
    reps_in_further_process,
    spread_of,
    took_range,
)


def grid_points(settings: Settings, geometry: ImageGeometry | None = None) -> list[tuple[int, int]]:
    """(L, only_new) of every point of the sweep's grid (an image point decodes its image's tokens too)."""
    from lab.experiments.sweep.grid import grid, only_new

    return [(p.L, only_new(p, geometry)) for p in grid(settings.sweep)]


def plans(
    settings: Settings,
    rates: Rates,
    where: Where,
    reps: int | None = None,
    previous: list[SweepPoint] | None = None,
    each: Mapping[str, int] | None = None,
) -> tuple[Plan, Plan]:
    """(per-rep prefill, cumulative) plans of the sweep's grid, at max_reps unless `reps`; with `previous` (the
    points of a sweep measured here before, maybe none), at the reps each point is predicted to need; with `each`,
    at that many reps a point in each place (what a run's first processes predict: reps_from_spread), split over
    processes as the spread of `previous` (the run's own points so far) says."""
    if where == "both":  # one driver's fill passes and the same processes serve both places
        server = plans(settings, rates, "server", reps, previous, each)
        inproc = plans(settings, rates, "inproc", reps, previous, each)
        return _both(server[0], inproc[0]), _both(server[1], inproc[1])
    sw = settings.sweep
    n = reps or sw.max_reps
    points = grid_points(settings)
    arms: list[str] = [*sw.arms]
    if each is not None:  # the reps given; `previous` (the run's points so far) splits them over processes
        counts = [each[where]] * len(points)
    else:
        counts = [n] * len(points) if previous is None else predicted_counts(settings, where, previous)
    # each of the first processes adds ceil(min_reps / processes) reps; a point still undecided after them takes
    # the rest in further processes, as many reps in each as narrow its interval most per second: the bound
    # assumes the fewest (processes differ more than reps within one), a prediction what its spread says
    share = math.ceil(sw.min_reps / sw.processes)
    per = [share] * len(points) if previous is None else per_extra_process(settings, rates, where, previous)
    used = max(processes_needed(c, share, sw.processes, k) for c, k in zip(counts, per, strict=True))
    kw: dict[str, Any] = {
        "fill_passes": min(sw.fill_passes, used),
        "baseline_reps": sw.baseline_reps,
        "bench_reps": sw.bench_reps,
        "bench_check": sw.bench_check,
        "n_out": sw.n_out if rates.decode_ms_per_token is not None else 0,
        "processes": used,
        "batch_chunk": batch_chunk(settings) or 0,
    }
    old_arms = ["baseline", "fake", "genuine", "estimate"] if where == "server" else ["baseline", "fake", "genuine"]
    return plan("per-rep prefill", where, points, n, old_arms, rates, **kw), plan(
        "cumulative", where, points, n, arms, rates, **kw, reps_each=counts
    )


def per_extra_process(settings: Settings, rates: Rates, where: Where, previous: list[SweepPoint]) -> list[int]:
    """The reps each grid point is predicted to take in each process past its first ones: the ledger's
    split (lab.measure.plan.reps_in_further_process) from fake/genuine's spread over the grid in `previous`
    (else the default), a process start at rates.process_start_s and a rep at its timed arms' chunks."""
    from lab.experiments.sweep.grid import grid

    sw = settings.sweep
    share = math.ceil(sw.min_reps / sw.processes)
    timed = sum(a in sw.arms for a in ("fake", "genuine", "estimate", "plain")) or 1
    spread = pooled_spread(previous, where, "fake/genuine") or DEFAULT_SPREADS[where]
    out = []
    for gp in grid(sw):
        rep_s = timed * rates.chunk(gp.L, gp.new) / 1e3
        out.append(reps_in_further_process(spread, rates.process_start_s or 1.0, rep_s, share, sw.min_reps))
    return out


RATIOS = (("fake/genuine", "fake_vs_genuine_ci"), ("fake/estimate", "fake_vs_estimate_ci"))


def pooled_spread(previous: list[SweepPoint], where: Where, name: str) -> Components | None:
    """A ratio's spread in one place over the grid: the medians of its points' spreads between processes and
    within one (a point's own, from its few processes, is off by half either way; the grid's points share a
    host). A point without components (one rep per process) gives the spread its interval implies."""
    attr = dict(RATIOS)[name]
    found = []
    for p in previous:
        iv = getattr(p, attr)
        if p.where == where and iv is not None and (c := p.components.get(name) or spread_of(iv)) is not None:
            found.append(c)
    if not found:
        return None
    return Components(
        between=statistics.median(c.between for c in found),
        within=statistics.median(c.within for c in found),
        processes=max(c.processes for c in found),
        reps=max(c.reps for c in found),
    )


def predicted_counts(settings: Settings, where: Where, previous: list[SweepPoint]) -> list[int]:
    """The reps each grid point is predicted to need in this place: what it took in `previous` (the newest sweep
    measured here) where it stopped decided, else from the spread its ratios had over that grid and how far the
    point's own sat from 1; a point not measured here before, the lab's default spread in this place
    (lab.measure.prediction.DEFAULT_SPREADS).
    A point's own reps are the better guess: the spread's arithmetic assumes the interval narrows as
    1/sqrt(processes) from the first one, and on a 2-core VM the default sweep's points took 2 to 2.5x the reps
    their spread predicts (two runs, 2026-12-07: 273 and 292 reps against 112 and 88)."""
    from lab.experiments.sweep.grid import grid

    sw = settings.sweep
    bounds: dict[str, tuple[float, float]] = {}
    if "genuine" in sw.arms:
        bounds["fake/genuine"] = (sw.target, sw.tolerance)
    if "estimate" in sw.arms and where == "inproc":  # through the server it is measured, not decided
        bounds["fake/estimate"] = (math.inf, sw.tolerance)
    before: dict[tuple[str, str], SweepPoint] = {(p.where, p.point): p for p in previous}
    pooled = {name: pooled_spread(previous, where, name) for name, _ in RATIOS}
    out = []
    for gp in grid(sw):
        p = before.get((where, gp.id))
        if p is not None and p.reps and bounds and decided(p, sw):  # it stopped, decided: what it took here
            out.append(min(sw.max_reps, max(sw.min_reps, p.reps)))
            continue
        spreads: dict[str, tuple[Components, float]] = {}
        for name, attr in RATIOS if p is not None else ():
            iv, spread = getattr(p, attr), pooled[name]
            if iv is not None and spread is not None:  # the grid's spread, the point's own distance from 1
                spreads[name] = (spread, abs(iv.value - 1))
        out.append(predicted_reps(spreads, bounds, sw.min_reps, sw.max_reps, sw.processes, DEFAULT_SPREADS[where]))
    return out


@dataclass(frozen=True)
class Before:
    """What the sweeps of this model measured here before say of a new one's plan: the newest one's points that
    measured every place it measures (their spread and reps), where that spread comes from, and what each of the
    newest runs with a plan took against it (actual / predicted, newest first)."""

    points: list[SweepPoint] = field(default_factory=list)
    source: str = ""
    took: list[float] = field(default_factory=list)


def predicted_plan(settings: Settings, rates: Rates, where: Where, before: Before) -> Plan:
    """The plan at the reps each point is predicted to need, said as a range (what runs here took against their
    plans), with its bound (every point at max_reps) beside it. Said only where a sweep of this model measured here
    before: from the lab's default spread alone, runs on a 2-core VM took 0.33 to 3.3x it, so the run says its
    bound and predicts after its first processes (plan_after)."""
    bound = plans(settings, rates, where)[1]
    new = plans(settings, rates, where, previous=before.points)[1]
    took, took_source = took_range(before.took)
    update = {"bound_s": bound.total_s, "spread_source": before.source, "took": took, "took_source": took_source}
    return new.model_copy(update=update | {"said": bool(before.points)})


def took_against_plan(d: object) -> float | None:
    """What a run took against the first prediction it said (results.plan): its plan as it started, else the
    one after its first processes; None when it said none."""
    if not isinstance(d, dict):
        return None
    actual, predicted = d.get("actual_s"), d.get("predicted_s") if d.get("said", True) else d.get("after_s")
    if isinstance(actual, float) and isinstance(predicted, float) and predicted > 0:
        return actual / predicted
    return None


def measured_before(runs_dir: Path, model_sha256: str, host: str, where: Where) -> Before:
    """The newest complete sweep of this model on this host, whatever its engine (the host's noise is the host's),
    that measured every place of `where` (else the lab's default spread), and what the newest runs that made a plan
    took against it."""
    places = {"server", "inproc"} if where == "both" else {where}
    points: list[SweepPoint] = []
    source = "the lab's default spread in each place (docs/repetition.md)"
    took: list[float] = []
    for found in newest_runs(runs_dir, "sweep", model_sha256, host, None):
        try:
            run = RunFolder.open(found)
            if (ratio := took_against_plan(run.manifest().results.get("plan"))) is not None:
                took.append(ratio)
            if points:
                continue
            rows = run.read(SWEEP_POINTS)
        except RunError as e:  # a damaged run is the catalog's to report: the plan takes the one before
            warn(f"{e}; skipped")
            continue
        # a run of one rep per process kept no components: its intervals over processes still say the spread
        mine = [p for p in rows if p.where in places and (p.components or p.fake_vs_genuine_ci)]
        if places <= {p.where for p in mine}:
            points, source = mine, f"the spread of {found.name}"
    return Before(points, source, took)


def _both(server: Plan, inproc: Plan) -> Plan:
    arms = [a.model_copy(update={"arm": f"{a.arm} (server)"}) for a in server.arms]
    shared = {a.arm for a in server.arms} & {"fill passes", "process starts"}
    arms += [a.model_copy(update={"arm": f"{a.arm} (in-process)"}) for a in inproc.arms if a.arm not in shared]
    return server.model_copy(update={"where": "both", "arms": arms})


def budget_reps(settings: Settings, rates: Rates, where: Where, budget_s: float) -> Settings:
    """The settings with max_reps (and min_reps if above it) set to the most reps the budget affords."""
    reps = fit_reps(budget_s, lambda n: plans(settings, rates, where, n)[1])
    sw = settings.sweep.model_copy(
        update={"max_reps": reps, "min_reps": min(settings.sweep.min_reps, reps), "reps": None}
    )
    return settings.model_copy(update={"sweep": sw})


@dataclass(frozen=True)
class PlanDraft:
    """`lab sweep --plan` / `--budget` before a run: the settings (with the reps a budget affords), the rates they
    are planned at, and the grid's plans for the per-rep prefill design (`old`) and the lab's (`new`)."""

    settings: Settings
    rates: Rates
    where: Where
    old: Plan
    new: Plan


def plan_draft(settings: Settings, where: Where, budget: str | None) -> PlanDraft:
    """The plan of a sweep not run yet: at sweep.rates or a short calibration here (rates_for), with `budget` (a
    duration) at the reps it affords, both designs' plans."""
    rates = rates_for(settings)
    if budget is not None:
        settings = budget_reps(settings, rates, where, parse_duration(budget))
    old, new = plans(settings, rates, where)
    return PlanDraft(settings, rates, where, old, new)


def predicted_draft(draft: PlanDraft, sides: int = 1) -> Plan:
    """The draft's plan at the reps each point is predicted to need, from the spread of the newest sweep of its
    model on this host in the runs folder (the engine built, the model hashed); `sides`: 2 for an interleaved run
    of two configurations (`--vs`), each assumed to cost what the first does."""
    from lab.experiments.protocol import resolve_parts

    parts = resolve_parts(draft.settings, needs_engine=True)
    before = measured_before(draft.settings.runs_dir, parts.model_record["sha256"], parts.shell.name, draft.where)
    return predicted_plan(draft.settings, draft.rates, draft.where, before).times(sides)


def plan_of_run(
    settings: Settings,
    where: Where,
    fills: list[InprocFill],
    console: Console,
    start_s: float,
    before: Before,
) -> Plan | None:
    """The plan printed as a sweep starts measuring: from sweep.rates, else from its own fill passes' chunks;
    its processes at what starting the first one took (`start_s`); each point at the reps it is predicted to
    need from the spread `before` says (a sweep measured here before; else the lab's default), beside the bound."""
    chunks = [(f.L, f.new, f.ms) for f in fills if f.kind == "chunk" and f.new and f.ok]
    if settings.sweep.rates:
        rates = resolve_rates(settings)
    elif len({L for L, _, _ in chunks}) >= 2:
        rates = rates_from_chunks(chunks, "this run's fill passes")
    else:
        return None
    rates = rates.model_copy(update={"process_start_s": start_s})
    new = predicted_plan(settings, rates, where, before)
    counted = not settings.sweep.n_out or rates.decode_ms_per_token is not None
    uncounted = "" if counted else ", the decode of sweep.n_out not counted"
    console.print(f"plan: {plan_line(new)} ({rates.describe()}, from {rates.source}{uncounted})", highlight=False)
    return new


# the reps a point of the default grid took per unit of the paired spread its run's first processes showed
# (paired_spread): on a 2-core VM (2026-12-07, twenty default runs of `lab sweep` and `lab arms`, two sessions and a
# CPU hog; docs/repetition.md) through the server 372 to 759 (the median 500), in one process 529 to 1609 (990)
REPS_PER_SPREAD: dict[str, float] = {"server": 500.0, "inproc": 990.0}
# what runs took against that plan on the same VM (ten runs, two `make demo` and two fresh runs folders): the range
# it is said with (a point that keeps needing processes long after the others is what no first process shows)
AFTER_TOOK: dict[str, tuple[float, float]] = {"server": (0.85, 1.63), "inproc": (0.75, 2.37)}


def paired_spread(samples: list[SweepSample]) -> float | None:
    """How much fake / genuine, paired by rep (rep_values), varies from rep to rep in a run's first processes,
    pooled over the grid: the MAD-based SD of its log (robust to the long tail); None with fewer than 8 pairs."""
    by_point: dict[str, list[SweepSample]] = {}
    for s in samples:
        by_point.setdefault(s.point, []).append(s)
    ratios = [r for smps in by_point.values() for r in rep_values(smps)["fake/genuine"].values()]
    logs = [math.log(r) for r in ratios if r > 0]
    if len(logs) < 8:
        return None
    mid = statistics.median(logs)
    return 1.4826 * statistics.median(abs(x - mid) for x in logs)


def reps_from_spread(settings: Settings, spreads: Mapping[str, float]) -> dict[str, int]:
    """The reps a point is predicted to take in each place, from the paired spread its first processes showed."""
    sw = settings.sweep
    return {w: max(sw.min_reps, min(sw.max_reps, round(REPS_PER_SPREAD[w] * s))) for w, s in spreads.items()}


def plan_after(
    settings: Settings,
    first: Plan,
    samples: Mapping[str, list[SweepSample]],
    points: list[SweepPoint],
    console: Console,
) -> Plan | None:
    """The plan again once the run's first sweep.processes processes are in: every point at the reps the paired
    spread they showed predicts (REPS_PER_SPREAD), split over further processes as their spread between
    processes and within one says (the ledger's own rule, from the run's `points` so far), at the first plan's
    rates; None when a place has no pairs (a sweep without the genuine arm)."""
    spreads = {w: paired_spread(s) for w, s in samples.items() if s}
    known = {w: s for w, s in spreads.items() if s is not None}
    if not known or len(known) < len(spreads):
        return None
    each = reps_from_spread(settings, known)
    bound = plans(settings, first.rates, first.where)[1]
    new = plans(settings, first.rates, first.where, previous=points, each=each)[1]
    said = ", ".join(f"{'through the server' if w == 'server' else 'in one process'} {s:.1%}" for w, s in known.items())
    source = f"the paired spread of its first {settings.sweep.processes} processes: {said}"
    lo, hi = min(AFTER_TOOK[w][0] for w in known), max(AFTER_TOOK[w][1] for w in known)
    said_took = f"runs took {lo:.2f}-{hi:.2f}x this on a 2-core VM"
    after = new.model_copy(
        update={"bound_s": bound.total_s, "spread_source": source, "took": (lo, hi), "took_source": said_took}
    )
    console.print(f"plan after {settings.sweep.processes} processes: {plan_line(after)}", highlight=False)
    return after


def plan_results(new: Plan | None, actual_s: float, after: Plan | None = None) -> dict[str, Any]:
    if new is None:
        return {}
    return {
        "plan": {
            "predicted_s": new.total_s,
            "said": new.said,
            "after_s": after.total_s if after else None,
            "after_reps_each": after.reps_each if after else None,
            "after_source": after.spread_source if after else None,
            "bound_s": new.bound_s,
            "actual_s": actual_s,
            "reps": new.reps,
            "reps_each": new.reps_each,
            "spread_source": new.spread_source,
            "took": list(new.took) if new.took else None,
            "took_source": new.took_source,
            "rates": new.rates.model_dump(mode="json"),
            "arms": {a.arm: a.seconds for a in new.arms},
        }
    }
