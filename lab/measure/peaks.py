"""This host's peaks, probed in a few seconds: a GEMM at a profiled shape (GFLOP/s) and a large memcpy (GB/s),
the roofs a band's achieved throughput is read against.

The probe runs in its own process (`python -m lab.measure.peaks`) with the measurement's thread count given to the
BLAS (OMP/OPENBLAS/MKL_NUM_THREADS) and the measurement's CPU pinning, so it uses the CPUs the profile used.
The GEMM is float32 through numpy's BLAS: the host's dense-matmul rate, not ggml's own kernels. The copy is
bytes copied per second of a buffer far larger than the caches (so it reads from and writes to memory).
Each figure is the median of its reps with a bootstrap interval.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from pydantic import BaseModel

from lab.core.errors import LabError
from lab.core.schemas import Interval
from lab.core.stats import median_interval
from lab.engine.pinning import taskset


class Peaks(BaseModel):
    gemm_gflops: Interval
    copy_gbps: Interval
    gemm_shape: tuple[int, int, int]  # (m, k, n): (tokens, input width, output width)
    copy_bytes: int
    threads: int


class PeaksError(LabError):
    pass


def probe(m: int, k: int, n: int, copy_mb: int, reps: int) -> dict[str, list[float]]:
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    t0 = time.perf_counter()
    a @ b  # warm-up: BLAS threads start, pages fault in
    inner = max(1, int(0.02 / max(time.perf_counter() - t0, 1e-6)))  # a rep lasts about 20 ms at least
    gemm = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            a @ b
        gemm.append(2.0 * m * k * n * inner / (time.perf_counter() - t0) / 1e9)
    src = np.ones(copy_mb * (1 << 20), dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    copy = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        copy.append(src.nbytes / (time.perf_counter() - t0) / 1e9)
    return {"gemm_gflops": gemm, "copy_gbps": copy}


def measure_peaks(
    m: int, k: int, n: int, threads: int, cpu_list: str | None = None, copy_mb: int = 256, reps: int = 9
) -> Peaks:
    """Run the probe in a child process with `threads` BLAS threads, pinned like the measurement."""
    env = {**os.environ, **{v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    cmd = [
        *taskset(cpu_list),
        sys.executable,
        "-m",
        "lab.measure.peaks",
        str(m),
        str(k),
        str(n),
        str(copy_mb),
        str(reps),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        raise PeaksError(f"the peaks probe failed: {(r.stderr.strip().splitlines() or ['no reason'])[-1]}")
    got = json.loads(r.stdout)
    gemm = median_interval(got["gemm_gflops"], key=f"peaks/gemm/{m}x{k}x{n}")
    copy = median_interval(got["copy_gbps"], key=f"peaks/copy/{copy_mb}")
    assert gemm is not None and copy is not None
    return Peaks(gemm_gflops=gemm, copy_gbps=copy, gemm_shape=(m, k, n), copy_bytes=copy_mb << 20, threads=threads)


def main() -> None:
    ap = argparse.ArgumentParser(description="probe this host's GEMM GFLOP/s and copy GB/s (JSON on stdout)")
    for name in ("m", "k", "n", "copy_mb", "reps"):
        ap.add_argument(name, type=int)
    args = ap.parse_args()
    print(json.dumps(probe(args.m, args.k, args.n, args.copy_mb, args.reps)))


if __name__ == "__main__":
    main()
