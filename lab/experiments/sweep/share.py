"""The server's per-request share over the grid, a measurement (lab.core.schemas.ServerShare): through llama-server
a step with the cache costs the engine's own time for its new tokens (the estimate, timed in one process beside
every rep) plus what the server does with the request. Per rep that is genuine - estimate, paired by rep; each
process that measured the whole text grid (the first round's) fits fixed + per_new x new + per_1k x L / 1000
over its per-point medians, and each coefficient's interval resamples those processes, the unit
(lab.core.stats.median_interval)."""

from __future__ import annotations

import statistics
from collections import defaultdict

import numpy as np

from lab.core.schemas import PrefillTps, ServerShare, SweepPoint, SweepSample
from lab.core.stats import median_interval

Shares = dict[int, dict[tuple[int, int], list[tuple[float, float]]]]  # process -> (L, new) -> (genuine, estimate)


def server_shares(points: list[SweepPoint], samples: list[SweepSample], tps: list[PrefillTps]) -> Shares:
    """Each rep's genuine and estimate ms, paired by rep, of every text point through the server, by process and
    point."""
    text = {p.point: (p.L, p.new) for p in points if p.where == "server" and p.image is None}
    est = {(t.point, t.rep): t.avg_ms for t in tps if t.where == "server" and t.rep is not None and t.avg_ms > 0}
    out: Shares = defaultdict(lambda: defaultdict(list))
    for s in samples:
        e = est.get((s.point, s.rep))
        if s.where == "server" and s.arm == "genuine" and s.ok and s.prompt_ms and s.point in text and e:
            out[s.process][text[s.point]].append((s.prompt_ms, e))
    return out


def share_fit(points: list[SweepPoint], samples: list[SweepSample], tps: list[PrefillTps]) -> ServerShare | None:
    """The share's plane per process, its coefficients' intervals over processes, and the share in % (each
    process's median genuine / estimate over its text reps), None without two processes that each measured two
    news or two Ls."""
    shares = server_shares(points, samples, tps)
    grid = {key for by_point in shares.values() for key in by_point}
    # the processes that measured the whole text grid (a later one measures only the points still open)
    whole = [by_point for by_point in shares.values() if set(by_point) == grid]
    fitted = [(c, by_point) for by_point in whole if (c := _fit(by_point)) is not None]
    if len(fitted) < 2:
        return None
    procs = list(range(len(fitted)))
    varied = {"fixed": True, "per_new": len({n for _, n in grid}) > 1, "per_1k": len({L for L, _ in grid}) > 1}
    coef = {
        n: median_interval([c[i] for c, _ in fitted], f"server-share/{n}", procs) if varied[n] else None
        for i, n in enumerate(NAMES)
    }
    pct = [statistics.median(g / e for reps in by_point.values() for g, e in reps) for _, by_point in fitted]
    return ServerShare(
        fixed_ms_ci=coef["fixed"],
        per_new_ms_ci=coef["per_new"],
        per_1k_cached_ms_ci=coef["per_1k"],
        share_ci=median_interval(pct, "server-share/pct", procs),
        points=len({key for _, by_point in fitted for key in by_point}),
        processes=len(fitted),
    )


NAMES = ("fixed", "per_new", "per_1k")


def _fit(by_point: dict[tuple[int, int], list[tuple[float, float]]]) -> tuple[float, float, float] | None:
    """Least squares over one process's per-point median genuine - estimate: a term only where the grid varies
    it (one new: no per-token slope)."""
    rows = [(L, new, statistics.median(g - e for g, e in v)) for (L, new), v in by_point.items() if v]
    news, Ls = {new for _, new, _ in rows}, {L for L, _, _ in rows}
    if len(news) < 2 and len(Ls) < 2:
        return None
    cols = [np.ones(len(rows))]
    cols += [np.array([new for _, new, _ in rows], float)] if len(news) > 1 else []
    cols += [np.array([L / 1000 for L, _, _ in rows], float)] if len(Ls) > 1 else []
    coef, *_ = np.linalg.lstsq(np.stack(cols, axis=1), np.array([y for *_, y in rows]), rcond=None)
    it = iter(coef.tolist())
    fixed = next(it)
    per_new = next(it) if len(news) > 1 else 0.0
    per_1k = next(it) if len(Ls) > 1 else 0.0
    return fixed, per_new, per_1k
