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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from lab.engine.contract import ARMS, Arm, ArmResult, ContractClient, text_step
from lab.engine.imagegrid import ImageGeometry
from lab.engine.media import synthetic_image_step
from lab.engine.models import resolve_projector
from lab.engine.slots import SavedStates, scratch_dir
from lab.errors import LabError
from lab.experiments.planning import plan_line, plan_of_run, plan_results
from lab.experiments.prefill_tps import measure_prefill_tps
from lab.experiments.protocol import Experiment, Outcome, Parts, Session, progress_bar, run_experiment
from lab.experiments.sweep_grid import (
    GridPoint,
    grid,
    only_new,
    point_seed,
    point_text_step,
    stream_tokens,
)
from lab.experiments.sweep_points import decided, sample_row, summarize_point
from lab.fills import complete_fills, run_fills
from lab.headline import newest_profile, steps_of, summary_lines
from lab.inproc import SOURCE, DriverError, DriverSession, prepare_driver, sweep_driver_command
from lab.instrument import InstrumentInfo
from lab.plan import WARM_UP, Plan
from lab.presenters import headline_tables
from lab.presenters.sweep import print_summary
from lab.runs import RunFolder
from lab.schemas import InprocFill, PrefillTps, SweepPoint, SweepSample
from lab.settings import ServerSettings, Settings, SweepSettings
from lab.stats import median_interval

SAMPLES, POINTS, TPS, FILLS = "samples", "points", "prefill_tps", "fills"


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
    fills: list[InprocFill] | None = None,
    check: list[PrefillTps] | None = None,
) -> tuple[list[SweepSample], list[PrefillTps], SweepPoint]:
    """The arms and the estimate of one point, one interleaved rep after another in a rotating order (no arm
    always goes first; drift on a shared machine hits every arm and the estimate alike), until the point is
    decided (after at least min_reps) or max_reps is reached. `saved`: the slot file of the point's really
    prefilled depth-L state (the genuine arm restores it; without one it prefills the prefix per rep); warm_up: an
    untimed server request before each rep's arms (after another process measured on the same cores); fills and
    check: the run's fill passes and the point's llama-bench cross-check, measured before, for its summary."""
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
        if rep + 1 < sw.min_reps:  # no summary needed before min_reps: its bootstraps cost a cheap rep's time
            continue
        point = summarize_point(p, samples, tps + (check or []), sw.tolerance, geom, fills)
        if decided(point, sw):
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
                    check = self.bench_check(sess, p)
                    samples, tps, point = measure_point(
                        client,
                        p,
                        params,
                        tokens,
                        estimate,
                        lambda: progress.advance(task),
                        self.geometry,
                        saved,
                        fills=fills,
                        check=check,
                    )
                    tps += check
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
