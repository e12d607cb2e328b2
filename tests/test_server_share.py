"""The server's per-request share, a measurement (lab.experiments.sweep.share): genuine - estimate paired by rep,
a plane over the grid fitted in each process, the process as the unit of its intervals."""

from __future__ import annotations

import numpy as np
import pytest

from lab.core.schemas import ArmStats, PrefillTps, SweepPoint, SweepSample
from lab.experiments.sweep.share import share_fit

pytestmark = pytest.mark.fast

GRID = [(L, new) for L in (512, 1024, 2048, 4096) for new in (64, 256)]


def run(
    fixed: float, per_new: float, per_1k: float, processes: int = 5, seed: int = 0
) -> tuple[list[SweepPoint], list[SweepSample], list[PrefillTps]]:
    rng = np.random.default_rng(seed)
    points, samples, tps = [], [], []
    for L, new in GRID:
        pid = f"L{L}_n{new}"
        points.append(
            SweepPoint(
                point=pid,
                L=L,
                new=new,
                n_kv_padded=L + new,
                measurable=True,
                baseline=ArmStats(),
                fake=ArmStats(),
                genuine=ArmStats(),
            )
        )
        for rep in range(processes * 2):
            est = new * (0.5 + L / 8192) * float(rng.lognormal(0, 0.05))
            share = fixed + per_new * new + per_1k * L / 1000 + float(rng.normal(0, 0.3))
            process = rep % processes
            samples.append(
                SweepSample(
                    point=pid,
                    L=L,
                    new=new,
                    arm="genuine",
                    rep=rep,
                    ok=True,
                    prompt_ms=est + share,
                    process=process,
                    t_utc="x",
                )
            )
            tps.append(
                PrefillTps(
                    point=pid,
                    rep=rep,
                    depth=L,
                    chunk=new,
                    tps=new / est * 1e3,
                    avg_ms=est,
                    stddev_ms=0.0,
                    reps=1,
                    tool="lab-inproc-driver",
                    process=process,
                )
            )
    return points, samples, tps


def test_the_share_is_fitted_per_process_and_recovers_its_plane() -> None:
    share = share_fit(*run(fixed=2.0, per_new=0.01, per_1k=0.4))
    assert share is not None and share.points == 8 and share.processes == 5
    for iv, true in ((share.fixed_ms_ci, 2.0), (share.per_new_ms_ci, 0.01), (share.per_1k_cached_ms_ci, 0.4)):
        assert iv is not None and iv.lo <= true <= iv.hi and iv.processes == 5, (iv, true)
    assert share.share_ci is not None and share.share_ci.value > 1


def test_no_share_without_two_processes_or_without_the_estimate() -> None:
    assert share_fit(*run(2.0, 0.01, 0.4, processes=1)) is None
    points, samples, _ = run(2.0, 0.01, 0.4)
    assert share_fit(points, samples, []) is None
