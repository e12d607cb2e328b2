"""`lab profile`: the per-node prefill profile of a cumulative depth sweep, sorted into bands.

The instrument (lab/instrument) writes JSON lines; this module stores the per-node dump as compressed
Parquet (raw/profile_nodes.parquet), the walls and per-depth band table as JSONL, and derives:
band ms/token vs depth (TIMED share x FUSED chunk ms / chunk), the crossover depth where attn_core
overtakes ffn_moe, the attention linear fit (slope, R^2), the flat bands' coefficient of variation, and
the TIMED-sum vs FUSED-wall gap per depth.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from lab.core.runs import RunError, RunFolder
from lab.core.schemas import BandDepth, ProfileSummary, ProfileWall
from lab.core.schemas.raw import PROFILE_BAND_CYCLES, PROFILE_BANDS, PROFILE_PREDICTED, PROFILE_SUMMARY, PROFILE_WALLS
from lab.core.settings import Settings
from lab.experiments.profile.bench import (
    bench_process,
    decide_references,
    processes_without_bench,
    read_bench,
    undecided_references,
)
from lab.experiments.profile.derive import (
    AttnLayers,
    add_time_model,
    band_cycles,
    band_nodes,
    cycle_cells,
    derive,
    too_wide,
)
from lab.experiments.profile.dump import (
    DUMP,
    keep_complete_cycles,
    merge_part,
    parse_dump,
    run_instrument,
    write_parquet,
)
from lab.experiments.profile.efficiency import annotate, probe_shape
from lab.experiments.protocol import Experiment, OpenRun, Outcome, Processes, RunParts, Show, drain, run_experiment
from lab.instrument import HEADERS, SOURCE, InstrumentInfo, build_instrument, instrument_command
from lab.measure.cleanroom import CleanRoom, hold
from lab.measure.costmodel import CostModel, model_cost
from lab.measure.peaks import Peaks, measure_peaks
from lab.measure.timemodel import TimePrediction
from lab.models.hparams import HparamsError, model_hparams

NODES_PARQUET = "profile_nodes.parquet"


@dataclass
class Cycles:
    """The complete cycles a profile measured: the instrument's meta, FUSED walls and TIMED nodes, and what they
    derive to (per depth and band, and the summary)."""

    meta: dict[str, Any]
    walls: list[ProfileWall]
    nodes: list[dict[str, Any]]
    rows: list[BandDepth]
    summary: ProfileSummary


class Profile(Experiment):
    """The per-node prefill profile: the instrument's cumulative depth sweep, sorted into bands."""

    name = "profile"
    records = ("profile", "server", "model")

    def __init__(self) -> None:
        self.instrument: InstrumentInfo | None = None
        self.cost: CostModel | None = None
        self.no_cost = ""  # why there is no cost model for this model
        self.layers: AttnLayers = {}  # a sliding-window model's attention layers by kind
        self.window: int | None = None
        self.rows: list[BandDepth] = []
        self.summary: ProfileSummary | None = None
        self.prediction: TimePrediction | None = None

    def restore_own(self, settings: Settings, params: dict[str, Any], run: RunFolder) -> Settings:
        if "server" not in params or "cycles_per_process" not in params.get("profile", {}):
            raise RunError(f"{run.path.name}: a profile of an older format (its server or cycles not recorded as now)")
        return settings

    def prepare(self, settings: Settings, parts: RunParts) -> None:
        assert parts.engine is not None
        self.instrument = build_instrument(parts.engine, settings.cache_dir)  # a compile error creates no run
        assert parts.model is not None
        try:  # the predictions beside the measurement; a model the cost model does not know is measured anyway
            self.cost = model_cost(parts.model, settings.profile.chunk)
        except HparamsError as e:
            self.no_cost = f"no prediction: {e}"
        try:
            h = model_hparams(parts.model)
        except HparamsError:
            return
        if h.count("sliding"):  # attn_core split: the full-attention layers grow with depth, the window's stop
            kind = {"attention": "full", "sliding": "window"}
            self.layers = {il: kind[k] for il, k in enumerate(h.kinds) if k in kind}
            self.window = h.window

    def measure(self, sess: OpenRun, console: Console) -> Outcome:
        return drain(self.processes(sess, console))

    def processes(self, sess: OpenRun, console: Console) -> Processes:
        """The instrument's processes, a step each, then the profile's tables."""
        settings, run, inst = sess.settings, sess.run, self.instrument
        assert inst is not None
        p = settings.profile
        for src in (SOURCE, *HEADERS):  # what measured: the instrument's source (with the shared header) and build
            run.write_raw(src.name, src.read_bytes())
        run.write_raw("instrument.json", inst.model_dump_json(indent=2))
        dump = run.table_path(DUMP)
        merge_part(dump, dump.with_suffix(".part.jsonl"))  # left by a hard-killed run
        room = CleanRoom(p.clean_room_stop, p.clean_room_start) if p.clean_room_stop and p.clean_room_start else None
        with hold(sess.shell, room, run):  # the instrument and the llama-bench cross-check, both in the room
            got = yield from self.cycles_until_narrow(sess, console, dump)
            write_parquet(got.nodes, run.path / "raw" / NODES_PARQUET)
            peaks = None
            if p.peaks and self.cost is not None:
                with console.status("probing this host's GEMM and memcpy peaks ..."):
                    threads = p.threads or settings.server.threads
                    peaks = measure_peaks(*probe_shape(self.cost), threads, settings.server.cpu_list)
        self.store(sess, dump, got, peaks)
        return Outcome(results={"instrument_meta": got.meta})

    def cycles_until_narrow(self, sess: OpenRun, console: Console, dump: Path) -> Generator[int, None, Cycles]:
        """profile.cycles, and one more while an interval is wider than profile.target or a reference is undecided
        (at most profile.max_cycles); a resumed run keeps its complete cycles and its llama-bench calls."""
        run, p = sess.run, sess.settings.profile
        n_depths = p.max_depth // p.chunk + 1
        done, want = keep_complete_cycles(run, n_depths), p.cycles
        if p.bench_check:  # a resumed run: the llama-bench calls its complete processes still lack
            for k, reps in processes_without_bench(run, done, p.cycles_per_process).items():
                bench_process(sess, p, self.threads(sess), self.bench_depths(sess), reps, k)
        if 0 < done < want:
            console.print(f"resuming: cycles 0..{done - 1} are complete, running {done}..{want - 1}")
        while True:
            done = yield from self.run_cycles(sess, console, dump, done, want)
            meta, walls, nodes = parse_dump(dump)
            walls = [w.model_copy(update={"process": w.cycle // p.cycles_per_process}) for w in walls]
            nodes = band_nodes(nodes)
            rows, summary = derive(walls, nodes, p.chunk, self.layers, self.window)
            decide_references(summary, walls, read_bench(run), p.bench_tolerance, p.timed_tolerance)
            wide = too_wide(summary, p.target) or undecided_references(summary)
            if not wide or want >= (p.max_cycles or p.cycles):
                return Cycles(meta, walls, nodes, rows, summary)
            want += 1
            console.print(f"after {done} cycles {wide}: one more cycle (at most {p.max_cycles})")

    def run_cycles(
        self, sess: OpenRun, console: Console, dump: Path, done: int, want: int
    ) -> Generator[int, None, int]:
        """Cycles `done`..`want`-1, spread over instrument processes (profile.cycles_per_process each: a process is
        a level of variance of its own, which cycles in one process would keep out of the intervals), each
        followed by its llama-bench call. Returns the complete cycles the dump then holds."""
        run, p, inst = sess.run, sess.settings.profile, self.instrument
        assert inst is not None
        n_depths, part, threads = p.max_depth // p.chunk + 1, dump.with_suffix(".part.jsonl"), self.threads(sess)
        log = run.path / "logs" / "instrument.log"
        while done < want:
            last = min(want, (done // p.cycles_per_process + 1) * p.cycles_per_process)
            cmd = instrument_command(
                inst,
                sess.model,
                part,
                chunk=p.chunk,
                max_depth=p.max_depth,
                cycles=last,
                threads=threads,
                threads_batch=p.threads_batch or threads,
                threadpool=p.threadpool,
                first_cycle=done,
                cpu_list=sess.settings.server.cpu_list,
                kv=sess.settings.server.kv_args,
            )
            try:
                run_instrument(cmd, log, console, want * 2 * n_depths, done * 2 * n_depths)
            finally:  # what the instrument wrote so far is kept for a resume
                merge_part(dump, part)
            before, done = done, keep_complete_cycles(run, n_depths)
            if done <= before:
                raise RunError(f"the instrument measured no complete cycle from cycle {before}; see {log}")
            k = before // p.cycles_per_process  # the process its cycles' rows carry
            if p.bench_check:  # llama-bench right after, so the host's drift reaches both sides
                bench_process(sess, p, threads, self.bench_depths(sess), done - before, k)
            yield k  # a process ends here (an interleaved run measures the other side's next)
        return done

    def threads(self, sess: OpenRun) -> int:
        return sess.settings.profile.threads or sess.settings.server.threads

    def bench_depths(self, sess: OpenRun) -> list[int]:
        p = sess.settings.profile
        return [d * p.chunk for d in range(p.max_depth // p.chunk + 1)]

    def store(
        self,
        sess: OpenRun,
        dump: Path,
        got: Cycles,
        peaks: Peaks | None,
    ) -> None:
        """The profile's tables: per cycle and band, per depth and band with the cost model's prediction and the
        time model's, the walls, the summary; the raw dump goes (its Parquet file holds the same)."""
        run, p = sess.run, sess.settings.profile
        walls, nodes, rows, summary = got.walls, got.nodes, got.rows, got.summary
        process_of = {w.cycle: w.process for w in walls}
        cycle_rows = [
            r.model_copy(update={"process": process_of.get(r.cycle, 0)})
            for r in band_cycles(cycle_cells(walls, nodes), p.chunk)
        ]
        if self.cost is not None:
            annotate(rows, summary, self.cost, peaks)
            self.prediction = add_time_model(
                summary, cycle_rows, self.cost, run.path.name, sess.model.name, p.predict_depths
            )
            run.rewrite(PROFILE_PREDICTED, self.prediction.at if self.prediction else [])
        else:
            summary.cost_model = self.no_cost
        summary.dump_json_bytes = dump.stat().st_size
        summary.dump_parquet_bytes = (run.path / "raw" / NODES_PARQUET).stat().st_size
        run.rewrite(PROFILE_WALLS, walls)
        run.rewrite(PROFILE_BANDS, rows)
        run.rewrite(PROFILE_BAND_CYCLES, cycle_rows)
        run.rewrite(PROFILE_SUMMARY, [summary])
        dump.unlink()  # the Parquet file and the walls table hold the same content
        self.rows, self.summary = rows, summary

    def tables(self) -> dict[str, Any]:
        return {
            "bands": [r.model_dump(mode="json") for r in self.rows],
            "summary": self.summary.model_dump(mode="json") if self.summary else None,
            "predicted": [b.model_dump(mode="json") for b in self.prediction.at] if self.prediction else [],
        }


def run_profile(
    settings: Settings, resume: RunFolder | None = None, console: Console | None = None, show: Show | None = None
) -> RunFolder:
    return run_experiment(Profile(), settings, resume, console, show)
