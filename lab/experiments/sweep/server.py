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

from lab.core.schemas import InprocFill, Interval, PrefillTps, ServerPointFields, SweepPoint, SweepSample, Where
from lab.core.settings import SweepSettings
from lab.core.stats import mean_interval, unpaired_ratio
from lab.engine.contract import ARMS, ContractClient, Step
from lab.engine.imagegrid import ImageGeometry
from lab.engine.media import synthetic_image_step
from lab.engine.slots import SavedStates
from lab.experiments.sweep.estimate import Estimate, paired_estimate
from lab.experiments.sweep.grid import GridPoint, image_counts, point_seed, point_text_step
from lab.experiments.sweep.points import (
    PointSamples,
    RepOut,
    judge_point,
    processes_of,
    rep_arms,
    sample_row,
    summarize_point,
)


class ServerPlace:
    """The sweep's reps through one llama-server process (one of the run's processes): each rep the estimate
    first (the driver's chunk, when the sweep measures it), an untimed server request, then the arms in a
    rotating order (no arm always goes first; drift on a shared machine hits every arm and the estimate alike).
    `states`: the run's saved depth-L states (slot files that outlive a process: a new process restores them, it
    does not prefill them again); warm_up: the untimed request even without the estimate (after another process
    measured on the same cores); fills and checks: the run's fill passes and each point's llama-bench
    cross-check, for the summary; inproc: each point's in-process samples (a both-places sweep), for the
    server's own share per arm."""

    where: Where = "server"

    def __init__(
        self,
        client: ContractClient,
        sw: SweepSettings,
        tokens: list[int],
        estimate: Estimate,
        geom: ImageGeometry | None = None,
        states: SavedStates | None = None,
        warm_up: bool = False,
        fills: list[InprocFill] | None = None,
        checks: dict[str, list[PrefillTps]] | None = None,
        inproc: dict[str, list[SweepSample]] | None = None,
    ) -> None:
        self.client, self.sw, self.tokens, self.estimate = client, sw, tokens, estimate
        self.geom, self.states, self.warm_up, self.fills = geom, states, warm_up, fills or []
        self.checks, self.inproc = checks if checks is not None else {}, inproc if inproc is not None else {}
        self.steps: dict[str, tuple[Step, str | None]] = {}

    def step(self, p: GridPoint) -> tuple[Step, str | None]:
        """The point's step in this process (an image step is made with the server's own tokenizer) and the slot
        file of its saved depth-L state (None: the genuine arm prefills its prefix)."""
        if p.id not in self.steps:
            if p.image:
                assert self.geom is not None
                seed = point_seed(p, self.sw.seed) + p.new
                step = synthetic_image_step(self.client.srv, self.geom, p.L, p.new, p.size, seed)
            else:
                step = point_text_step(p, self.tokens)
            saved = self.states.of(point_text_step(p, self.tokens)) if self.states and not p.image else None
            self.steps[p.id] = step, saved
        return self.steps[p.id]

    def rep(self, p: GridPoint, rep: int, process: int) -> RepOut:
        step, saved = self.step(p)
        sw, out = self.sw, RepOut()
        started = time.monotonic()
        if "estimate" in sw.arms:
            # the in-process estimate first, then one untimed server request: a process that wakes after the
            # other one's work finds its caches cold (40% slower on the tiny model here), so every timed server
            # request follows a server request, as the estimate's timed chunk follows its own warm-up
            out.tps.append(self.estimate(p, rep).model_copy(update={"process": process}))
        if self.warm_up or "estimate" in sw.arms:
            self.client.warm_up(step)
        for arm in rep_arms(sw.arms, rep, sw):
            n_out = sw.n_out if arm == "fake" else 0  # the fake arm also decodes at depth L + new (sweep.n_out)
            r = self.client.run_arm_alive(arm, step, saved, what=f"{p.id} {arm} rep {rep}", n_out=n_out)
            out.samples.append(sample_row(p, rep, r, self.geom, process))
            out.baseline = out.baseline or arm == "baseline"
        out.wall_s = time.monotonic() - started
        return out

    def judge(self, p: GridPoint, samples: list[SweepSample], tps: list[PrefillTps]) -> SweepPoint:
        """What the stop rule reads between two reps (lab.experiments.sweep.points.judge_point)."""
        return judge_point(PointSamples.of(p, samples, "server", tps), None, self.sw.tolerance)

    def summarize(self, p: GridPoint, samples: list[SweepSample], tps: list[PrefillTps]) -> SweepPoint:
        checks, inproc = self.checks.get(p.id, []), self.inproc.get(p.id, [])
        return summarize_server(p, samples, tps, self.sw.tolerance, self.geom, self.fills, checks, inproc)


def summarize_server(
    p: GridPoint,
    samples: list[SweepSample],
    tps: list[PrefillTps],
    tol: float,
    geom: ImageGeometry | None = None,
    fills: list[InprocFill] | None = None,
    checks: list[PrefillTps] | None = None,
    inproc: list[SweepSample] | None = None,
) -> SweepPoint:
    """One point through the server: its samples, the estimate's interleaved samples (`tps`), llama-bench's
    cross-check (`checks`) and, in a both-places sweep, the same point's in-process samples."""
    ps = PointSamples.of(p, samples, "server", tps)
    ext = server_fields(ps, geom, checks or [], inproc or [])
    return summarize_point(ps, paired_estimate(ps, tps), tol, fills or [], ext)


def server_fields(
    ps: PointSamples, geom: ImageGeometry | None, checks: list[PrefillTps], inproc: list[SweepSample]
) -> ServerPointFields:
    """What the server adds to a point: an image step's encode and LM parts, llama-bench's cross-check, and in a
    both-places sweep its own share per arm (server / in process; unpaired: one ran after the other)."""
    encode, fake = ps.by_rep("fake", "encode_ms"), ps.by_rep("fake")
    encode_ci = ps.interval(encode, "encode")
    lm_ci = ps.interval({r: fake[r] - e for r, e in encode.items() if r in fake}, "lm")
    image_tokens, image_positions = image_counts(ps.p, geom)
    vs_inproc: dict[str, Interval] = {}
    in_of = processes_of(inproc)
    for arm in ARMS if inproc else ():
        mine, theirs = ps.by_rep(arm), {s.rep: s.prompt_ms for s in inproc if s.arm == arm and s.ok and s.prompt_ms}
        ratio = unpaired_ratio(
            list(mine.values()),
            list(theirs.values()),
            f"{ps.key}/{arm}/in",
            ps.procs(mine),
            [in_of.get(r, 0) for r in theirs],
        )
        if ratio is not None:
            vs_inproc[arm] = ratio
    return ServerPointFields(
        image_tokens=image_tokens,
        image_positions=image_positions,
        encode_ms=encode_ci.value if encode_ci else None,
        lm_ms=lm_ci.value if lm_ci else None,
        encode_ci=encode_ci,
        lm_ci=lm_ci,
        bench_check_ci=mean_interval(checks[0].avg_ms, checks[0].stddev_ms, checks[0].reps) if checks else None,
        vs_inproc=vs_inproc,
    )
