"""The fake-prefix sweep: per (L, new) point, fake prefix / genuine hit / estimate interleaved and repeated, each
rep costing its new tokens, against the arithmetic estimate opt_prefill = only_new / prefill_tps(L).

What a rep measures, and what it costs beyond its new tokens:
    fake       the server fabricates the depth-L prefix (n_fake_cached): a few ms of cell bookkeeping
    genuine    the slot's saved depth-L state is restored (a file read), then L + new with cache_prompt: a real
               hit. Each L is prefilled once per run, cumulatively (from the shallower saved state), and saved
    estimate   the in-process driver restores its depth-L state and decodes the same only_new tokens: what
               `llama-bench -p only_new -d L` times, without refilling the depth per sample
    plain      (optional) prefill L, then L + new: the genuine hit paying its prefix, the restore's proof
    baseline   L + new from nothing: the expensive thing it measures, so only sweep.baseline_reps direct reps;
               the driver's cumulative fill passes give it again as prefix sums (time to reach L + new)
llama-bench runs once at a few points as an independent cross-check of the estimate.

Resumable at point granularity: a point's samples and its summary row are appended together when the
point is done, so an interrupted sweep resumes with no duplicated or lost point.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from lab.engine.contract import ARMS, Arm, ArmResult, ContractClient, Step, filler_tokens, text_step
from lab.engine.imagegrid import ImageGeometry
from lab.engine.media import synthetic_image_step
from lab.engine.models import resolve_projector
from lab.engine.slots import SavedStates, scratch_dir
from lab.errors import LabError
from lab.experiments.planning import plan_line, plan_of_run, plan_results
from lab.experiments.prefill_tps import measure_prefill_tps
from lab.experiments.protocol import Experiment, Outcome, Parts, Session, progress_bar, run_experiment
from lab.fills import complete_fills, fill_values, run_fills
from lab.headline import newest_profile, steps_of, summary_lines
from lab.inproc import SOURCE, DriverError, DriverSession, prepare_driver, sweep_driver_command
from lab.instrument import InstrumentInfo
from lab.plan import WARM_UP, Plan
from lab.presenters import headline_tables
from lab.presenters.sweep import print_summary
from lab.runs import RunFolder, utc_now
from lab.schemas import KV_PAD, ArmStats, InprocFill, Interval, PrefillTps, SweepPoint, SweepSample, ggml_pad
from lab.settings import ServerSettings, Settings, SweepSettings
from lab.stats import arm_stats, median_interval, paired_ratio, reps_to_decide, unpaired_ratio, verdict

SAMPLES, POINTS, TPS, FILLS = "samples", "points", "prefill_tps", "fills"


def point_id(L: int, new: int, image: str | None = None) -> str:
    return f"L{L}_n{new}" + (f"_img{image}" if image else "")


@dataclass(frozen=True)
class GridPoint:
    L: int
    new: int
    image: str | None = None  # WxH of the screenshot in the new part

    @property
    def id(self) -> str:
        return point_id(self.L, self.new, self.image)

    @property
    def size(self) -> tuple[int, int]:
        assert self.image is not None
        w, h = self.image.split("x")
        return int(w), int(h)


def grid(params: SweepSettings) -> list[GridPoint]:
    images = [None if i == "none" else i for i in params.images]
    return [GridPoint(L, new, img) for img in images for L in params.Ls for new in params.news]


def image_counts(p: GridPoint, geom: ImageGeometry | None) -> tuple[int | None, int | None]:
    """(image tokens, positions) of a point's screenshot; (None, None) for a text step."""
    if p.image is None:
        return None, None
    assert geom is not None, "an image point needs the projector's geometry"
    return geom.tokens(*p.size)


def sample_row(p: GridPoint, rep: int, r: ArmResult, geom: ImageGeometry | None = None) -> SweepSample:
    t = r.timings
    img = image_counts(p, geom)
    return SweepSample(
        image=p.image,
        image_tokens=img[0],
        image_positions=img[1],
        encode_ms=r.encode_ms,
        image_decode_ms=r.image_decode_ms,
        point=p.id,
        L=p.L,
        new=p.new,
        arm=r.arm,
        rep=rep,
        ok=r.ok,
        reason=r.reason,
        prompt_ms=t.prompt_ms if t else None,
        prompt_n=t.prompt_n if t else None,
        cache_n=t.cache_n if t else None,
        fake_ms=t.fake_ms if t and r.arm == "fake" else None,
        warm=r.warm,
        t_utc=utc_now(),
    )


def server_arm_stats(samples: list[SweepSample], arm: str, key: str) -> ArmStats:
    """The prompt_ms of one server arm's timed requests (lab.stats.arm_stats)."""
    ms = [s.prompt_ms for s in samples if s.arm == arm and s.ok and s.prompt_ms is not None]
    return arm_stats(ms, sum(1 for s in samples if s.arm == arm and not s.ok), key=f"{key}/{arm}")


def bench_interval(t: PrefillTps) -> Interval:
    """llama-bench's mean chunk ms with a 95% interval from its own reps (normal approximation: it keeps no
    samples we could bootstrap here)."""
    half = 1.96 * t.stddev_ms / max(1, t.reps) ** 0.5
    return Interval(value=t.avg_ms, lo=t.avg_ms - half, hi=t.avg_ms + half, n=max(1, t.reps))


def summarize_point(
    p: GridPoint,
    samples: list[SweepSample],
    tps: list[PrefillTps],
    tol: float,
    geom: ImageGeometry | None = None,
    fills: list[InprocFill] | None = None,
) -> SweepPoint:
    stats = {arm: server_arm_stats(samples, arm, p.id) for arm in ARMS}
    by_rep = {arm: {s.rep: s.prompt_ms for s in samples if s.arm == arm and s.ok and s.prompt_ms} for arm in ARMS}
    # image steps: the estimate adds the vision encode explicitly (the fake arm's, per rep)
    encode = {s.rep: s.encode_ms for s in samples if s.arm == "fake" and s.ok and s.encode_ms is not None}
    est = [t for t in tps if t.rep is not None]  # interleaved estimate samples; rep None: the cross-check
    check = next((t for t in tps if t.rep is None), None)
    est_by_rep = {t.rep: t.avg_ms + encode.get(t.rep, 0.0) for t in est if t.rep is not None}
    est_ms = statistics.median(t.avg_ms for t in est) if est else None
    only_new = est[0].chunk if est else p.new  # image steps: image tokens + text tokens
    img = image_counts(p, geom)
    encode_ci = median_interval(list(encode.values()), key=f"{p.id}/encode")
    lm = [by_rep["fake"][r] - e for r, e in encode.items() if r in by_rep["fake"]]
    lm_ci = median_interval(lm, key=f"{p.id}/lm")
    vs_est = paired_ratio(by_rep["fake"], est_by_rep, key=f"{p.id}/fake/estimate")
    vs_gen = paired_ratio(by_rep["fake"], by_rep["genuine"], key=f"{p.id}/fake/genuine")
    vs_base = paired_ratio(by_rep["fake"], by_rep["baseline"], key=f"{p.id}/fake/baseline")
    vs_plain = paired_ratio(by_rep["genuine"], by_rep["plain"], key=f"{p.id}/genuine/plain")
    verdicts = {"genuine": verdict(vs_gen, tol), "estimate": verdict(vs_est, tol), "plain": verdict(vs_plain, tol)}
    undecided = [
        reps_to_decide(iv, tol)
        for iv, v in ((vs_gen, verdicts["genuine"]), (vs_est, verdicts["estimate"]), (vs_plain, verdicts["plain"]))
        if iv is not None and v == "undecided"
    ]
    warms = sorted({s.warm for s in samples if s.arm == "genuine" and s.warm})
    base_fill = fill_values(fills or [], p.L, only_new)[0]
    if not by_rep["baseline"] and base_fill:  # no direct reps: the fill passes' prefix sums are the baseline
        stats["baseline"] = arm_stats(base_fill, key=f"{p.id}/baseline/fill")
        vs_base = unpaired_ratio(list(by_rep["fake"].values()), base_fill, key=f"{p.id}/fake/baseline/fill")
    point = SweepPoint(
        point=p.id,
        L=p.L,
        new=p.new,
        image=p.image,
        image_tokens=img[0],
        image_positions=img[1],
        encode_ms=encode_ci.value if encode_ci else None,
        lm_ms=lm_ci.value if lm_ci else None,
        encode_ci=encode_ci,
        lm_ci=lm_ci,
        n_kv_padded=ggml_pad(p.L + only_new),
        measurable=p.L >= KV_PAD,
        prefill_tps=only_new / est_ms * 1e3 if est_ms else None,
        # only_new / prefill_tps(L) = the chunk's time at depth L (+ the encode for an image step)
        opt_prefill_ms=est_ms + (encode_ci.value if encode_ci else 0.0) if est_ms is not None else None,
        fake_vs_estimate=vs_est.value - 1 if vs_est else None,
        fake_vs_genuine=vs_gen.value - 1 if vs_gen else None,
        fake_vs_baseline=vs_base.value if vs_base else None,
        fake_vs_estimate_ci=vs_est,
        estimate_ci=median_interval(list(est_by_rep.values()), key=f"{p.id}/estimate"),
        fake_vs_genuine_ci=vs_gen,
        fake_vs_baseline_ci=vs_base,
        genuine_verdict=verdicts["genuine"],
        estimate_verdict=verdicts["estimate"],
        genuine_vs_plain_ci=vs_plain,
        plain_verdict=verdicts["plain"],
        bench_check_ci=bench_interval(check) if check is not None else None,
        genuine_warm=",".join(warms),
        reps=len({s.rep for s in samples} | set(est_by_rep)),
        reps_to_decide=max((n for n in undecided if n is not None), default=None),
        baseline=stats["baseline"],
        fake=stats["fake"],
        genuine=stats["genuine"],
        plain=stats["plain"],
        baseline_fill=arm_stats(base_fill, key=f"{p.id}/baseline/fill"),
        baseline_source="direct reps" if by_rep["baseline"] else "fill passes" if base_fill else "",
    )
    point.diagnostics = diagnose(point, samples, tol)
    return point


def decided(point: SweepPoint, sw: SweepSettings) -> bool:
    """Whether a point needs no more reps: the verdicts of what is measured are decided, and the fake/genuine
    interval is as narrow as `sw.target`."""
    if "genuine" in sw.arms:
        iv = point.fake_vs_genuine_ci
        if point.genuine_verdict == "undecided" or iv is None or iv.half_width > sw.target:
            return False
    if "plain" in sw.arms and point.plain_verdict == "undecided":
        return False
    return not ("estimate" in sw.arms and point.estimate_verdict == "undecided")


def diagnose(p: SweepPoint, samples: list[SweepSample], tol: float) -> list[str]:
    """Notes on a point: the checks to make where a verdict is `disagree` (what to look at when the fabricated
    prefix does not do a cache hit's work), how many reps would decide an `undecided` one, and facts (the
    256-column floor, failed samples)."""
    out: list[str] = []
    if not p.measurable:
        out.append(f"L={p.L} is below the {KV_PAD}-column floor: attention reads {p.n_kv_padded} columns anyway")
    failed = [s.reason for s in samples if not s.ok]
    if failed:
        out.append(f"{len(failed)} failed sample(s), excluded: {failed[0]}")
    only_new = p.new + (p.image_tokens or 0)  # an image step also decodes the image's tokens
    prompt_ns = sorted({s.prompt_n for s in samples if s.arm == "fake" and s.prompt_n is not None})
    est, gen = p.fake_vs_estimate_ci, p.fake_vs_genuine_ci
    if p.estimate_verdict == "disagree" and est is not None and est.value > 1:
        if prompt_ns != [only_new]:
            out.append(f"fake {est.fmt(pct=True)} vs the estimate, and prompt_n {prompt_ns} != only_new {only_new}: "
                       "the only-new branch did not fire")  # fmt: skip
        else:
            out.append(f"fake {est.fmt(pct=True)} vs the estimate although prompt_n == only_new: per-request "
                       "server overhead (compare fake/genuine, which shares it)")  # fmt: skip
    if p.estimate_verdict == "disagree" and est is not None and est.value < 1:
        out.append(f"fake {est.fmt(pct=True)} vs the estimate: check that both memory children report "
                   f"seq_pos_max == L-1 (the hybrid takes the min) and that the attended KV is padded to "
                   f"{p.n_kv_padded} >= L+new")  # fmt: skip
    if p.genuine_verdict == "disagree" and gen is not None:
        out.append(f"fake {gen.fmt(pct=True)} vs the genuine hit: the fabricated prefix does not do the hit's work; "
                   f"check prompt_n {prompt_ns} == {only_new}, both children's seq_pos_max == L-1, and the padded "
                   f"n_kv {p.n_kv_padded}")  # fmt: skip
    for name, iv, v in (("fake/genuine", gen, p.genuine_verdict), ("fake/estimate", est, p.estimate_verdict)):
        if v == "undecided" and iv is not None:
            more = reps_to_decide(iv, tol)
            if more is None:
                hint = "it sits on the bound: no number of reps decides it at this tolerance"
            elif more > 1000:
                hint = "far too noisy to decide at this tolerance (over 1000 reps); check the host's noise figures"
            else:
                hint = f"about {more} reps would likely decide it"
            out.append(f"{name} {iv.fmt(pct=True)} straddles 1 +- {tol:.0%} after {iv.n} reps: {hint}")
    return out


def point_seed(p: GridPoint, seed: int) -> int:
    return seed * 1_000_003 + p.L


def stream_tokens(sw: SweepSettings, n_vocab: int, longest_new: int | None = None) -> list[int]:
    """The grid's one token stream: point (L, new) is stream[:L] then stream[L:L + new], so one cumulative
    pass reaches every point's prefix, and the server and the in-process driver see the same ids."""
    n = max(sw.Ls) + max(longest_new or 0, *sw.news)
    return filler_tokens(n, seed=sw.seed * 1_000_003 + 1, n_vocab=n_vocab)


def point_text_step(p: GridPoint, tokens: list[int]) -> Step:
    """The filler step of a text point, cut from the grid's token stream: the same ids for every arm."""
    return text_step(tokens[: p.L], tokens[p.L : p.L + p.new])


def measure_point(
    client: ContractClient,
    p: GridPoint,
    sw: SweepSettings,
    tokens: list[int],
    estimate: Callable[[GridPoint, int], PrefillTps],
    on_sample: Callable[[], None],
    geom: ImageGeometry | None = None,
    saved: str | None = None,
    warm_up: bool = False,
) -> tuple[list[SweepSample], list[PrefillTps], SweepPoint]:
    """The arms and the estimate of one point, one interleaved rep after another in a rotating order (no arm
    always goes first; drift on a shared machine hits every arm and the estimate alike), until the point is
    decided (after at least min_reps) or max_reps is reached. `saved`: the slot file of the point's really
    prefilled depth-L state (the genuine arm restores it; without one it prefills the prefix per rep); warm_up: an
    untimed server request before each rep's arms (after another process measured on the same cores)."""
    if p.image:
        assert geom is not None
        step = synthetic_image_step(client.srv, geom, p.L, p.new, p.size, point_seed(p, sw.seed) + p.new)
    else:
        step = point_text_step(p, tokens)
    warm = step if p.image else text_step(step.prefix, step.prompt[p.L : p.L + min(p.new, WARM_UP)])
    samples: list[SweepSample] = []
    tps: list[PrefillTps] = []
    slots: list[Arm] = [a for a in ARMS if a in sw.arms]

    def run(arm: Arm, rep: int) -> ArmResult:
        r = client.run_arm(arm, step, saved)
        if not r.ok and client.died(r):
            srv = client.srv
            raise ServerCrashed(
                f"llama-server died during {p.id} {arm} rep {rep} (exit "
                f"{srv.proc and srv.proc.returncode}); see {srv.log_path}"
            )
        return r

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
            client.run_arm("fake", warm, None)  # untimed, and a few tokens only: failures show in the timed arms
        for arm in slots[rep % len(slots) :] + slots[: rep % len(slots)]:
            if arm == "baseline" and sw.baseline_reps is not None and rep >= sw.baseline_reps:
                continue
            samples.append(sample_row(p, rep, run(arm, rep), geom))
            on_sample()
        walls[rep] = time.monotonic() - started
        point = summarize_point(p, samples, tps, sw.tolerance, geom)
        if rep + 1 >= sw.min_reps and decided(point, sw):
            break
    # what one more rep costs: the reps past the direct baseline's (all of them when it runs every rep)
    later = [
        w for r, w in walls.items() if sw.baseline_reps is None or r >= sw.baseline_reps or "baseline" not in sw.arms
    ]
    point.rep_s = median_interval(later or list(walls.values()), f"{p.id}/rep_s")
    return samples, tps, point


class ServerCrashed(LabError):
    pass


def done_points(run: RunFolder) -> dict[str, SweepPoint]:
    return run.finished_points(POINTS, SweepPoint, [(SAMPLES, SweepSample), (TPS, PrefillTps)])


def only_new(p: GridPoint, geom: ImageGeometry | None) -> int:
    """The tokens a point's step decodes: its text, plus its image's tokens (they cost like text tokens)."""
    return p.new + (image_counts(p, geom)[0] or 0)


class Sweep(Experiment):
    """The fake-prefix sweep over the grid L x new (x screenshot sizes)."""

    name = "sweep"

    def __init__(self) -> None:
        self.projector: Path | None = None
        self.geometry: ImageGeometry | None = None
        self.points: list[SweepPoint] = []
        self.driver: InstrumentInfo | None = None
        self.n_vocab = 0
        self.plan: Plan | None = None
        self.took_s = 0.0

    def params(self, settings: Settings) -> dict[str, Any]:
        return {
            "sweep": settings.sweep.model_dump(mode="json"),
            "server": settings.server.model_dump(mode="json"),
            "model": str(settings.model) if settings.model else None,
            "mmproj": str(settings.mmproj) if settings.mmproj else None,
        }

    def restore(self, settings: Settings, run: RunFolder) -> Settings:
        params = run.manifest().params
        return settings.model_copy(
            update={
                "sweep": SweepSettings.model_validate(params["sweep"]),
                "server": ServerSettings.model_validate(params["server"]),
                "model": Path(params["model"]) if params.get("model") else None,
                "mmproj": Path(params["mmproj"]) if params.get("mmproj") else None,
            }
        )

    def driver_news(self, settings: Settings) -> list[int]:
        return sorted({only_new(p, self.geometry) for p in grid(settings.sweep)})

    def prepare(self, settings: Settings, parts: Parts) -> None:
        assert parts.engine is not None and parts.model is not None
        if any(p.image for p in grid(settings.sweep)):
            self.projector = resolve_projector(settings)  # a missing projector leaves no run folder behind
            self.geometry = ImageGeometry.of_projector(self.projector)
        if "estimate" in settings.sweep.arms and settings.sweep.estimate_tool == "inproc":  # checked before a run
            self.driver, self.n_vocab = prepare_driver(
                parts.engine, settings, parts.model, self.driver_news(settings), fake=False, who="sweep"
            )

    def measure(self, sess: Session, console: Console) -> Outcome:
        settings, run = sess.settings, sess.run
        params = settings.sweep
        started = time.monotonic()
        done = done_points(run)
        news = self.driver_news(settings)
        fills = complete_fills(run, FILLS, settings, news)
        todo = [p for p in grid(params) if p.id not in done]
        if todo:
            with contextlib.ExitStack() as stack, progress_bar(console) as progress:
                # the vocabulary: the GGUF's, read when the driver was prepared, else the server's own
                tokens = stream_tokens(params, self.n_vocab, max(news)) if self.driver else []
                estimate = self.start_estimate(sess, stack, tokens, news, fills, progress)
                slots = None if self.projector else Path(stack.enter_context(scratch_dir(settings.cache_dir)))
                extra = [
                    *(["--mmproj", str(self.projector)] if self.projector else []),
                    *(["--slot-save-path", str(slots)] if slots else []),
                ]
                srv = stack.enter_context(sess.server(extra_args=extra))
                sess.record_server(srv)
                client = ContractClient(srv)
                tokens = tokens or stream_tokens(params, srv.n_vocab(), max(news))
                restore = slots and "genuine" in params.arms and params.genuine_prefix == "restore"
                states = SavedStates(client, console) if restore else None
                per_rep = len(params.arms)
                task = progress.add_task("sweep", total=len(todo) * params.min_reps * per_rep)
                for p in todo:
                    progress.update(task, description=f"L={p.L} new={p.new}" + (f" img={p.image}" if p.image else ""))
                    saved = states.of(point_text_step(p, tokens)) if states and not p.image else None
                    samples, tps, point = measure_point(
                        client, p, params, tokens, estimate, lambda: progress.advance(task), self.geometry, saved
                    )
                    tps += self.bench_check(sess, p)
                    point = summarize_point(p, samples, tps, params.tolerance, self.geometry, fills).model_copy(
                        update={"rep_s": point.rep_s}
                    )
                    more = (point.reps - params.min_reps) * per_rep  # adaptive reps beyond the plan
                    progress.update(task, total=(progress.tasks[-1].total or 0) + more)
                    run.append(SAMPLES, samples)
                    run.append(TPS, tps)
                    run.append(POINTS, [point])
                    done[p.id] = point
        self.points = [done[p.id] for p in grid(params)]
        self.took_s = time.monotonic() - started
        return Outcome(results=plan_results(self.plan, self.took_s))

    def start_estimate(
        self,
        sess: Session,
        stack: contextlib.ExitStack,
        tokens: list[int],
        news: list[int],
        fills: list[InprocFill],
        progress: Progress,
    ) -> Callable[[GridPoint, int], PrefillTps]:
        """The in-process driver for the estimate: its cumulative fill passes first (the baseline's prefix sums,
        and the depth-L states it restores), then per rep a chunk of only_new tokens at depth L."""
        if self.driver is None:
            return self.bench_estimate(sess) if "estimate" in sess.settings.sweep.arms else no_estimate
        run, logs = sess.run, sess.run.path / "logs"
        shutil.copyfile(SOURCE, run.path / "raw" / SOURCE.name)  # what measured the estimate: its source and build
        (run.path / "raw" / "inproc_driver.json").write_text(self.driver.model_dump_json(indent=2))
        file = logs / "inproc_tokens.txt"
        file.write_text(" ".join(map(str, tokens)) + "\n")
        cmd = sweep_driver_command(self.driver, sess.settings, sess.model, news, tokens=file, fake=False)
        driver = stack.enter_context(DriverSession(cmd, logs / "inproc.log", logs / "inproc.jsonl"))
        run.add_results(driver_meta=driver.meta)
        task = progress.add_task("fill passes", total=None)
        run_fills(driver, run, FILLS, fills, sess.settings.sweep.fill_passes)
        progress.update(task, total=1, completed=1)
        self.plan = plan_of_run(sess.settings, "server", fills, progress.console)

        def estimate(p: GridPoint, rep: int) -> PrefillTps:
            # the same chunk untimed first: the driver wakes after the server's requests with its caches cold,
            # while the server's arms follow one another (llama-bench, too, warms up first)
            n = only_new(p, self.geometry)
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

    def bench_estimate(self, sess: Session) -> Callable[[GridPoint, int], PrefillTps]:
        """sweep.estimate_tool = llama-bench: one `llama-bench -p only_new -d L -r bench_reps` call per estimate
        sample, which fills the depth once per call (the slow way, kept to compare against)."""
        sw, srv = sess.settings.sweep, sess.settings.server

        def estimate(p: GridPoint, rep: int) -> PrefillTps:
            row = measure_prefill_tps(
                sess.target,
                sess.engine,
                sess.model,
                [only_new(p, self.geometry)],
                [p.L],
                sw.bench_reps,
                srv.threads,
                srv.flash_attn,
                sess.run.path / "logs" / "llama-bench.log",
                cpu_list=srv.cpu_list,
            )[0]
            return row.model_copy(update={"point": p.id, "rep": rep})

        return estimate

    def bench_check(self, sess: Session, p: GridPoint) -> list[PrefillTps]:
        """llama-bench's own chunk at depth L, once, at the grid's two smallest L for its smallest new (text points;
        one depth fill per call): the independent cross-check shown beside the estimate."""
        sw, srv = sess.settings.sweep, sess.settings.server
        if not (sw.bench_check and "estimate" in sw.arms and sw.estimate_tool == "inproc"):
            return []
        if p.image or p.L not in sw.Ls[:2] or p.new != sw.news[0]:
            return []
        rows = measure_prefill_tps(
            sess.target,
            sess.engine,
            sess.model,
            [p.new],
            [p.L],
            sw.bench_reps,
            srv.threads,
            srv.flash_attn,
            sess.run.path / "logs" / "llama-bench.log",
            cpu_list=srv.cpu_list,
        )
        return [r.model_copy(update={"point": p.id, "rep": None}) for r in rows[:1]]

    def present(self, sess: Session, outcome: Outcome, console: Console) -> None:
        print_summary(console, self.points)
        if self.plan is not None:
            console.print(plan_line(self.plan, self.took_s), highlight=False)
        # the answer: the step with the cache vs re-prefilled, and where the newest profile says time goes
        host = sess.run.manifest().host
        steps = steps_of(self.points, host, sess.model.name, sess.run.path.name)
        profile = newest_profile(sess.settings.runs_dir, sess.parts.model_record.get("sha256", ""), host)
        profiles = [profile] if profile else []
        for t in headline_tables(steps, profiles):
            console.print(t)
        for line in summary_lines(steps, profiles):
            console.print(line, highlight=False)


def no_estimate(p: GridPoint, rep: int) -> PrefillTps:
    raise AssertionError("this sweep measures no estimate")


def run_sweep(settings: Settings, resume: RunFolder | None = None, console: Console | None = None) -> RunFolder:
    return run_experiment(Sweep(), settings, resume, console)
