"""How a metric's samples vary between a run's processes and within one (Kalibera and Jones' two levels), and the
split of reps over processes that narrows an interval most per second spent. The intervals themselves are
lab.core.stats'."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from lab.core.schemas import Components


def variance_components(xs: Sequence[float], procs: Sequence[int]) -> Components | None:
    """How a metric's samples vary between the run's processes and within one (Kalibera and Jones' two levels),
    as standard deviations of the log values (about a relative spread: 0.05 is 5%): within, pooled over the
    processes; between, the spread of the process means less what the within spread puts there (method of
    moments, 0 when negative). None with fewer than two processes or no process with two samples."""
    groups: dict[int, list[float]] = {}
    for x, p in zip(xs, procs, strict=True):
        if x is not None and math.isfinite(x) and x > 0:
            groups.setdefault(p, []).append(math.log(x))
    sizes = [len(g) for g in groups.values()]
    if len(groups) < 2 or max(sizes, default=0) < 2:
        return None
    means = [statistics.fmean(g) for g in groups.values()]
    within_ss = sum((x - m) ** 2 for g, m in zip(groups.values(), means, strict=True) for x in g)
    within = within_ss / (sum(sizes) - len(groups))
    per_process = statistics.fmean(sizes)
    between = max(0.0, statistics.variance(means) - within / per_process)
    return Components(between=math.sqrt(between), within=math.sqrt(within), processes=len(groups), reps=sum(sizes))


def reps_per_process(c: Components, process_s: float, rep_s: float) -> int:
    """The reps per process that narrow the interval most per second spent (Kalibera and Jones): more reps in a
    process when its start is dear and the within spread dominates, more processes when they differ."""
    if c.between <= 0:
        return 1_000_000 if process_s > 0 else 1  # processes do not differ: one process, as many reps as wanted
    return max(1, round(math.sqrt(process_s / max(rep_s, 1e-9) * (c.within / c.between) ** 2)))
