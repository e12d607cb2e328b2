"""`lab sweep`: the fake-prefix sweep. Per (L, new) point, the fake prefix, the genuine hit and the estimate
interleaved and repeated, each rep costing its new tokens, against the arithmetic estimate opt_prefill =
only_new / prefill_tps(L); measured through llama-server (lab.experiments.sweep_server), in one process with
libllama (lab.experiments.sweep_inproc), or both at every point (`sweep.where`; `lab arms` is the sweep in one
process). One grid, one derivation (lab.experiments.sweep_points), one table family with a `where` column.

Lifecycle of a run (inside the protocol's run folder):
    1. the driver, once (when anything runs in one process, or the estimate): its cumulative fill passes give
       the baseline as prefix sums and the depth-L states; the plan is printed from their chunks
    2. the server, once (when anything runs through it), with a slot-save directory for the genuine arm
    3. point by point, in one process first, then through the server: interleaved reps until decided
    4. in one process: the cache read's summary over the grid (raw/arms_summary.json)

Resumable at point granularity: a point's samples and its summary row are appended together when the
point is done, so an interrupted sweep resumes with no duplicated or lost point.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Hashable
from pathlib import Path

from pydantic import BaseModel
from rich.console import Console
from rich.progress import Progress

from lab.engine.contract import ContractClient
from lab.engine.imagegrid import ImageGeometry
from lab.engine.server import mmproj_args
from lab.engine.slots import SavedStates, scratch_dir
from lab.errors import UsageError
from lab.experiments import sweep_inproc
from lab.experiments.planning import plan_of_run, plan_results
from lab.experiments.protocol import Experiment, OpenRun, Outcome, RunParts, progress_bar, run_experiment
from lab.experiments.sweep_grid import GridPoint, grid, only_new, point_text_step, stream_tokens
from lab.experiments.sweep_server import (
    Estimate,
    bench_check,
    bench_estimate,
    driver_estimate,
    measure_point,
    no_estimate,
)
from lab.fills import complete_fills, run_fills
from lab.headline import newest_profile, steps_of
from lab.inproc import SOURCE, DriverSession, prepare_driver, sweep_driver_command
from lab.instrument import HEADERS, InstrumentInfo
from lab.models.gguf_io import read_gguf_metadata
from lab.models.memshape import MemoryShape, memory_shape
from lab.models.resolve import resolve_projector
from lab.plan import Plan
from lab.presenters import print_headline
from lab.presenters.plan import plan_line
from lab.presenters.sweep import print_summary
from lab.runs import RunFolder
from lab.schemas import ArmsSummary, InprocFill, PrefillTps, SweepPoint, SweepSample, Where
from lab.settings import Settings, SweepSettings

SAMPLES, POINTS, TPS, FILLS, SUMMARY = "samples", "points", "prefill_tps", "fills", "arms_summary"


def point_key(row: BaseModel) -> tuple[str, str]:
    """A point's place and id (an estimate sample, which has no `where`, belongs to the server side)."""
    return (getattr(row, "where", "server"), getattr(row, "point", ""))


def done_points(run: RunFolder) -> dict[Hashable, SweepPoint]:
    return run.finished_points(POINTS, SweepPoint, [(SAMPLES, SweepSample), (TPS, PrefillTps)], point_key)


def all_failed(points: list[SweepPoint]) -> str:
    """Why a run is not complete although every point was measured: an arm that failed on every sample of a
    place (a verdict against it would rest on nothing). Empty when none did."""
    for where in ("inproc", "server"):
        mine = [p for p in points if p.where == where]
        for arm in ("baseline", "fake", "genuine", "plain"):
            stats = [getattr(p, arm) for p in mine]
            if stats and sum(a.n_failed for a in stats) and not sum(a.n_ok for a in stats):
                note = next((d for p in mine for d in p.diagnostics if "failed sample" in d), "")
                return f"every {arm} sample failed ({where}): {note or 'see the samples'}"
    return ""


def places(sw: SweepSettings) -> list[Where]:
    return ["inproc", "server"] if sw.where == "both" else [sw.where]


class Sweep(Experiment):
    """The fake-prefix sweep over the grid L x new (x screenshot sizes), through the server, in one process, or
    both at every point."""

    name = "sweep"
    records = ("sweep", "server", "model", "mmproj")

    def __init__(self) -> None:
        self.projector: Path | None = None
        self.geometry: ImageGeometry | None = None
        self.points: list[SweepPoint] = []
        self.summary: ArmsSummary | None = None
        self.driver: InstrumentInfo | None = None
        self.shape: MemoryShape | None = None
        self.n_vocab = 0
        self.plan: Plan | None = None
        self.took_s = 0.0

    def driver_news(self, settings: Settings) -> list[int]:
        return sorted({only_new(p, self.geometry) for p in grid(settings.sweep)})

    def todo(self, sw: SweepSettings, done: dict[Hashable, SweepPoint]) -> list[tuple[Where, GridPoint]]:
        """What is left to measure, point by point (in one process: the text points; the driver decodes ids)."""
        return [
            (where, p)
            for p in grid(sw)
            for where in places(sw)
            if (where, p.id) not in done and not (where == "inproc" and p.image)
        ]

    def prepare(self, settings: Settings, parts: RunParts) -> None:
        assert parts.engine is not None and parts.model is not None
        sw = settings.sweep
        if sw.where == "inproc" and sw.images != ["none"]:
            raise UsageError("the sweep in one process measures text steps: set sweep.images to none, or --where both")
        if any(p.image for p in grid(sw)):
            self.projector = resolve_projector(settings)  # a missing projector leaves no run folder behind
            self.geometry = ImageGeometry.of_projector(self.projector)
        inproc = sw.where != "server"
        # checked before a run folder exists: the model, the context, and the fake-prefix op of its memory type
        # (a model the fake prefix cannot serve, e.g. with sliding-window layers, is refused here in one line)
        driver, n_vocab = prepare_driver(
            parts.engine, settings, parts.model, self.driver_news(settings), fake=True, who="sweep"
        )
        if inproc or ("estimate" in sw.arms and sw.estimate_tool == "inproc"):
            self.driver, self.n_vocab = driver, n_vocab
        if inproc:
            self.shape = memory_shape(read_gguf_metadata(parts.model))

    def measure(self, sess: OpenRun, console: Console) -> Outcome:
        settings, run = sess.settings, sess.run
        sw = settings.sweep
        started = time.monotonic()
        done = done_points(run)
        news = self.driver_news(settings)
        fills = complete_fills(run, FILLS, settings, news)
        todo = self.todo(sw, done)
        if todo:
            with contextlib.ExitStack() as stack, progress_bar(console) as progress:
                # the vocabulary: the GGUF's, read when the driver was prepared, else the server's own
                tokens = stream_tokens(sw, self.n_vocab, max(news)) if self.driver else []
                driver = self.start_driver(sess, stack, tokens, news, fills, progress) if self.driver else None
                client, states = None, None
                if "server" in places(sw):
                    client, states = self.start_server(sess, stack, console)
                    tokens = tokens or stream_tokens(sw, client.srv.n_vocab(), max(news))
                estimate = self.estimate(sess, driver)
                by_point: dict[str, list[SweepSample]] = {}  # the in-process samples per point (server / in-proc)
                for smp in run.read(SAMPLES, SweepSample):
                    if smp.where == "inproc":
                        by_point.setdefault(smp.point, []).append(smp)
                per_rep = len(sw.arms)
                task = progress.add_task("sweep", total=len(todo) * sw.min_reps * per_rep)
                for where, p in todo:
                    label = f"{where} L={p.L} new={p.new}" + (f" img={p.image}" if p.image else "")
                    progress.update(task, description=label)
                    if where == "inproc":
                        assert driver is not None
                        samples, point = sweep_inproc.measure_point(driver, p, sw, fills, self.shape)
                        by_point[p.id] = samples
                        progress.advance(task, sw.min_reps * per_rep)
                        run.append(SAMPLES, samples)
                        run.append(POINTS, [point])
                    else:
                        assert client is not None
                        saved = states.of(point_text_step(p, tokens)) if states and not p.image else None
                        check = bench_check(sess, p)
                        samples, tps, point = measure_point(
                            client,
                            p,
                            sw,
                            tokens,
                            estimate,
                            lambda: progress.advance(task),
                            self.geometry,
                            saved,
                            warm_up=driver is not None,
                            fills=fills,
                            check=check,
                            inproc=by_point.get(p.id),
                        )
                        more = (point.reps - sw.min_reps) * per_rep  # adaptive reps beyond the plan
                        progress.update(task, total=(progress.tasks[-1].total or 0) + more)
                        run.append(SAMPLES, samples)
                        run.append(TPS, tps + check)
                        run.append(POINTS, [point])
                    done[(where, p.id)] = point
        self.points = [done[(w, p.id)] for p in grid(sw) for w in places(sw) if (w, p.id) in done]
        if "inproc" in places(sw):
            inproc_samples = [s for s in run.read(SAMPLES, SweepSample) if s.where == "inproc"]
            inproc_points = [p for p in self.points if p.where == "inproc"]
            self.summary = sweep_inproc.restore_summary(inproc_points, inproc_samples, fills, self.shape)
            (run.path / "raw" / f"{SUMMARY}.json").write_text(self.summary.model_dump_json(indent=2))
        self.took_s = time.monotonic() - started
        return Outcome(results=plan_results(self.plan, self.took_s), failure=all_failed(self.points))

    def start_driver(
        self,
        sess: OpenRun,
        stack: contextlib.ExitStack,
        tokens: list[int],
        news: list[int],
        fills: list[InprocFill],
        progress: Progress,
    ) -> DriverSession:
        """The in-process driver, once for the run: its cumulative fill passes first (the baseline's prefix sums,
        and the depth-L states its genuine arm and the estimate restore), then the plan from their chunks."""
        assert self.driver is not None
        run, logs, sw = sess.run, sess.run.path / "logs", sess.settings.sweep
        for src in (SOURCE, *HEADERS):  # what measured: the driver's source (with the shared header) and build
            shutil.copyfile(src, run.path / "raw" / src.name)
        (run.path / "raw" / "inproc_driver.json").write_text(self.driver.model_dump_json(indent=2))
        file = logs / "inproc_tokens.txt"
        file.write_text(" ".join(map(str, tokens)) + "\n")
        fake = sw.where != "server"
        cmd = sweep_driver_command(self.driver, sess.settings, sess.model, news, tokens=file, fake=fake)
        driver = stack.enter_context(DriverSession(cmd, logs / "inproc.log", logs / "inproc.jsonl"))
        run.add_results(driver_meta=driver.meta)
        task = progress.add_task("fill passes", total=None)
        run_fills(driver, run, FILLS, fills, sw.fill_passes)
        progress.update(task, total=1, completed=1)
        self.plan = plan_of_run(sess.settings, sw.where, fills, progress.console)
        return driver

    def start_server(
        self, sess: OpenRun, stack: contextlib.ExitStack, console: Console
    ) -> tuple[ContractClient, SavedStates | None]:
        """llama-server for the run, with a slot-save directory for the genuine arm's saved depth-L states."""
        sw = sess.settings.sweep
        slots = None if self.projector else Path(stack.enter_context(scratch_dir(sess.settings.cache_dir)))
        extra = [
            *mmproj_args(self.projector),
            *(["--slot-save-path", str(slots)] if slots else []),
        ]
        srv = stack.enter_context(sess.server(extra_args=extra))
        sess.record_server(srv)
        client = ContractClient(srv)
        restore = slots and "genuine" in sw.arms and sw.genuine_prefix == "restore"
        return client, SavedStates(client, console) if restore else None

    def estimate(self, sess: OpenRun, driver: DriverSession | None) -> Estimate:
        sw = sess.settings.sweep
        if "estimate" not in sw.arms or "server" not in places(sw):
            return no_estimate
        if sw.estimate_tool == "inproc" and driver is not None:
            return driver_estimate(driver, self.geometry)
        return bench_estimate(sess, self.geometry)

    def present(self, sess: OpenRun, outcome: Outcome, console: Console) -> None:
        print_summary(console, self.points, self.summary)
        if self.plan is not None:
            console.print(plan_line(self.plan, self.took_s), highlight=False)
        # the answer: the step with the cache vs re-prefilled, and where the newest profile says time goes
        host = sess.run.manifest().host
        server = [p for p in self.points if p.where == "server"]
        steps = steps_of(server, host, sess.model.name, sess.run.path.name)
        profile = newest_profile(sess.settings.runs_dir, sess.parts.model_record.get("sha256", ""), host)
        print_headline(console, steps, [profile] if profile else [])


def run_sweep(settings: Settings, resume: RunFolder | None = None, console: Console | None = None) -> RunFolder:
    return run_experiment(Sweep(), settings, resume, console)
