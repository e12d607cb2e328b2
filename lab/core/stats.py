"""Uncertainty for every number the lab reports: seeded, deterministic percentile-bootstrap 95% intervals.

- `median_interval(xs)`: the median of samples and its interval;
- `step_median_share(x, den)`: a conversation's sum over steps of each step's median over reps, as a share of
  another such sum (a cache setting's saving);
- `paired_ratio(a, b)`: samples of two arms paired by rep (a rep's arms run back to back, so drift on a shared
  machine, which moves whole reps, cancels in each ratio): the median of the per-rep ratios a/b, bootstrapping
  the reps;
- `unpaired_ratio(a, b)`: two independent sample sets (two runs): median(a) / median(b), each side resampled
  on its own;
- `paired_processes(a, b)`: two configurations measured in process pairs (one run, a process of each next in
  time): median(a) / median(b) over the (pair, rep) both have, resampling pairs, then reps within a pair, the
  same draws on both sides, so a pair's host level moves both;
- `proportion_interval(k, n)`: a share of events (an A/A test's false alarms) with its Wilson interval;
- `verdict(interval, tol)`: `agree` (inside 1 +- tol), `disagree` (wholly outside), `undecided` (straddles a
  bound); `reps_to_decide` estimates how many reps would likely decide it (the width shrinks as 1/sqrt(n)).

The bootstrap needs no normality assumption (per-sample noise here is lognormal with occasional 2x outliers).
Every interval that resamples units (processes, process pairs, a conversation's reps) is widened for few units by
one rule, `expansion`: a plain percentile bootstrap over 3 processes covers about 80-86%, not 95%.
tests/test_stats.py checks that the intervals cover a known value at least 93% of the time at 3, 5, 10 and 20
processes, 93-97% over reps in one process, and narrow with reps.
Every interval is seeded from a key and the sample values, so the same samples always give the same bytes.
The resamples are drawn a block at a time (lab.core.bootstrap): an interval's memory is bounded whatever n.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from lab.core.bootstrap import index_blocks, one_stage_medians, two_stage_medians
from lab.core.schemas import ArmStats, Interval, Verdict

T = TypeVar("T")

LEVEL = 0.95
N_BOOT = 4000
Z975 = 1.959964  # the normal's 97.5% point, and Student's t's for 1..30 degrees of freedom (95% two-sided)
T975: tuple[float, ...] = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179)
T975 += (2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052)
T975 += (2.048, 2.045, 2.042)


def _rng(key: str, values: npt.NDArray[np.float64]) -> np.random.Generator:
    digest = hashlib.sha256(key.encode() + b"\0" + np.ascontiguousarray(values).tobytes()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _bounds(draws: npt.NDArray[np.float64]) -> tuple[float, float]:
    # outward-rounded quantiles: bootstrap medians of a few reps take few distinct values, and interpolating
    # between them would undercover
    lo = np.quantile(draws, (1 - LEVEL) / 2, method="lower")
    hi = np.quantile(draws, (1 + LEVEL) / 2, method="higher")
    return float(lo), float(hi)


def _clean(xs: Sequence[float | None]) -> npt.NDArray[np.float64]:
    return np.array([x for x in xs if x is not None and math.isfinite(x)], dtype=np.float64)


def median_draws(
    xs: npt.NDArray[np.float64], rng: np.random.Generator, procs: npt.NDArray[np.int64] | None = None
) -> npt.NDArray[np.float64]:
    """N_BOOT bootstrap medians of xs. With `procs` (the process each sample came from) and two or more of them,
    a two-stage bootstrap: draw the processes with replacement, then each drawn process's samples with
    replacement, so the interval carries the variance between processes as well as within one."""
    if procs is None or len(np.unique(procs)) < 2:
        return one_stage_medians(xs, rng, N_BOOT)
    _, sizes = np.unique(procs, return_counts=True)
    return two_stage_medians([xs[np.argsort(procs, kind="stable")]], sizes, rng, N_BOOT)[0]


def _procs(procs: Sequence[int] | None, xs: Sequence[float | None]) -> npt.NDArray[np.int64] | None:
    """The process of each clean sample (dropping those _clean drops), or None."""
    if procs is None:
        return None
    keep = [p for p, x in zip(procs, xs, strict=True) if x is not None and math.isfinite(x)]
    return np.array(keep, dtype=np.int64)


def median_interval(xs: Sequence[float | None], key: str = "", procs: Sequence[int] | None = None) -> Interval | None:
    """The median of xs and its interval (None without samples). `procs`: the process of each sample; from two
    processes on the interval resamples processes, then samples within them, widened for few processes
    (`expansion`) (`Interval.processes`)."""
    x, p = _clean(xs), _procs(procs, xs)
    if len(x) == 0:
        return None
    value = float(np.median(x))
    if len(x) == 1:
        return Interval(value=value, lo=value, hi=value, n=1, processes=_n_procs(procs, xs))
    draws = median_draws(x, _rng(key, x), p)
    n_procs = _n_procs(procs, xs)
    if n_procs > 1:
        draws = widened(value, draws, n_procs)
    lo, hi = _bounds(draws)
    return Interval(value=value, lo=lo, hi=hi, n=len(x), processes=n_procs)


def arm_stats(ms: Sequence[float], n_failed: int = 0, key: str = "", procs: Sequence[int] | None = None) -> ArmStats:
    """An arm's timed samples summarized: the median and its interval (over processes when `procs` names two or
    more), the range, ok and failed counts."""
    iv = median_interval(ms, key, procs)
    if iv is None:
        return ArmStats(n_failed=n_failed)
    return ArmStats(
        median_ms=iv.value,
        median_lo_ms=iv.lo,
        median_hi_ms=iv.hi,
        min_ms=min(ms),
        max_ms=max(ms),
        n_ok=len(ms),
        n_failed=n_failed,
        processes=iv.processes,
    )


def paired_reps(a: Mapping[int, float], b: Mapping[int, float]) -> list[int]:
    """The reps both have (b's value positive), in rep order."""
    return sorted(r for r in a.keys() & b.keys() if b[r] > 0 and a[r] is not None)


def paired_ratio(
    a: Mapping[int, float], b: Mapping[int, float], key: str = "", proc_of: Mapping[int, int] | None = None
) -> Interval | None:
    """Median over reps of a[rep] / b[rep], bootstrapping the reps both have (None when they share none);
    `proc_of`: each rep's process (the reps resampled within resampled processes)."""
    reps = paired_reps(a, b)
    procs = [proc_of.get(r, 0) for r in reps] if proc_of else None
    return median_interval([a[r] / b[r] for r in reps], key, procs)


def unpaired_ratio(
    a: Sequence[float],
    b: Sequence[float],
    key: str = "",
    procs_a: Sequence[int] | None = None,
    procs_b: Sequence[int] | None = None,
) -> Interval | None:
    """median(a) / median(b) of two independent sample sets (two runs), with its interval."""
    return unpaired(a, b, key, procs_a, procs_b)[0]


def unpaired(
    a: Sequence[float],
    b: Sequence[float],
    key: str = "",
    procs_a: Sequence[int] | None = None,
    procs_b: Sequence[int] | None = None,
    shift: npt.NDArray[np.float64] | None = None,
) -> tuple[Interval | None, npt.NDArray[np.float64] | None]:
    """unpaired_ratio and the bootstrap draws of median(a) / median(b) its interval comes from (one bootstrap
    for both; each side resampled on its own, processes first when a side has them); `shift`: a factor per
    draw put on the ratio (lab.catalog.compare's run drift). (None, None) when a side is empty or b's median can
    be 0."""
    xa, xb = _clean(a), _clean(b)
    if len(xa) == 0 or len(xb) == 0:
        return None, None
    den = median_draws(xb, _rng(key + "/b", xb), _procs(procs_b, b))
    if np.median(xb) == 0 or not np.all(den):  # B holds no time (a band a model does not have): no ratio
        return None, None
    draws = median_draws(xa, _rng(key + "/a", xa), _procs(procs_a, a)) / den
    value = float(np.median(xa) / np.median(xb))
    na, nb = _n_procs(procs_a, a), _n_procs(procs_b, b)
    n_procs = min(na, nb)
    if n_procs > 1:
        draws = widened(value, draws, n_procs, na + nb - 2)
    if shift is not None:
        draws = draws * shift
    lo, hi = _bounds(draws)
    iv = Interval(value=value, lo=lo, hi=hi, n=min(len(xa), len(xb)), processes=n_procs)
    return iv, draws


PairRep = tuple[int, int]  # (process pair, rep within it): what pairs two configurations' samples


def paired_processes(
    a: Mapping[PairRep, float], b: Mapping[PairRep, float], key: str = ""
) -> tuple[Interval | None, npt.NDArray[np.float64] | None]:
    """B/A of two configurations measured in process pairs: median(a) / median(b) over the (pair, rep) keys both
    have, with its interval and its bootstrap draws: pairs drawn with replacement, then each drawn pair's reps with
    replacement, the same indices for both sides. (None, None) without a common key or when b's median can be 0."""
    keys = sorted(k for k in a.keys() & b.keys() if _finite(a[k]) and _finite(b[k]))
    if not keys:
        return None, None
    _, sizes = np.unique([s for s, _ in keys], return_counts=True)  # keys in pair order, reps within a pair
    va, vb = np.array([a[k] for k in keys]), np.array([b[k] for k in keys])
    if np.median(vb) <= 0:
        return None, None
    value = float(np.median(va) / np.median(vb))
    if len(keys) == 1:
        return Interval(value=value, lo=value, hi=value, n=1, processes=1), np.full(N_BOOT, value)
    num, den = two_stage_medians([va, vb], sizes, _rng(key, np.concatenate([va, vb])), N_BOOT)
    if not np.all(den > 0):
        return None, None
    draws: npt.NDArray[np.float64] = num / den
    if len(sizes) > 1:
        draws = widened(value, draws, len(sizes))
    lo, hi = _bounds(draws)
    return Interval(value=value, lo=lo, hi=hi, n=len(keys), processes=len(sizes)), draws


def widened(value: float, draws: npt.NDArray[np.float64], n: int, df: int | None = None) -> npt.NDArray[np.float64]:
    """Bootstrap replicates over n units spread around the estimate by `expansion(n, df)`: as ratios (on the log
    scale) where the estimate and every replicate are positive, else as differences."""
    e = expansion(n, df)
    if value > 0 and np.all(draws > 0):
        return value * (draws / value) ** e
    return value + (draws - value) * e


def expansion(n: int, df: int | None = None) -> float:
    """Hesterberg's expanded percentile interval: a bootstrap over n units spreads by sqrt((n - 1) / n) too little
    and a percentile interval of few units has a normal's tails where a t's belong, so its draws are spread by
    sqrt(n / (n - 1)) x t(df) / z around the estimate, df = n - 1 for one sample of units (5 process pairs:
    1.58x; 20: 1.10x), n_a + n_b - 2 for two independent ones (5 and 5 processes: 1.31x)."""
    df = n - 1 if df is None else df
    t = T975[df - 1] if df <= len(T975) else Z975 + (Z975**3 + Z975) / (4 * df)
    return math.sqrt(n / (n - 1)) * t / Z975


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def step_median_share(
    x: Mapping[int, Sequence[float]], den: Mapping[int, Sequence[float]], key: str = ""
) -> Interval | None:
    """The sum over steps of each step's median over reps of x, as a share of the same sum of den; rows by rep,
    one value per step. The reps are resampled, each with its steps and both its rows (a rep's x and den ran
    side by side: drift that moves a whole rep cancels). A step's median shrugs off the rep an outlier hit,
    where a sum over each rep's steps would carry it whole. A rep missing a step is left out of that side.
    None without a complete rep on both sides, or when den's sum is not positive."""

    def complete(rows: Mapping[int, Sequence[float]]) -> dict[int, Sequence[float]]:
        return {r: v for r, v in rows.items() if all(math.isfinite(y) for y in v)}

    xs, ds = complete(x), complete(den)
    if not xs or not ds:
        return None
    reps = sorted(xs.keys() | ds.keys())

    def table(rows: dict[int, Sequence[float]]) -> npt.NDArray[np.float64]:
        width = len(next(iter(rows.values())))
        return np.array([rows.get(r, [math.nan] * width) for r in reps], dtype=np.float64).reshape(len(reps), width)

    tx, td = table(xs), table(ds)

    def shares(idx: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:  # (draws, reps) -> a share per draw
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a draw without one side's reps: NaN, dropped
            top = np.nanmedian(tx[idx], axis=1).sum(axis=1)
            bottom = np.nanmedian(td[idx], axis=1).sum(axis=1)
            out: npt.NDArray[np.float64] = np.where(bottom > 0, top / bottom, math.nan)
        return out

    value = float(shares(np.arange(len(reps))[None, :])[0])
    if not math.isfinite(value):
        return None
    draws = [shares(idx) for idx in index_blocks(len(reps), _resample_rng(len(reps), key), 1000, tx.shape[1])]
    return from_draws(value, list(np.concatenate(draws)), len(xs), processes=len(xs))


def _n_procs(procs: Sequence[int] | None, xs: Sequence[float | None]) -> int:
    p = _procs(procs, xs)
    return max(1, len(np.unique(p))) if p is not None and len(p) else 1


def geomean_ratio(
    draws: Sequence[npt.NDArray[np.float64]], values: Sequence[float], processes: int = 1
) -> Interval | None:
    """The geometric mean over points of their ratios, its interval from the points' bootstrap draws."""
    if not draws:
        return None
    logs = np.log(np.vstack(draws))  # (points, N_BOOT)
    lo, hi = _bounds(np.exp(logs.mean(axis=0)))
    value = float(np.exp(np.mean(np.log(np.asarray(values, dtype=np.float64)))))
    return Interval(value=value, lo=lo, hi=hi, n=len(values), processes=max(1, processes))


def run_drift_factors(sigma: float, key: str) -> npt.NDArray[np.float64]:
    """N_BOOT draws of what two runs' drift puts on their ratio B/A: each run sits off the host's long-run level
    by a lognormal factor of spread `sigma` (the run level, below processes and reps), so B/A by one of spread
    sigma x sqrt(2). One set per comparison: a run's drift moves all of its points alike."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(f"drift|{key}|{sigma}".encode()).digest()[:8], "little"))
    out: npt.NDArray[np.float64] = np.exp(rng.normal(0.0, sigma * math.sqrt(2), N_BOOT))
    return out


def drift_of_shifts(shifts: Sequence[float]) -> float:
    """The run level's spread (log SD) from the whole-run shifts B/A of A/A pairs (same build, same settings):
    each shift's log has variance 2 sigma^2. 0 without any."""
    logs = [math.log(x) for x in shifts if x > 0 and math.isfinite(x)]
    return math.sqrt(statistics.fmean(v * v for v in logs) / 2) if logs else 0.0


def from_draws(value: float, draws: Sequence[float], n: int, processes: int = 1) -> Interval | None:
    """An estimate with the interval of its bootstrap replicates (None without any); `processes`: how many units
    (processes, or a conversation's reps) the replicates resampled: from two on, their spread around the estimate
    is widened for few units (`expansion`), as ratios when all are positive."""
    x = _clean(list(draws))
    if len(x) == 0:
        return None
    if processes > 1:
        x = widened(value, x, processes)
    lo, hi = _bounds(x)
    return Interval(value=value, lo=min(lo, value), hi=max(hi, value), n=n, processes=max(1, processes))


def resamples(n: int, key: str, count: int = 1000) -> Iterator[npt.NDArray[np.int64]]:
    """`count` seeded bootstrap resamples of the indices 0..n-1, a row of n indices at a time."""
    for block in index_blocks(n, _resample_rng(n, key), count):
        yield from block


def _resample_rng(n: int, key: str) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(hashlib.sha256(f"{key}|{n}".encode()).digest()[:8], "little"))


def proportion_interval(k: int, n: int) -> Interval | None:
    """k of n as a share with its Wilson score interval (a count of events, not samples to bootstrap: an A/A
    test's comparisons called significant). None when n is 0."""
    if n <= 0:
        return None
    z, p = Z975, k / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return Interval(value=p, lo=max(0.0, center - half), hi=min(1.0, center + half), n=n)


def verdict(iv: Interval | None, tol: float, center: float = 1.0) -> Verdict:
    """`agree` when the interval lies inside center +- tol, `disagree` when wholly outside, else `undecided`."""
    if iv is None or iv.n < 2:
        return "undecided"
    if center - tol <= iv.lo and iv.hi <= center + tol:
        return "agree"
    if iv.hi < center - tol or iv.lo > center + tol:
        return "disagree"
    return "undecided"


def called(v: Verdict | str | None, gain: float | None) -> str:
    """A difference from a reference (a verdict centered on 0), in words: within the tolerance (`same`), decided
    `better` or `worse`, or `undecided`; "-" without one."""
    if v is None or gain is None:
        return "-"
    if v == "disagree":
        return "better" if gain > 0 else "worse"
    return "same" if v == "agree" else "undecided"


def reps_to_decide(iv: Interval | None, tol: float, center: float = 1.0) -> int | None:
    """About how many reps would decide an undecided interval (its width shrinks as 1/sqrt(n)); None if the
    estimate sits on a bound (no number of reps decides it) or there is no interval yet."""
    if iv is None or iv.n < 2:
        return None
    half = (iv.hi - iv.lo) / 2
    gap = min(abs(iv.value - (center - tol)), abs(iv.value - (center + tol)))
    if gap <= 0 or half <= 0:
        return None
    return max(iv.n + 1, math.ceil(iv.n * (half / gap) ** 2))


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a x + b; returns (a, b, R^2)."""
    n = len(xs)
    if n < 2:
        return 0.0, ys[0] if ys else 0.0, 1.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    a = sxy / sxx if sxx else 0.0
    b = my - a * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (a * x + b)) ** 2 for x, y in zip(xs, ys, strict=True))
    return a, b, 1 - ss_res / ss_tot if ss_tot else 1.0


def rotated(items: Sequence[T], k: int) -> list[T]:
    """`items` from the k-th on, wrapping round: interleaved measurements (arms, points, depths) in an order that
    rotates with the rep or process, so none always goes first and a drift on a shared machine hits each alike."""
    if not items:
        return []
    k %= len(items)
    return [*items[k:], *items[:k]]


def mean_interval(mean: float, stddev: float, n: int) -> Interval:
    """A mean with its 95% interval from a tool's own summary (normal approximation), for a tool such as
    llama-bench that keeps no samples to bootstrap."""
    half = 1.96 * stddev / max(1, n) ** 0.5
    return Interval(value=mean, lo=mean - half, hi=mean + half, n=max(1, n))
