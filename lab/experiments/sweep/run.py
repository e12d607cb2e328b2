"""`lab sweep`: the fake-prefix sweep. Per (L, new) point, the fake prefix, the genuine hit and the estimate
interleaved and repeated, each rep costing its new tokens, against the arithmetic estimate opt_prefill =
only_new / prefill_tps(L); measured through llama-server (lab.experiments.sweep.server), in one process with
libllama (lab.experiments.sweep.inproc), or both at every point (`sweep.where`; `lab arms` is the sweep in one
process). One grid, one rep loop (lab.experiments.sweep.rounds), one derivation (lab.experiments.sweep.points),
one table family with a `where` column.

Lifecycle of a run (inside the protocol's run folder), in rounds of processes (sweep.processes at least):
    1. the round's driver (when anything runs in one process, or the estimate): a cumulative fill pass while
       the run has fewer than sweep.fill_passes (the baseline as prefix sums, its depth-L states, saved to files
       by the first), else the saved depth-L states read back; the plan is printed after the first pass
    2. the round's server (when anything runs through it), with the run's slot-save directory: the genuine
       arm's depth-L states are prefilled once per run and restored by every later process
    3. every open point, in one process first, then through the server: its reps for this round, interleaved
    4. after the last round, in one process: the cache read's summary over the grid (raw/arms_summary.json);
       through the server: its per-request share fitted over the grid (raw/server_share.json)

Resumable at (point, process) granularity (lab.experiments.sweep.rounds): an interrupted sweep resumes with no
duplicated or lost round.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from lab.core.console import progress_bar
from lab.core.errors import UsageError
from lab.core.gguf_io import read_gguf_metadata
from lab.core.runs import RunFolder
from lab.core.schemas import ArmsSummary, InprocFill, ServerShare, SweepPoint, Where
from lab.core.schemas.raw import ARMS_SUMMARY, PREFILL_TPS, SERVER_SHARE, SWEEP_FILLS, SWEEP_SAMPLES
from lab.core.settings import Settings, SweepSettings
from lab.engine.contract import ContractClient
from lab.engine.imagegrid import ImageGeometry
from lab.engine.server import LlamaServer, mmproj_args
from lab.engine.slots import SavedStates, scratch_dir
from lab.experiments.protocol import (
    Experiment,
    OpenRun,
    Outcome,
    Processes,
    RunParts,
    drain,
    run_experiment,
)
from lab.experiments.sweep.estimate import (
    Estimate,
    batch_chunk,
    bench_check,
    bench_estimate,
    driver_estimate,
    no_estimate,
)
from lab.experiments.sweep.grid import GridPoint, grid, only_new, stream_tokens
from lab.experiments.sweep.inproc import InprocPlace, restore_summary
from lab.experiments.sweep.planning import measured_before, plan_after, plan_of_run, plan_results
from lab.experiments.sweep.rounds import Ledger, Place, done_points
from lab.experiments.sweep.server import ServerPlace
from lab.experiments.sweep.share import share_fit
from lab.inproc import SOURCE, DriverSession, prepare_driver, sweep_driver_command
from lab.instrument import HEADERS, InstrumentInfo
from lab.measure.fills import complete_fills, run_fill
from lab.measure.plan import Plan
from lab.models.memshape import MemoryShape, memory_shape
from lab.models.resolve import resolve_projector


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


@dataclass
class Scratch:
    """What outlives one of the run's processes: the server's slot-save directory (None with a projector, which
    refuses slot saves), the driver's state files, and the grid's token stream."""

    slots: Path | None
    states: Path
    tokens: list[int]


def places_of(sw: SweepSettings) -> list[Where]:
    return ["inproc", "server"] if sw.where == "both" else [sw.where]


class Sweep(Experiment):
    """The fake-prefix sweep over the grid L x new (x screenshot sizes), through the server, in one process, or
    both at every point."""

    name = "sweep"
    records = ("sweep", "server", "model", "mmproj")
    holds_progress = True

    def __init__(self) -> None:
        self.projector: Path | None = None
        self.geometry: ImageGeometry | None = None
        self.points: list[SweepPoint] = []
        self.summary: ArmsSummary | None = None
        self.share: ServerShare | None = None  # the server's per-request share over the grid
        self.driver: InstrumentInfo | None = None
        self.after: Plan | None = None  # the plan once the run's first processes are in
        self.shape: MemoryShape | None = None
        self.n_vocab = 0
        self.plan: Plan | None = None
        self.saved: SavedStates | None = None  # the run's saved depth-L slot files, made once
        self.took_s = 0.0

    def driver_news(self, settings: Settings) -> list[int]:
        """The chunk sizes the driver times: every point's only_new, and the batch-size reference."""
        batch = batch_chunk(settings)
        return sorted({only_new(p, self.geometry) for p in grid(settings.sweep)} | ({batch} if batch else set()))

    def todo(self, sw: SweepSettings, done: dict[Hashable, SweepPoint]) -> list[tuple[Where, GridPoint]]:
        """What is left to measure, point by point (in one process: the text points; the driver decodes ids)."""
        return [
            (where, p)
            for p in grid(sw)
            for where in places_of(sw)
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
        return drain(self.processes(sess, console))

    def processes(self, sess: OpenRun, console: Console) -> Processes:
        """The run's processes, a step each (see the lifecycle above), then the grid's summary."""
        settings, run = sess.settings, sess.run
        sw = settings.sweep
        started = time.monotonic()
        done, kept = done_points(run)
        news = self.driver_news(settings)
        fills = complete_fills(run, SWEEP_FILLS, settings, news)
        book = Ledger(sw, run, kept, fills)
        todo = self.todo(sw, done)
        if todo:
            with contextlib.ExitStack() as run_long:
                progress = self.progress or run_long.enter_context(progress_bar(console))
                slots = None if self.projector else Path(run_long.enter_context(scratch_dir(settings.cache_dir)))
                states = Path(run_long.enter_context(scratch_dir(settings.cache_dir)))
                tokens = stream_tokens(sw, self.n_vocab, max(news)) if self.driver else []
                scratch = Scratch(slots, states, tokens)
                task = progress.add_task(f"{self.label}sweep", total=book.planned(todo))
                process = first = book.next_process()
                while todo:
                    progress.update(task, description=f"{self.label}process {process + 1}")
                    with contextlib.ExitStack() as stack:
                        t0, filled = time.monotonic(), sum(f.ms for f in fills) / 1e3
                        at = self.open_process(sess, stack, book, scratch, process, progress)
                        # what starting it took, less its fill pass (the baseline's sample, measured)
                        book.starts.append(time.monotonic() - t0 - (sum(f.ms for f in fills) / 1e3 - filled))
                        if self.plan is None and self.driver:  # the plan, from the first fill pass's chunks
                            host, sha = run.manifest().host, sess.parts.model_record.get("sha256", "")
                            before = measured_before(settings.runs_dir, sha, host, sw.where)
                            self.plan = plan_of_run(
                                settings, sw.where, fills, progress.console, book.starts[-1], before
                            )
                        for where, p in book.this_round(todo, process):
                            if where == "server" and p.id not in book.checks:
                                book.add_check(p, bench_check(sess, p), process)
                            point = book.measure(at[where], p, process, progress, task)
                            if point is not None:
                                done[(where, p.id)] = point
                    ended, process = process, process + 1
                    todo = self.todo(sw, done)
                    if todo and self.plan is not None and self.after is None and process - first == sw.processes:
                        samples = {str(w): [s for ss in book.samples[w].values() for s in ss] for w in places_of(sw)}
                        now = [*done.values(), *book.last.values()]
                        self.after = plan_after(settings, self.plan, samples, now, progress.console)
                    paused = time.monotonic()
                    yield ended  # a process ends here (an interleaved run measures the other side's next)
                    started += time.monotonic() - paused  # its own time, not the other side's
                if self.progress is not None:
                    progress.update(task, visible=False)
        self.points = [done[(w, p.id)] for p in grid(sw) for w in places_of(sw) if (w, p.id) in done]
        self.summarize_grid(run, sw, fills)
        self.took_s = time.monotonic() - started
        results = plan_results(self.plan, self.took_s, self.after)
        if book.starts:
            results["process_start_s"] = book.starts
        return Outcome(results=results, failure=all_failed(self.points))

    def summarize_grid(self, run: RunFolder, sw: SweepSettings, fills: list[InprocFill]) -> None:
        """Over the grid: in one process the cache read's summary, through the server its per-request share."""
        if "inproc" in places_of(sw):
            inproc_samples = [s for s in run.read(SWEEP_SAMPLES) if s.where == "inproc"]
            inproc_points = [p for p in self.points if p.where == "inproc"]
            self.summary = restore_summary(inproc_points, inproc_samples, fills, self.shape)
            run.rewrite(ARMS_SUMMARY, [self.summary])
        if "server" in places_of(sw) and "estimate" in sw.arms and "genuine" in sw.arms:
            self.share = share_fit(self.points, run.read(SWEEP_SAMPLES), run.read(PREFILL_TPS))
            if self.share is not None:
                run.rewrite(SERVER_SHARE, [self.share])

    def open_process(
        self, sess: OpenRun, stack: contextlib.ExitStack, book: Ledger, scratch: Scratch, process: int, bar: Progress
    ) -> dict[Where, Place]:
        """One of the run's processes: the driver (when anything runs in one process, or the estimate) and the
        server (when anything runs through it), each place's reps to be measured in them."""
        sw, news = sess.settings.sweep, self.driver_news(sess.settings)
        places: dict[Where, Place] = {}
        driver = None
        early = None  # a process that measures nothing while starting loads the server beside the driver
        if "server" in places_of(sw) and self.driver and not needs_fill(book.fills, scratch.states, sw):
            early = self.launch_server(sess, stack, scratch.slots)
        if self.driver:
            driver = self.start_driver(sess, stack, scratch.tokens, news, book.fills, scratch.states, process, bar)
        if driver is not None and "inproc" in places_of(sw):
            places["inproc"] = InprocPlace(driver, sw, book.fills, self.shape)
        if "server" in places_of(sw):
            client = self.start_server(sess, early or self.launch_server(sess, stack, scratch.slots))
            scratch.tokens = scratch.tokens or stream_tokens(sw, client.srv.n_vocab(), max(news))
            if self.saved is None and scratch.slots and "genuine" in sw.arms and sw.genuine_prefix == "restore":
                self.saved = SavedStates(client, bar.console)
            if self.saved is not None:
                self.saved.client = client  # the run's slot files, restored by this new process
            estimate = self.estimate(sess, driver)
            places["server"] = ServerPlace(
                client,
                sw,
                scratch.tokens,
                estimate,
                self.geometry,
                self.saved,
                warm_up=driver is not None,
                fills=book.fills,
                checks=book.checks,
                inproc=book.samples["inproc"],
            )
        return places

    def start_driver(
        self,
        sess: OpenRun,
        stack: contextlib.ExitStack,
        tokens: list[int],
        news: list[int],
        fills: list[InprocFill],
        states_dir: Path,
        process: int,
        progress: Progress,
    ) -> DriverSession:
        """The in-process driver of one of the run's processes. Until the run has sweep.fill_passes cumulative
        fill passes, each process makes one (the baseline's prefix sums, and this process's depth-L states); a
        later process reads the depth-L states the first one saved (a read, not a prefill). The plan is printed
        from the first pass's chunks."""
        assert self.driver is not None
        run, logs, sw = sess.run, sess.run.path / "logs", sess.settings.sweep
        if not (run.path / "raw" / "inproc_driver.json").exists():
            for src in (SOURCE, *HEADERS):  # what measured: the driver's source (with the shared header) and build
                run.write_raw(src.name, src.read_bytes())
            run.write_raw("inproc_driver.json", self.driver.model_dump_json(indent=2))
        file = logs / "inproc_tokens.txt"
        file.write_text(" ".join(map(str, tokens)) + "\n")
        fake = sw.where != "server"
        cmd = sweep_driver_command(self.driver, sess.settings, sess.model, news, tokens=file, fake=fake)
        driver = stack.enter_context(DriverSession(cmd, logs / "inproc.log", logs / "inproc.jsonl"))
        run.add_results(driver_meta=driver.meta)
        have_states = any(states_dir.glob("*.state"))
        if needs_fill(fills, states_dir, sw):
            task = progress.add_task("fill pass", total=None)
            run_fill(driver, run, SWEEP_FILLS, fills, process)
            progress.update(task, total=1, completed=1, visible=False)
            if not have_states:
                driver.call(f"save {states_dir}")
        else:
            driver.call(f"load {states_dir}")
        return driver

    def launch_server(self, sess: OpenRun, stack: contextlib.ExitStack, slots: Path | None) -> LlamaServer:
        """llama-server for one of the run's processes (the run's slot-save directory for the genuine arm),
        launched and stopped with the process, not yet waited for."""
        extra = [*mmproj_args(self.projector), *(["--slot-save-path", str(slots)] if slots else [])]
        srv = sess.server(extra_args=extra)
        stack.callback(srv.stop)
        srv.launch()
        return srv

    def start_server(self, sess: OpenRun, srv: LlamaServer) -> ContractClient:
        srv.start()  # waits until it is healthy
        sess.record_server(srv)
        return ContractClient(srv)

    def estimate(self, sess: OpenRun, driver: DriverSession | None) -> Estimate:
        sw = sess.settings.sweep
        if "estimate" not in sw.arms or "server" not in places_of(sw):
            return no_estimate
        if sw.estimate_tool == "inproc" and driver is not None:
            return driver_estimate(driver, self.geometry)
        return bench_estimate(sess, self.geometry)

    def tables(self) -> dict[str, Any]:
        return {
            "points": [p.model_dump(mode="json") for p in self.points],
            "summary": self.summary.model_dump(mode="json") if self.summary else None,
        }


def needs_fill(fills: list[InprocFill], states_dir: Path, sw: SweepSettings) -> bool:
    """Whether this process's driver makes a fill pass (the run has fewer than sweep.fill_passes, or no saved
    depth-L states yet) rather than reading the states back."""
    return len({f.fill_pass for f in fills}) < sw.fill_passes or not any(states_dir.glob("*.state"))


def run_sweep(settings: Settings, resume: RunFolder | None = None, console: Console | None = None) -> RunFolder:
    return run_experiment(Sweep(), settings, resume, console)
