"""The statistics module: intervals that cover a known ratio as often as they claim, narrow as reps grow, and
are deterministic; verdicts that can say undecided."""

from __future__ import annotations

import numpy as np
import pytest

from lab.stats import (
    Interval,
    geomean_ratio,
    median_interval,
    paired_ratio,
    reps_to_decide,
    unpaired_draws,
    unpaired_ratio,
    verdict,
)

pytestmark = pytest.mark.fast

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
    d1, d2 = unpaired_draws(a, b, "p1"), unpaired_draws(b, b, "p2")
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
