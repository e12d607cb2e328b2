"""The sweep in one process (`where` inproc): the driver (lab/inproc) measures a point's arms with libllama, no
server in the numbers, and no rep paying for its prefix.

The driver loads the model once for the run. Its cumulative fill passes (run before any point) reach every
grid L on the way and keep the really decoded depth-L state there. Then each rep of a point costs its new
tokens:
    fake       fabricate the depth-L prefix (the lab's patch), time the new tokens
    genuine    restore the kept depth-L state (the cache read, timed on its own), time the new tokens; a
               memcpy of as many bytes is the cache read's yardstick
    plain      decode L in the sequence first (untimed), then time the new tokens: the proof that a restored
               state is a genuine hit (optional: it costs L per rep)
    baseline   decode L + new from empty (optional direct reps, at most sweep.baseline_reps per point)
    estimate   first in every rep: restore the depth-L state and time a chunk of the new tokens, what the
               estimate beside the server times (lab.experiments.sweep.server.driver_estimate), here next to the
               rep's arms in their process, so fake / estimate is paired by rep as fake / genuine is
"""

from __future__ import annotations

import time
from typing import Any

from lab.core.runs import utc_now
from lab.core.schemas import (
    ArmsSummary,
    InprocFill,
    InprocPointFields,
    Interval,
    PrefillTps,
    SweepPoint,
    SweepSample,
    Where,
)
from lab.core.settings import SweepSettings
from lab.core.stats import linear_fit, median_interval
from lab.experiments.sweep.estimate import driver_estimate, paired_estimate
from lab.experiments.sweep.grid import GridPoint
from lab.experiments.sweep.points import (
    PointSamples,
    RepOut,
    judge_point,
    processes_of,
    rep_arms,
    rep_values,
    summarize_point,
)
from lab.inproc import DriverSession
from lab.models.memshape import MemoryShape

INPROC_ARMS = ("baseline", "fake", "genuine", "plain")


def samples_of(rows: list[dict[str, Any]], point: str, process: int = 0) -> list[SweepSample]:
    """The driver's rows of one `rep` command as the sweep's samples (prompt_ms: the timed llama_decode)."""
    out = []
    for r in rows:
        if r.get("kind") != "sample":
            continue
        ok, arm = r["ok"], r["arm"]
        out.append(
            SweepSample(
                where="inproc",
                point=point,
                L=r["L"],
                new=r["new"],
                arm=arm,
                rep=r["rep"],
                ok=ok,
                reason=r["reason"],
                prompt_ms=r["decode_ms"] if ok else None,
                prep_ms=r["prep_ms"] if ok and arm in ("fake", "genuine") else None,
                copy_ms=r["copy_ms"] if ok and arm == "genuine" else None,
                blob_bytes=r["blob_bytes"] if arm == "genuine" and r["blob_bytes"] else None,
                pos_min=r.get("pos_min"),
                pos_max=r["pos_max"],
                process=process,
                t_utc=utc_now(),
            )
        )
    return out


class InprocPlace:
    """The sweep's reps in one driver process (one of the run's processes): each rep the estimate's chunk first
    (when the sweep measures it), then one driver command for its arms, the direct baseline (when a rep has it)
    in a command of its own, so the rest of the rep is timed alone."""

    where: Where = "inproc"

    def __init__(
        self, driver: DriverSession, sw: SweepSettings, fills: list[InprocFill], shape: MemoryShape | None
    ) -> None:
        self.driver, self.sw, self.fills, self.shape = driver, sw, fills, shape
        self.estimate = driver_estimate(driver, None, warm_up=False)

    def rep(self, p: GridPoint, rep: int, process: int) -> RepOut:
        todo = rep_arms(self.sw.arms, rep, self.sw)
        out = RepOut()
        if "baseline" in todo:
            out.samples += samples_of(self.driver.rep(p.L, p.new, rep, ["baseline"]), p.id, process)
        started = time.monotonic()
        if "estimate" in self.sw.arms:
            out.tps.append(self.estimate(p, rep).model_copy(update={"where": "inproc", "process": process}))
        out.samples += samples_of(self.driver.rep(p.L, p.new, rep, [a for a in todo if a != "baseline"]), p.id, process)
        out.wall_s = time.monotonic() - started
        return out

    def summarize(self, p: GridPoint, samples: list[SweepSample], tps: list[PrefillTps]) -> SweepPoint:
        return summarize_inproc(p, samples, self.sw.tolerance, self.fills, self.shape, tps)

    def judge(self, p: GridPoint, samples: list[SweepSample], tps: list[PrefillTps]) -> SweepPoint:
        """What the stop rule reads between two reps (lab.experiments.sweep.points.judge_point)."""
        ps = PointSamples.of(p, samples, "inproc", tps)
        return judge_point(ps, paired_estimate(ps, tps), self.sw.tolerance)


def summarize_inproc(
    p: GridPoint,
    samples: list[SweepSample],
    tol: float,
    fills: list[InprocFill] | None = None,
    shape: MemoryShape | None = None,
    tps: list[PrefillTps] | None = None,
) -> SweepPoint:
    """One point in one process: its samples, the estimate's chunks beside its reps (none when the sweep does not
    measure the estimate: no fake / estimate then), the fill passes (the baseline), the GGUF's shape."""
    ps = PointSamples.of(p, samples, "inproc", tps or [])
    return summarize_point(ps, paired_estimate(ps, tps or []), tol, fills or [], restore_fields(ps, shape))


def restore_fields(ps: PointSamples, shape: MemoryShape | None) -> InprocPointFields:
    """What one process adds to a point: what having the prefix cost, the cache read a server would do (the
    restore's ms, bandwidth and share of the step) against a memcpy of as many bytes, and the GGUF's prediction
    of the state blob."""
    values = rep_values(ps.samples)
    blobs = {s.blob_bytes for s in ps.samples if s.arm == "genuine" and s.blob_bytes}
    return InprocPointFields(
        fake_prep_ci=ps.interval(ps.by_rep("fake", "prep_ms"), "fake/prep_ms"),
        restore_prep_ci=ps.interval(ps.by_rep("genuine", "prep_ms"), "genuine/prep_ms"),
        memcpy_ci=ps.interval(ps.by_rep("genuine", "copy_ms"), "genuine/copy_ms"),
        blob_bytes=max(blobs) if blobs else None,
        predicted_blob_bytes=shape.blob_bytes(ps.p.L) if shape else None,
        **{field: ps.interval(values[name], name) for field, name in RESTORE_RATIOS.items()},
    )


RESTORE_RATIOS = {  # SweepPoint field: the per-rep figure (lab.experiments.sweep.points.rep_values)
    "restore_gbps_ci": "restore/gbps",
    "memcpy_gbps_ci": "memcpy/gbps",
    "restore_vs_memcpy_ci": "memcpy/restore",
    "cache_read_share_ci": "share",
    "restore_step_vs_genuine_ci": "restore-step/genuine",
}


def restore_summary(
    points: list[SweepPoint], samples: list[SweepSample], fills: list[InprocFill], shape: MemoryShape | None
) -> ArmsSummary:
    """The cache read over the grid: blob bytes and restore ms against L (least squares over the points), the
    GGUF's prediction, and bandwidth and ratios pooled over every point's reps."""
    s = ArmsSummary(fill_passes=len({f.fill_pass for f in fills}), fill_s=sum(f.ms for f in fills) / 1e3)
    if shape is not None:
        s.predicted_bytes_per_cell, s.predicted_fixed_bytes = shape.bytes_per_cell, shape.recurrent_bytes
        s.attention_layers, s.recurrent_layers = shape.attention_layers, shape.recurrent_layers
    blobs = {p.L: p.blob_bytes for p in points if p.blob_bytes}
    if len(blobs) >= 2:
        slope, intercept, _ = linear_fit([float(L) for L in blobs], [float(b) for b in blobs.values()])
        s.bytes_per_cell, s.fixed_bytes = slope, intercept
    restore = [(float(p.L), p.restore_prep_ci.value) for p in points if p.restore_prep_ci is not None]
    if len({L for L, _ in restore}) >= 2:
        s.restore_ms_per_1k_cells = linear_fit([L for L, _ in restore], [ms for _, ms in restore])[0] * 1000
    by_point: dict[str, list[SweepSample]] = {}
    for smp in samples:
        by_point.setdefault(smp.point, []).append(smp)
    pooled: dict[str, tuple[list[float], list[int]]] = {}
    for smps in by_point.values():
        proc_of = processes_of(smps)
        for name, values in rep_values(smps).items():
            xs, procs = pooled.setdefault(name, ([], []))
            xs += values.values()
            procs += [proc_of.get(r, 0) for r in values]

    def iv(name: str) -> Interval | None:
        xs, procs = pooled.get(name, ([], []))
        return median_interval(xs, f"arms/all/{name}", procs)

    s.restore_gbps_ci, s.memcpy_gbps_ci = iv("restore/gbps"), iv("memcpy/gbps")
    s.restore_vs_memcpy_ci, s.fake_vs_genuine_ci = iv("memcpy/restore"), iv("fake/genuine")
    s.restore_step_vs_genuine_ci, s.genuine_vs_plain_ci = iv("restore-step/genuine"), iv("genuine/plain")
    s.rep_s_ci = median_interval([p.rep_s.value for p in points if p.rep_s is not None], "arms/all/rep_s")
    return s
