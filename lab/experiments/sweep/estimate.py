"""The estimate's samples, only_new / prefill_tps(L): the time of a chunk of the step's tokens at depth L.

driver     the in-process driver restores its really decoded depth-L state and times the chunk, once per
           rep, first in the rep: beside the server's arms (after the same chunk untimed: the driver wakes
           after the server's work with its caches cold), or beside the driver's own arms in one process.
           Paired with the fake arm by rep, so the host's level at that moment cancels in fake / estimate
llama-bench `sweep.estimate_tool = llama-bench`: one `llama-bench -p only_new -d L` call per sample (it fills
           the depth once per call: the slow way, kept to compare against)
check      llama-bench once at the grid's two smallest L, the independent cross-check shown beside it
batch      the fill passes time a BATCH_CHUNK-token chunk beside each step's own at every L: what the step's
           batch size does to the rate (SweepPoint.batch_effect_ci), which an estimate quoted at 512 would miss
"""

from __future__ import annotations

from collections.abc import Callable

from lab.core.schemas import BATCH_CHUNK, PrefillTps
from lab.core.settings import Settings
from lab.core.stats import paired_ratio
from lab.engine.imagegrid import ImageGeometry
from lab.experiments.prefill_tps import LlamaBench, measure_prefill_tps
from lab.experiments.protocol import OpenRun
from lab.experiments.sweep.grid import GridPoint, only_new
from lab.experiments.sweep.points import PointEstimate, PointSamples
from lab.inproc import DriverError, DriverSession

Estimate = Callable[[GridPoint, int], PrefillTps]


def paired_estimate(ps: PointSamples, tps: list[PrefillTps]) -> PointEstimate:
    """The estimate beside a place's reps: the driver's chunks interleaved with them, paired with the fake arm by
    rep (an image step's estimate adds the fake arm's vision encode of that rep)."""
    encode, fake = ps.by_rep("fake", "encode_ms"), ps.by_rep("fake")
    est = [t for t in tps if t.rep is not None]  # rep None: the llama-bench cross-check
    by_rep = {t.rep: t.avg_ms + encode.get(t.rep, 0.0) for t in est if t.rep is not None}
    encode_ci = ps.interval(encode, "encode")
    return PointEstimate(
        ms=[t.avg_ms for t in est],
        vs_fake=paired_ratio(fake, by_rep, f"{ps.key}/fake/estimate", ps.proc_of),
        chunk=est[0].chunk if est else ps.p.new,  # an image step's: its image tokens and text tokens
        by_rep=by_rep,
        encode_ms=encode_ci.value if encode_ci else 0.0,
    )


def driver_estimate(driver: DriverSession, geometry: ImageGeometry | None, warm_up: bool = True) -> Estimate:
    """The estimate per rep: the driver restores its depth-L state and times a chunk of only_new tokens. Beside
    the server the same chunk goes untimed first (`warm_up`): the driver wakes after the server's requests with
    its caches cold, while the server's arms follow one another (llama-bench, too, warms up first); beside the
    driver's own arms its caches are warm."""

    def estimate(p: GridPoint, rep: int) -> PrefillTps:
        n = only_new(p, geometry)
        *_, row = driver.rep(p.L, n, rep, ["warmup", "genuine"] if warm_up else ["genuine"])
        if not row["ok"]:
            raise DriverError(f"the estimate's chunk at {p.id} rep {rep} failed: {row['reason']}")
        ms = float(row["decode_ms"])
        return PrefillTps(
            point=p.id,
            rep=rep,
            depth=p.L,
            chunk=n,
            tps=n / ms * 1e3,
            avg_ms=ms,
            stddev_ms=0.0,
            reps=1,
            tool="lab-inproc-driver",
        )

    return estimate


def batch_chunk(settings: Settings) -> int | None:
    """The batch-size reference the fill passes time (BATCH_CHUNK), when the sweep measures the estimate with
    the driver and the deepest L leaves room for it in the context (else the split shows no batch-size part)."""
    sw = settings.sweep
    measured = "estimate" in sw.arms and sw.estimate_tool == "inproc"
    return BATCH_CHUNK if measured and max(sw.Ls) + BATCH_CHUNK < settings.server.ctx_size else None


def no_estimate(p: GridPoint, rep: int) -> PrefillTps:
    raise AssertionError("this sweep measures no estimate")


def bench_estimate(sess: OpenRun, geometry: ImageGeometry | None) -> Estimate:
    """sweep.estimate_tool = llama-bench: one `llama-bench -p only_new -d L -r bench_reps` call per estimate
    sample, which fills the depth once per call (the slow way, kept to compare against)."""

    def estimate(p: GridPoint, rep: int) -> PrefillTps:
        return llama_bench(sess, only_new(p, geometry), p.L).model_copy(update={"point": p.id, "rep": rep})

    return estimate


def bench_check(sess: OpenRun, p: GridPoint) -> list[PrefillTps]:
    """llama-bench's own chunk at depth L, once, at the grid's two smallest L for its smallest new (text points;
    one depth fill per call): the independent cross-check shown beside the estimate."""
    sw = sess.settings.sweep
    if not (sw.bench_check and "estimate" in sw.arms and sw.estimate_tool == "inproc"):
        return []
    if p.image or p.L not in sw.Ls[:2] or p.new != sw.news[0]:
        return []
    return [llama_bench(sess, p.new, p.L).model_copy(update={"point": p.id, "rep": None})]


def llama_bench(sess: OpenRun, chunk: int, depth: int) -> PrefillTps:
    """`llama-bench -p chunk -d depth -r sweep.bench_reps` on the run's build, model and threads."""
    sw, srv = sess.settings.sweep, sess.settings.server
    log = sess.run.path / "logs" / "llama-bench.log"
    bench = LlamaBench(
        sess.engine,
        sess.model,
        [chunk],
        [depth],
        sw.bench_reps,
        srv.threads,
        srv.flash_attn,
        cpu_list=srv.cpu_list,
        kv=tuple(srv.kv_args),
    )
    return measure_prefill_tps(sess.shell, bench, log)[0]
