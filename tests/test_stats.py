"""The statistics module: intervals that cover a known ratio as often as they claim, narrow as reps grow, and
are deterministic; verdicts that can say undecided."""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pytest
from pydantic import BaseModel

from lab.catalog.tables import columns, flatten
from lab.core import stats
from lab.core.components import reps_per_process, variance_components
from lab.core.schemas import ArmStats, cell
from lab.core.stats import (
    Interval,
    geomean_ratio,
    median_interval,
    paired_ratio,
    proportion_interval,
    reps_to_decide,
    step_median_share,
    unpaired,
    unpaired_ratio,
    verdict,
)

pytestmark = pytest.mark.fast

T = TypeVar("T")

TRUE = 1.05


def arms(rng: np.random.Generator, n: int) -> tuple[dict[int, float], dict[int, float]]:
    """Two arms of n reps on a noisy shared machine: per-rep drift (both arms), lognormal per-sample noise,
    occasional 2x outliers in either arm; the true ratio is TRUE."""
    drift = rng.lognormal(0, 0.2, n)
    a = TRUE * drift * rng.lognormal(0, 0.08, n) * np.where(rng.random(n) < 0.05, 2.0, 1.0)
    b = drift * rng.lognormal(0, 0.08, n) * np.where(rng.random(n) < 0.05, 2.0, 1.0)
    return dict(enumerate(a.tolist())), dict(enumerate(b.tolist()))


@pytest.mark.parametrize("n", [5, 10, 30])
def test_paired_interval_covers_the_true_ratio(n: int) -> None:
    trials, covered = 2000, 0  # the coverage estimate's own standard error: about 0.5%
    for t in range(trials):
        a, b = arms(np.random.default_rng(t), n)
        iv = paired_ratio(a, b, key=f"trial{t}")
        assert iv is not None and iv.n == n and iv.lo <= iv.value <= iv.hi
        covered += iv.lo <= TRUE <= iv.hi
    assert 0.93 <= covered / trials <= 0.97, covered / trials


def processes_of(rng: np.random.Generator, n: int, reps: int) -> tuple[list[float], list[int]]:
    """n processes of `reps` samples: each process sits off the true median 1.0 by a lognormal level (3%), each
    sample off its process by lognormal noise (3%) with occasional 1.5x outliers."""
    level = rng.lognormal(0, 0.03, n)
    xs = [
        float(level[p] * rng.lognormal(0, 0.03) * (1.5 if rng.random() < 0.03 else 1.0))
        for p in range(n)
        for _ in range(reps)
    ]
    return xs, [p for p in range(n) for _ in range(reps)]


@pytest.mark.parametrize("n", [3, 5, 10, 20])
def test_an_interval_over_few_processes_covers_as_it_claims(n: int) -> None:
    # the units are the processes: a plain percentile bootstrap over 3 of them covers about 85%; widened for few
    # units (stats.expansion) every count covers at least 93% (conservative where the spread within a process
    # dominates: the two-stage bootstrap counts it twice)
    trials, covered, plain = 400, 0, 0  # the coverage estimate's own standard error: about 1.1%
    for t in range(trials):
        xs, procs = processes_of(np.random.default_rng(1000 * n + t), n, 4)
        iv = median_interval(xs, f"trial{t}", procs)
        assert iv is not None and iv.processes == n and iv.lo <= iv.value <= iv.hi
        covered += iv.lo <= 1.0 <= iv.hi
        if n == 3:
            draws = stats.median_draws(np.array(xs), np.random.default_rng(t), np.array(procs))
            lo, hi = stats._bounds(draws)
            plain += lo <= 1.0 <= hi
    assert covered / trials >= 0.93, covered / trials
    if n == 3:
        assert plain / trials < 0.92, plain / trials  # why the widening is there


def test_intervals_narrow_as_reps_grow() -> None:
    widths = []
    for n in (5, 10, 30):
        w = [paired_ratio(*arms(np.random.default_rng(t), n), key=str(t)) for t in range(200)]
        widths.append(float(np.median([iv.hi - iv.lo for iv in w if iv])))
    assert widths[0] > widths[1] > widths[2], widths
    assert widths[2] < 0.6 * widths[0], widths


def test_same_samples_same_interval_and_pairing_matters() -> None:
    a, b = arms(np.random.default_rng(7), 10)
    assert paired_ratio(a, b, "k") == paired_ratio(dict(a), dict(b), "k")  # deterministic
    # pairing by rep cancels the shared drift: paired intervals are far narrower than unpaired ones
    paired, unpaired = [], []
    for t in range(100):
        a, b = arms(np.random.default_rng(t), 20)
        p, u = paired_ratio(a, b, str(t)), unpaired_ratio(list(a.values()), list(b.values()), str(t))
        assert p is not None and u is not None
        paired.append(p.hi - p.lo)
        unpaired.append(u.hi - u.lo)
    assert np.median(paired) < 0.6 * np.median(unpaired), (np.median(paired), np.median(unpaired))


def test_unpaired_ratio_and_geomean() -> None:
    rng = np.random.default_rng(3)
    a = (2.0 * rng.lognormal(0, 0.05, 20)).tolist()
    b = rng.lognormal(0, 0.05, 20).tolist()
    iv = unpaired_ratio(a, b, "x")
    assert iv is not None and iv.lo < 2.0 < iv.hi and iv.n == 20
    d1, d2 = unpaired(a, b, "p1")[1], unpaired(b, b, "p2")[1]
    assert d1 is not None and d2 is not None
    g = geomean_ratio([d1, d2], [iv.value, 1.0])
    assert g is not None and g.lo < 2**0.5 < g.hi
    assert unpaired_ratio([], b) is None and paired_ratio({}, {1: 1.0}) is None


def test_verdicts() -> None:
    def iv(lo: float, hi: float, n: int = 10) -> Interval:
        return Interval(value=(lo + hi) / 2, lo=lo, hi=hi, n=n)

    assert verdict(iv(0.99, 1.02), 0.03) == "agree"
    assert verdict(iv(1.05, 1.10), 0.03) == "disagree"
    assert verdict(iv(0.90, 0.95), 0.03) == "disagree"
    assert verdict(iv(1.01, 1.06), 0.03) == "undecided"
    assert verdict(None, 0.03) == "undecided" and verdict(iv(1.0, 1.0, n=1), 0.03) == "undecided"
    more = reps_to_decide(iv(0.99, 1.05), 0.05)  # estimate 1.02, half width 0.03, 0.03 from the bound
    assert more is not None and more >= 11
    assert reps_to_decide(iv(0.99, 1.03), 0.05) == 11  # already decided: one more rep at least
    assert median_interval([3.0]) == Interval(value=3.0, lo=3.0, hi=3.0, n=1)
    assert median_interval([None, float("nan")]) is None


def runs_of(rng: np.random.Generator, procs: int, reps: int, between: float) -> tuple[list[float], list[int]]:
    """One run's samples: `procs` processes of `reps` reps, each process slower or faster than the next by a
    lognormal factor (memory layout, thread placement: a level of variance of its own), each rep noisy."""
    values, of = [], []
    for p in range(procs):
        level = rng.lognormal(0, between)
        values += (100 * level * rng.lognormal(0, 0.08, reps)).tolist()
        of += [p] * reps
    return values, of


def test_an_a_a_pair_is_called_different_only_by_chance_when_intervals_resample_processes() -> None:
    # two runs of the same thing: one process per run is a level of variance the within-run interval misses
    # (far more than 1 in 20 A/A pairs called different); spread over processes and resampled by process, the
    # interval holds on the next run
    trials, one_process, within, by_process = 300, 0, 0, 0
    for t in range(trials):
        rng = np.random.default_rng(t)
        a, _ = runs_of(rng, 1, 10, 0.05)
        b, _ = runs_of(rng, 1, 10, 0.05)
        one_process += not _covers_one(unpaired_ratio(b, a, str(t)))
        a, pa = runs_of(rng, 5, 3, 0.05)
        b, pb = runs_of(rng, 5, 3, 0.05)
        by_process += not _covers_one(unpaired_ratio(b, a, str(t), pb, pa))
        within += not _covers_one(unpaired_ratio(b, a, str(t)))
    assert one_process / trials > 0.15, one_process / trials
    assert by_process / trials <= 0.05, by_process / trials
    assert by_process <= within  # the same samples: resampling processes only widens


def _covers_one(iv: Interval | None) -> bool:
    assert iv is not None
    return iv.lo <= 1.0 <= iv.hi


def test_process_level_intervals_say_so_and_keep_their_power() -> None:
    rng = np.random.default_rng(11)
    a, pa = runs_of(rng, 5, 3, 0.05)
    iv = median_interval(a, "a", pa)
    assert iv is not None and iv.processes == 5 and iv.scope == "5 processes" and iv.n == 15
    within = median_interval(a, "a")
    assert within is not None and within.scope == "within-run" and within.hi - within.lo <= iv.hi - iv.lo
    # a real difference (30%; one thread against two is about 1.8x) is still called, from 5 processes of 3 reps
    # each side, at least 95% of the time (the interval widened for 5 units: 1.31x for two samples of 5)
    called = 0
    for t in range(100):
        rng = np.random.default_rng(t)
        a, pa = runs_of(rng, 5, 3, 0.05)
        b, pb = runs_of(rng, 5, 3, 0.05)
        slower = [1.3 * x for x in b]
        called += not _covers_one(unpaired_ratio(slower, a, str(t), pb, pa))
    assert called >= 95, called
    # paired ratios: each rep's process comes along
    x = {r: 1.0 + 0.01 * r for r in range(6)}
    y = {r: 1.0 for r in range(6)}
    paired = paired_ratio(x, y, "p", {r: r // 2 for r in range(6)})
    assert paired is not None and paired.processes == 3 and paired.n == 6


def test_an_interval_from_fewer_than_five_samples_or_processes_says_what_it_rests_on() -> None:
    rng = np.random.default_rng(3)
    a, pa = runs_of(rng, 3, 4, 0.05)
    iv = median_interval(a, "a", pa)  # 12 samples from 3 processes
    assert iv is not None and iv.thin and iv.fmt().endswith(" (only 3 processes)")
    assert iv.fmt(pct=True).endswith(" (only 3 processes)") and cell(iv, share=True).endswith("(only 3 processes)")
    few = median_interval([1.0, 1.1, 0.9], "few")  # 3 samples in one process
    assert few is not None and few.thin and few.fmt().endswith(" (only 3 samples)")
    b, pb = runs_of(rng, 5, 3, 0.05)
    enough = median_interval(b, "b", pb)
    assert enough is not None and not enough.thin and enough.fmt().endswith("]")
    # the catalog keeps the mark beside the interval's fields, an arm's too
    row = flatten(Row(ci=iv, arm=ArmStats(median_ms=1, median_lo_ms=0.9, median_hi_ms=1.1, n_ok=12, processes=3)))
    assert row["ci_thin"] is True and row["arm_thin"] is True and {"ci_thin", "arm_thin"} <= set(columns(Row))
    assert flatten(Row(ci=enough))["ci_thin"] is False and flatten(Row())["ci_thin"] is None


class Row(BaseModel):
    ci: Interval | None = None
    arm: ArmStats = ArmStats()


def test_proportion_interval() -> None:
    iv = proportion_interval(1, 20)
    assert iv is not None and iv.value == 0.05 and 0.0 < iv.lo < 0.01 and 0.23 < iv.hi < 0.24
    zero = proportion_interval(0, 100)
    assert zero is not None and zero.lo == 0.0 and 0.03 < zero.hi < 0.04
    assert proportion_interval(0, 0) is None


def test_variance_components_find_each_level() -> None:
    rng = np.random.default_rng(5)
    values, procs = runs_of(rng, 40, 6, 0.10)  # 10% between processes, 8% within one
    c = variance_components(values, procs)
    assert c is not None and c.processes == 40 and c.reps == 240
    assert 0.07 < c.between < 0.13 and 0.07 < c.within < 0.09, c
    flat, of = runs_of(rng, 40, 6, 0.0)
    c0 = variance_components(flat, of)
    assert c0 is not None and c0.between < 0.03 and 0.07 < c0.within < 0.09, c0
    assert variance_components([1.0, 2.0], [0, 0]) is None  # one process: no between
    assert variance_components([1.0, 2.0], [0, 1]) is None  # no process with two samples: no within
    # the split: dear processes and a dominant within spread -> more reps per process; cheap, differing
    # processes -> one rep each
    assert reps_per_process(c, process_s=4.0, rep_s=0.25) == round((16 * (c.within / c.between) ** 2) ** 0.5)
    assert reps_per_process(c.model_copy(update={"between": 0.5}), process_s=0.1, rep_s=1.0) == 1


def test_the_run_level_drift_from_aa_shifts_and_its_draws() -> None:
    """A/A pairs' whole-run shifts give the run level's spread (each log shift has variance 2 sigma^2); its draws
    put that spread, times sqrt(2), on a ratio of two runs."""
    from lab.core.stats import drift_of_shifts, run_drift_factors

    assert drift_of_shifts([]) == 0.0
    assert drift_of_shifts([math.exp(0.1), math.exp(-0.1)]) == pytest.approx(0.1 / math.sqrt(2))
    f = run_drift_factors(0.05, "k")
    assert np.std(np.log(f)) == pytest.approx(0.05 * math.sqrt(2), rel=0.05)
    assert np.array_equal(f, run_drift_factors(0.05, "k"))  # seeded: the same comparison gives the same interval


def test_row_medians_skip_the_padding_as_numpy_does() -> None:
    from lab.core.bootstrap import row_nanmedians

    rng = np.random.default_rng(3)
    v = rng.lognormal(size=(500, 9))
    v[rng.random(v.shape) < 0.5] = np.nan
    v[:, 4] = 2.0  # every row has a value
    assert np.array_equal(row_nanmedians(v), np.nanmedian(v, axis=1))


def test_a_rotated_order_starts_one_further_each_time_and_keeps_every_item() -> None:
    from lab.core.stats import rotated

    assert [rotated(["a", "b", "c"], k) for k in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]
    assert rotated([], 5) == []


def test_a_ratio_over_no_time_is_none_not_a_warning() -> None:
    """A band a model does not have (0 ms in both runs) has no B/A, and numpy is never asked to divide by 0."""
    import warnings

    from lab.core.stats import unpaired_ratio

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert unpaired_ratio([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], "zero") is None
        assert unpaired_ratio([1.0, 2.0, 3.0], [0.0, 0.0, 1.0], "mostly-zero") is None
        assert unpaired_ratio([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], "same") is not None


def steps_of(rng: np.random.Generator, n: int, outliers: bool) -> tuple[dict[int, list[float]], dict[int, list[float]]]:
    """A conversation of 6 steps over n reps: a setting saves 0.05 s on each of two steps of a saving of 1 s per
    step (the true share: 0.1 / 6); every rep's steps noisy, and with `outliers` one step of every fourth rep
    (a different step each time) taking 2 s more (an outlier the step's median ignores and a rep's sum would carry)."""
    gain: dict[int, list[float]] = {}
    saving: dict[int, list[float]] = {}
    for r in range(n):
        g = [0.05 if j < 2 else 0.0 for j in range(6)] + rng.normal(0, 0.01, 6)
        if outliers and r % 4 == 0:
            g[(r // 4) % 6] += 2.0
        gain[r], saving[r] = g.tolist(), (1.0 + rng.normal(0, 0.02, 6)).tolist()
    return gain, saving


def test_step_median_share_covers_the_true_share_and_shrugs_off_an_outlier_rep() -> None:
    true = 0.1 / 6
    covered = 0
    for seed in range(40):
        gain, saving = steps_of(np.random.default_rng(seed), 12, outliers=True)
        iv = step_median_share(gain, saving, f"s{seed}")
        assert iv is not None and iv.n == 12 and iv.lo <= iv.value <= iv.hi
        covered += iv.lo <= true <= iv.hi
        # the sum over each rep's steps carries the outlier: its interval is many times wider
        per_rep = median_interval([sum(gain[r]) / sum(saving[r]) for r in gain], f"r{seed}")
        assert per_rep is not None and per_rep.hi - per_rep.lo > 3 * (iv.hi - iv.lo)
    assert covered >= 36, covered


def test_step_median_share_leaves_out_incomplete_reps_and_refuses_no_saving() -> None:
    gain, saving = steps_of(np.random.default_rng(1), 6, outliers=False)
    whole = step_median_share(gain, saving, "k")
    gain[5][0] = math.nan  # a failed step: the rep is left out of that side, the others stand
    part = step_median_share(gain, saving, "k")
    assert whole is not None and part is not None and (whole.n, part.n) == (6, 5)
    assert step_median_share(gain, {r: [0.0] * 6 for r in saving}, "k") is None
    assert step_median_share({}, saving, "k") is None
    assert step_median_share(gain, saving, "k") == part  # the same samples, the same interval


def whole_draw(xs: np.ndarray, rng: np.random.Generator, procs: np.ndarray | None = None) -> np.ndarray:
    """The bootstrap medians of xs as the lab drew them before it drew in blocks: every resample at once (4000
    x n indices). Drawing a block at a time must give exactly these numbers."""
    if procs is None:
        return np.median(xs[rng.integers(0, len(xs), size=(stats.N_BOOT, len(xs)))], axis=1)
    parts = [xs[procs == p] for p in np.unique(procs)]
    sizes = np.array([len(p) for p in parts])
    table = np.full((len(parts), sizes.max()), np.nan)
    for i, part in enumerate(parts):
        table[i, : len(part)] = part
    pick = rng.integers(0, len(parts), size=(stats.N_BOOT, len(parts)))
    n = sizes[pick][..., None]
    idx = (rng.random((stats.N_BOOT, len(parts), sizes.max())) * n).astype(np.int64)
    values = np.where(np.arange(sizes.max()) < n, table[pick[..., None], idx], np.nan)
    return np.nanmedian(values.reshape(stats.N_BOOT, -1), axis=1)


@pytest.mark.parametrize("block", [None, 2003])  # the lab's block, and small ones of odd sizes
def test_drawing_in_blocks_gives_the_numbers_one_whole_draw_gave(
    block: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every interval the lab printed before it drew in blocks stays what it was: the same random numbers in the
    same order, for samples alone and for processes then samples (even, uneven, one sample to a process)."""
    from lab.core import bootstrap

    if block:
        monkeypatch.setattr(bootstrap, "BLOCK", block)
    rng = np.random.default_rng(11)
    for n in (2, 5, 17, 100, 500):
        xs = rng.lognormal(0, 0.1, n)
        layouts = [None, np.arange(n) % 3, rng.integers(0, 5, n), np.arange(n)] if n > 2 else [None]
        for procs in layouts:
            seed = int(rng.integers(1 << 62))
            got = stats.median_draws(xs, np.random.default_rng(seed), procs)
            assert np.array_equal(got, whole_draw(xs, np.random.default_rng(seed), procs)), (n, procs)


def test_every_bootstrap_gives_the_same_numbers_whatever_its_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """Process pairs, step shares, two runs' ratio and plain resamples: the same numbers from small blocks of odd
    sizes, the lab's block, and one block holding every resample (what one whole draw gave)."""
    from lab.core import bootstrap

    rng = np.random.default_rng(5)
    a = {(s, r): float(x) for s in range(7) for r in range(1 + s % 3) for x in [rng.lognormal(0, 0.1)]}
    b = {k: v * float(rng.lognormal(0, 0.05)) for k, v in a.items()}
    gain, saving = steps_of(rng, 9, outliers=True)
    xa, xb = rng.lognormal(0, 0.1, 40).tolist(), rng.lognormal(0, 0.1, 30).tolist()

    def numbers() -> list[object]:
        pairs = stats.paired_processes(a, b, "k")[1]
        ratio = stats.unpaired(xa, xb, "k", [i % 4 for i in range(40)], None)[1]
        return [pairs, ratio, step_median_share(gain, saving, "k"), np.array(list(stats.resamples(23, "k", 300)))]

    lab_s = numbers()
    for block in (2003, 1 << 40):
        monkeypatch.setattr(bootstrap, "BLOCK", block)
        got = numbers()
        assert all(np.array_equal(x, y) for x, y in zip(got[:2] + got[3:], lab_s[:2] + lab_s[3:], strict=True))
        assert got[2] == lab_s[2], block


def peak_mib(fn: Callable[[], T]) -> tuple[T, float]:
    """What fn returns and the most memory it held at once (numpy's arrays included), in MiB."""
    tracemalloc.start()
    try:
        return fn(), tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


MILLION = 1_000_000
BIG = {  # samples, their processes, the draws (fewer at a million: the time grows with them, the memory does not)
    "10k samples": (10_000, None, 4000),
    "10k samples in 10 processes": (10_000, [i % 10 for i in range(10_000)], 4000),
    "a million samples": (MILLION, None, 16),
    "a million samples in 20 processes": (MILLION, [i % 20 for i in range(MILLION)], 16),
    "a million samples, most in one of 10k processes": (MILLION, [max(0, i - 990_000) for i in range(MILLION)], 16),
}


@pytest.mark.parametrize("case", sorted(BIG))
def test_a_bootstrap_holds_a_few_blocks_whatever_n(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile or merely large raw file cannot end ingest in a MemoryError: one whole draw held 4000 x n
    indices (29.8 GiB at a million samples; at very uneven processes, a table of processes x the largest one);
    drawn a block at a time, an interval holds a few blocks, or a few arrays of n when one resample is larger."""
    n, procs, draws = BIG[case]
    monkeypatch.setattr(stats, "N_BOOT", draws)
    xs = np.random.default_rng(n).lognormal(0, 0.1, n).tolist()
    iv, peak = peak_mib(lambda: median_interval(xs, case, procs))
    assert peak < (48 if n < MILLION else 160), peak
    assert iv is not None and iv.n == n and 0.99 < iv.lo <= iv.hi < 1.01 and 0.99 < iv.value < 1.01, iv  # median 1


def test_pair_step_and_plain_resamples_hold_a_few_blocks() -> None:
    """The other bootstraps alike: 500 process pairs of 4 reps (one whole draw: 4000 x 2000 cells), 50 reps of a
    200-step conversation (1000 x 50 x 200), a profile's 400 resamples of 100k cycles."""
    rng = np.random.default_rng(2)
    a = {(s, r): float(x) for s in range(500) for r in range(4) for x in [rng.lognormal(0, 0.1)]}
    b = {k: 1.05 * v for k, v in a.items()}
    (iv, _), peak = peak_mib(lambda: stats.paired_processes(a, b, "pairs"))
    assert peak < 48 and iv is not None and iv.lo <= 1 / 1.05 <= iv.hi, (peak, iv)
    gain = {r: rng.normal(0.05, 0.01, 200).tolist() for r in range(50)}
    saving = {r: rng.normal(1.0, 0.01, 200).tolist() for r in range(50)}
    share, peak = peak_mib(lambda: step_median_share(gain, saving, "steps"))
    assert peak < 48 and share is not None and share.lo <= 0.05 <= share.hi, (peak, share)
    total, peak = peak_mib(lambda: sum(int(idx[0]) for idx in stats.resamples(100_000, "cycles", 400)))
    assert peak < 48 and 0 <= total < 400 * 100_000, peak
