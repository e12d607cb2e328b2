"""The sweep through llama-server (`where` server): one point's arms as HTTP requests, interleaved with the
estimate, and the llama-bench cross-check.

What a rep measures, and what it costs beyond its new tokens:
    fake       the server fabricates the depth-L prefix (n_fake_cached): a few ms of cell bookkeeping
    genuine    the slot's saved depth-L state is restored (a file read), then L + new with cache_prompt: a real
               hit. Each L is prefilled once per run, cumulatively (from the shallower saved state), and saved
    estimate   the in-process driver restores its depth-L state and decodes the same only_new tokens: what
               `llama-bench -p only_new -d L` times, without refilling the depth per sample
    plain      (optional) prefill L, then L + new: the genuine hit paying its prefix, the restore's proof
    decode     (sweep.n_out > 0) the fake arm's request also generates n_out tokens: decode ms/token at L + new
    baseline   L + new from nothing: the expensive thing it measures, so only sweep.baseline_reps direct reps;
               the driver's cumulative fill passes give it again as prefix sums (time to reach L + new)
llama-bench runs once at a few points as an independent cross-check of the estimate.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lab.engine.contract import ARMS, Arm, ArmResult, ContractClient
from lab.engine.imagegrid import ImageGeometry
from lab.engine.media import synthetic_image_step
from lab.experiments.prefill_tps import LlamaBench, measure_prefill_tps
from lab.experiments.protocol import OpenRun
from lab.experiments.sweep_grid import GridPoint, only_new, point_seed, point_text_step
from lab.experiments.sweep_points import decided, sample_row, summarize_point
from lab.inproc import DriverError, DriverSession
from lab.schemas import InprocFill, PrefillTps, SweepPoint, SweepSample
from lab.settings import SweepSettings
from lab.stats import median_interval

Estimate = Callable[[GridPoint, int], PrefillTps]


def measure_point(
    client: ContractClient,
    p: GridPoint,
    sw: SweepSettings,
    tokens: list[int],
    estimate: Estimate,
    on_sample: Callable[[], None],
    geom: ImageGeometry | None = None,
    saved: str | None = None,
    warm_up: bool = False,
    fills: list[InprocFill] | None = None,
    check: list[PrefillTps] | None = None,
    inproc: list[SweepSample] | None = None,
) -> tuple[list[SweepSample], list[PrefillTps], SweepPoint]:
    """The arms and the estimate of one point, one interleaved rep after another in a rotating order (no arm
    always goes first; drift on a shared machine hits every arm and the estimate alike), until the point is
    decided (after at least min_reps) or max_reps is reached. `saved`: the slot file of the point's really
    prefilled depth-L state (the genuine arm restores it; without one it prefills the prefix per rep); warm_up: an
    untimed server request before each rep's arms (after another process measured on the same cores); fills and
    check: the run's fill passes and the point's llama-bench cross-check, measured before, for its summary; inproc:
    the point's in-process samples (a both-places sweep), for the server's own share per arm."""
    if p.image:
        assert geom is not None
        step = synthetic_image_step(client.srv, geom, p.L, p.new, p.size, point_seed(p, sw.seed) + p.new)
    else:
        step = point_text_step(p, tokens)
    samples: list[SweepSample] = []
    tps: list[PrefillTps] = []
    slots: list[Arm] = [a for a in ARMS if a in sw.arms]

    def run(arm: Arm, rep: int) -> ArmResult:  # the fake arm also decodes at depth L + new (sweep.n_out)
        n_out = sw.n_out if arm == "fake" else 0
        return client.run_arm_alive(arm, step, saved, what=f"{p.id} {arm} rep {rep}", n_out=n_out)

    walls: dict[int, float] = {}
    for rep in range(sw.max_reps):
        started = time.monotonic()
        if "estimate" in sw.arms:
            # the in-process estimate first, then one untimed server request: a process that wakes after the
            # other one's work finds its caches cold (40% slower on the tiny model here), so every timed server
            # request follows a server request, as the estimate's timed chunk follows its own warm-up
            tps.append(estimate(p, rep))
            on_sample()
        if warm_up or "estimate" in sw.arms:
            client.warm_up(step)
        for arm in slots[rep % len(slots) :] + slots[: rep % len(slots)]:
            if arm == "baseline" and sw.baseline_reps is not None and rep >= sw.baseline_reps:
                continue
            samples.append(sample_row(p, rep, run(arm, rep), geom))
            on_sample()
        walls[rep] = time.monotonic() - started
        if rep + 1 < sw.min_reps:  # no summary needed before min_reps: its bootstraps cost a cheap rep's time
            continue
        point = summarize_point(p, samples, tps + (check or []), sw.tolerance, geom, fills, inproc=inproc)
        if decided(point, sw):
            break
    # what one more rep costs: the reps past the direct baseline's (all of them when it runs every rep)
    later = [
        w for r, w in walls.items() if sw.baseline_reps is None or r >= sw.baseline_reps or "baseline" not in sw.arms
    ]
    point.rep_s = median_interval(later or list(walls.values()), f"{p.id}/rep_s")
    return samples, tps, point


def driver_estimate(driver: DriverSession, geometry: ImageGeometry | None) -> Estimate:
    """The estimate per rep: the driver restores its depth-L state and times a chunk of only_new tokens."""

    def estimate(p: GridPoint, rep: int) -> PrefillTps:
        # the same chunk untimed first: the driver wakes after the server's requests with its caches cold,
        # while the server's arms follow one another (llama-bench, too, warms up first)
        n = only_new(p, geometry)
        *_, row = driver.rep(p.L, n, rep, ["warmup", "genuine"])
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
            tool="lab-inproc-arms",
        )

    return estimate


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
        sess.engine, sess.model, [chunk], [depth], sw.bench_reps, srv.threads, srv.flash_attn, cpu_list=srv.cpu_list
    )
    return measure_prefill_tps(sess.target, bench, log)[0]
