"""`lab profile`: the per-node prefill profile at a list of depths, sorted into bands.

Each instrument process (lab/instrument) reaches every depth by a fake prefix (or, `profile.fill: real`, by the
cumulative pass) and times the same chunk FUSED and TIMED back to back, `reps` times; a llama-bench process
follows each, at the depths a real fill reaches. This module stores the per-node dump as compressed Parquet
(raw/profile_nodes.parquet), the walls and the band tables as JSONL, and derives: band ms/token vs depth (TIMED
share x FUSED chunk ms / chunk), the crossover depth where attn_core overtakes ffn_moe, the attention linear fit
(slope, R^2), the flat bands' coefficient of variation, TIMED / FUSED and FUSED / llama-bench per depth, and
(`profile.real_check`) fake / real depth per depth and band.
"""

from __future__ import annotations

import tempfile
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from lab.core.errors import UsageError
from lab.core.runs import RunError, RunFolder
from lab.core.schemas import BandDepth, ProfileSummary, ProfileWall
from lab.core.schemas.raw import (
    PROFILE_BAND_PROCESSES,
    PROFILE_BANDS,
    PROFILE_PREDICTED,
    PROFILE_SUMMARY,
    PROFILE_WALLS,
)
from lab.core.settings import Settings
from lab.core.settings_profile import ProfileSettings
from lab.experiments.profile.bench import (
    bench_process,
    decide_references,
    processes_without_bench,
    read_bench,
    undecided_references,
)
from lab.experiments.profile.checks import fake_vs_real
from lab.experiments.profile.derive import (
    AttnLayers,
    add_time_model,
    band_nodes,
    band_processes,
    derive,
    process_cells,
    too_wide,
)
from lab.experiments.profile.dump import (
    DUMP,
    keep_complete_processes,
    merge_part,
    parse_dump,
    run_instrument,
    write_parquet,
)
from lab.experiments.profile.efficiency import annotate, probe_shape
from lab.experiments.protocol import Experiment, OpenRun, Outcome, Processes, RunParts, Show, drain, run_experiment
from lab.instrument import HEADERS, SOURCE, InstrumentInfo, build_instrument, instrument_command
from lab.instrument.layout import LayoutError, check_layout
from lab.measure.cleanroom import CleanRoom, hold
from lab.measure.costmodel import CostModel, model_cost
from lab.measure.peaks import Peaks, measure_peaks
from lab.measure.timemodel import TimePrediction
from lab.models.hparams import HparamsError, model_hparams

NODES_PARQUET = "profile_nodes.parquet"


@dataclass
class Measured:
    """The complete processes a profile measured: the instrument's meta, walls and TIMED nodes, and what they
    derive to (per depth and band, and the summary)."""

    meta: dict[str, Any]
    walls: list[ProfileWall]
    nodes: list[dict[str, Any]]
    rows: list[BandDepth]
    summary: ProfileSummary


class Profile(Experiment):
    """The per-node prefill profile: the instrument's probes at each depth, sorted into bands."""

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
        self.layout = ""  # the layout comparison's line (with the real check)

    def restore_own(self, settings: Settings, params: dict[str, Any], run: RunFolder) -> Settings:
        if "server" not in params or "fill" not in params.get("profile", {}):
            raise RunError(f"{run.path.name}: a profile of an older format (its fill or server not recorded as now)")
        return settings

    def prepare(self, settings: Settings, parts: RunParts) -> None:
        assert parts.model is not None
        p = settings.profile
        try:
            h = model_hparams(parts.model)
        except HparamsError:
            h = None
        if h is not None and h.n_ctx_train and max(p.depths) + p.chunk > h.n_ctx_train:
            raise UsageError(
                f"profile.depths: depth {max(p.depths)} and a chunk of {p.chunk} pass {parts.model.name}'s context "
                f"of {h.n_ctx_train} tokens"
            )
        assert parts.engine is not None
        self.instrument = build_instrument(parts.engine, settings.cache_dir)  # a compile error creates no run
        try:  # the predictions beside the measurement; a model the cost model does not know is measured anyway
            self.cost = model_cost(parts.model, p.chunk)
        except HparamsError as e:
            self.no_cost = f"no prediction: {e}"
        if h is not None and h.count("sliding"):  # attn_core split: the full-attention layers grow, the window's stop
            kind = {"attention": "full", "sliding": "window"}
            self.layers = {il: kind[k] for il, k in enumerate(h.kinds) if k in kind}
            self.window = h.window
        if p.check_depth is not None and h is not None:  # what the kernels see, before any time is spent on it
            self.layout = self.check_layout(settings, parts)

    def check_layout(self, settings: Settings, parts: RunParts) -> str:
        """The layout comparison at the checked depths and the profile's chunk (lab.instrument.layout): its line,
        or a LayoutError naming the first difference (no run is created: a fake prefix the kernels see otherwise
        than a real one is no depth to time)."""
        assert parts.engine is not None and parts.model is not None
        p = settings.profile
        threads = p.threads or settings.server.threads
        with tempfile.TemporaryDirectory(prefix="lab-layout-") as work:
            report = check_layout(
                parts.engine,
                settings.cache_dir,
                parts.model,
                Path(work),
                (p.chunk,),
                threads,
                depths=p.bench_depths,
                kv=settings.server.kv_args,
            )
        if not report.ok:
            raise LayoutError(f"a fake prefix does not lay out as a restored hit: {report.first()}")
        return report.line()

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
            got = yield from self.processes_until_decided(sess, console, dump)
            write_parquet(got.nodes, run.path / "raw" / NODES_PARQUET)
            peaks = None
            if p.peaks and self.cost is not None:
                with console.status("probing this host's GEMM and memcpy peaks ..."):
                    threads = p.threads or settings.server.threads
                    peaks = measure_peaks(*probe_shape(self.cost), threads, settings.server.cpu_list)
        self.store(sess, dump, got, peaks)
        return Outcome(results={"instrument_meta": got.meta, **self.time_model_record()})

    def time_model_record(self) -> dict[str, Any]:
        """What the time model's closing table is printed again from (lab.experiments.answer, `lab show`): the
        prediction and the cost model's shape (the bands' names); nothing without a prediction."""
        if self.prediction is None or self.cost is None:
            return {}
        from lab.experiments.answer import cost_record

        return {"time_model": self.prediction.model_dump(mode="json"), "cost_model": cost_record(self.cost)}

    def processes_until_decided(self, sess: OpenRun, console: Console, dump: Path) -> Generator[int, None, Measured]:
        """profile.processes, and one more while a check is undecided or the crossover wider than profile.target
        (at most profile.max_processes); a resumed run keeps its complete processes and their llama-bench calls."""
        run, p = sess.run, sess.settings.profile
        done, want = keep_complete_processes(run, walls_per_process(p)), p.processes
        if p.bench_check and p.bench_depths:  # a resumed run: the llama-bench calls its complete processes lack
            for k in processes_without_bench(run, done):
                bench_process(sess, p, self.threads(sess), p.bench_depths, p.reps_per_process, k)
        if 0 < done < want:
            console.print(f"resuming: processes 0..{done - 1} are complete, running {done}..{want - 1}")
        while True:
            done = yield from self.run_processes(sess, console, dump, done, want)
            meta, walls, nodes = parse_dump(dump)
            nodes = band_nodes(nodes)
            rows, summary = derive(walls, nodes, p.chunk, self.layers, self.window)
            summary.fill, summary.reps, summary.bench_depths = p.fill, p.reps_per_process, p.bench_depths
            summary.layout = self.layout
            decide_references(summary, walls, read_bench(run), p.bench_tolerance, p.timed_tolerance)
            fake_vs_real(walls, nodes, summary, p.real_tolerance, self.layers)
            wide = undecided_references(summary) or too_wide(summary, p.target)
            if not wide or want >= (p.max_processes or p.processes):
                return Measured(meta, walls, nodes, rows, summary)
            want += 1
            console.print(f"after {done} processes {wide}: one more process (at most {p.max_processes})")

    def run_processes(
        self, sess: OpenRun, console: Console, dump: Path, done: int, want: int
    ) -> Generator[int, None, int]:
        """Instrument processes `done`..`want`-1 (a process is a level of variance of its own: the intervals'
        unit), each followed by its llama-bench process. Returns the complete processes the dump then holds."""
        run, p, inst = sess.run, sess.settings.profile, self.instrument
        assert inst is not None
        part, threads, per = dump.with_suffix(".part.jsonl"), self.threads(sess), walls_per_process(p)
        log = run.path / "logs" / "instrument.log"
        while done < want:
            cmd = instrument_command(
                inst,
                sess.model,
                part,
                chunk=p.chunk,
                depths=p.depths,
                fill=p.fill,
                reps=p.reps_per_process,
                process=done,
                threads=threads,
                threads_batch=p.threads_batch or threads,
                check_depth=p.check_depth,
                threadpool=p.threadpool,
                cpu_list=sess.settings.server.cpu_list,
                kv=sess.settings.server.kv_args,
            )
            try:
                run_instrument(cmd, log, console, want * per, done * per)
            finally:  # what the instrument wrote so far is kept for a resume
                merge_part(dump, part)
            before, done = done, keep_complete_processes(run, per)
            if done <= before:
                raise RunError(f"instrument process {before} did not complete; see {log}")
            if p.bench_check and p.bench_depths:  # llama-bench right after, so the host's drift reaches both sides
                bench_process(sess, p, threads, p.bench_depths, p.reps_per_process, before)
            yield before  # a process ends here (an interleaved run measures the other side's next)
        return done

    def threads(self, sess: OpenRun) -> int:
        return sess.settings.profile.threads or sess.settings.server.threads

    def store(
        self,
        sess: OpenRun,
        dump: Path,
        got: Measured,
        peaks: Peaks | None,
    ) -> None:
        """The profile's tables: per process and band, per depth and band with the cost model's prediction and the
        time model's, the walls, the summary; the raw dump goes (its Parquet file holds the same)."""
        run, p = sess.run, sess.settings.profile
        walls, nodes, rows, summary = got.walls, got.nodes, got.rows, got.summary
        process_rows = band_processes(process_cells(walls, nodes), p.chunk)
        if self.cost is not None:
            annotate(rows, summary, self.cost, peaks)
            self.prediction = add_time_model(
                summary, process_rows, self.cost, run.path.name, sess.model.name, p.predict_depths
            )
            run.rewrite(PROFILE_PREDICTED, self.prediction.at if self.prediction else [])
        else:
            summary.cost_model = self.no_cost
        summary.dump_json_bytes = dump.stat().st_size
        summary.dump_parquet_bytes = (run.path / "raw" / NODES_PARQUET).stat().st_size
        run.rewrite(PROFILE_WALLS, walls)
        run.rewrite(PROFILE_BANDS, rows)
        run.rewrite(PROFILE_BAND_PROCESSES, process_rows)
        run.rewrite(PROFILE_SUMMARY, [summary])
        dump.unlink()  # the Parquet file and the walls table hold the same content
        self.rows, self.summary = rows, summary

    def tables(self) -> dict[str, Any]:
        return {
            "bands": [r.model_dump(mode="json") for r in self.rows],
            "summary": self.summary.model_dump(mode="json") if self.summary else None,
            "predicted": [b.model_dump(mode="json") for b in self.prediction.at] if self.prediction else [],
        }


def walls_per_process(p: ProfileSettings) -> int:
    """The wall rows a complete instrument process writes: FUSED and TIMED per rep at every depth, and the
    fake-vs-real check's four per rep at every checked depth."""
    checked = len(p.bench_depths) if p.check_depth is not None else 0
    return p.reps_per_process * (2 * len(p.depths) + 4 * checked)


def run_profile(
    settings: Settings, resume: RunFolder | None = None, console: Console | None = None, show: Show | None = None
) -> RunFolder:
    return run_experiment(Profile(), settings, resume, console, show)
