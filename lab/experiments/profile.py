"""`lab profile`: the per-node prefill profile of a cumulative depth sweep, sorted into bands.

The instrument (lab/instrument) writes JSON lines; this module stores the per-node dump as compressed
Parquet (raw/profile_nodes.parquet), the walls and per-depth band table as JSONL, and derives:
band ms/token vs depth (TIMED share x FUSED chunk ms / chunk), the crossover depth where attn_core
overtakes ffn_moe, the attention linear fit (slope, R^2), the flat bands' coefficient of variation, and
the TIMED-sum vs FUSED-wall gap per depth.
"""

from __future__ import annotations

import itertools
import json
import shutil
import statistics
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lab.cleanroom import CleanRoom, hold
from lab.costmodel import CostModel, model_cost
from lab.engine.hparams import HparamsError
from lab.engine.server import die_with_parent
from lab.experiments.bands import Node, classify_all, resolve_layers
from lab.experiments.efficiency import annotate, probe_shape
from lab.experiments.prefill_tps import measure_prefill_tps
from lab.experiments.profile_rates import BAND_CYCLES
from lab.experiments.protocol import Experiment, Outcome, Parts, Session, progress_bar, run_experiment
from lab.instrument import HEADERS, SOURCE, InstrumentInfo, build_instrument, instrument_command
from lab.peaks import measure_peaks
from lab.presenters import time_tables
from lab.runs import RunError, RunFolder, atomic_write
from lab.schemas import BANDS, BandCycle, BandDepth, Interval, ProfileSummary, ProfileWall
from lab.settings import ProfileSettings, Settings
from lab.stats import from_draws, linear_fit, median_interval, resamples
from lab.timemodel import TimePrediction, fit, predict

WALLS, BANDS_TABLE, BENCH, PREDICTED = "profile_walls", "profile_bands", "prefill_tps", "profile_predicted"
NODES_PARQUET = "profile_nodes.parquet"


def node_table_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("cycle", pa.int16()), ("depth", pa.int32()), ("name", pa.string()), ("op", pa.string()),
            ("src0", pa.string()), ("layer", pa.int16()), ("band", pa.string()),
            ("ne0", pa.int64()), ("ne1", pa.int64()), ("ne2", pa.int64()), ("ne3", pa.int64()),
            ("ms", pa.float64()), ("calls", pa.int32()),
        ]
    )  # fmt: skip


def parse_dump(path: Path) -> tuple[dict[str, Any], list[ProfileWall], list[dict[str, Any]]]:
    meta: dict[str, Any] = {}
    walls: list[ProfileWall] = []
    nodes: list[dict[str, Any]] = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise RunError(f"{path}:{i}: bad instrument line: {e}") from e
        kind = row.pop("kind")
        if kind == "meta":
            meta = row
        elif kind in ("fused", "timed"):
            walls.append(ProfileWall(mode=kind, **row))
        else:
            nodes.append(row)
    return meta, walls, nodes


def band_nodes(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add layer and band to every node row; CoverageError (listing nodes) unless 100% covered."""
    by_graph: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in nodes:
        by_graph[(r["cycle"], r["depth"])].append(r)
    for rows in by_graph.values():
        graph = [Node(r["name"], r["op"], r["src0"]) for r in rows]
        bands = classify_all(graph)
        layers = resolve_layers(graph)
        for r, n in zip(rows, graph, strict=True):
            r["band"] = bands[n]
            r["layer"] = layers.get(n.name)
    return nodes


def write_parquet(nodes: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: dict[str, list[Any]] = {f.name: [] for f in node_table_schema()}
    for r in nodes:
        for k in ("cycle", "depth", "name", "op", "src0", "layer", "band", "ms", "calls"):
            cols[k].append(r.get(k))
        for j in range(4):
            cols[f"ne{j}"].append(r["ne"][j])
    table = pa.Table.from_pydict(cols, schema=node_table_schema())
    pq.write_table(table, path, compression="zstd", compression_level=9)


Cells = tuple[dict[tuple[int, int], float], dict[tuple[int, str, int], float], list[int]]


def too_wide(s: ProfileSummary, target: float) -> str:
    """Why the profile's intervals call for another cycle ('' when they are narrow enough): the TIMED/FUSED gap
    at some depth, or the crossover depth, wider than +-target."""
    wide = [d for d, iv in s.timed_vs_fused_gap_ci.items() if iv.half_width > target]
    if wide:
        return f"the TIMED/FUSED gap is wider than +-{target:.0%} at depth {', '.join(wide[:4])}"
    if s.crossover_ci is not None and s.crossover_ci.half_width > target:
        return f"the crossover {s.crossover_ci.fmt(digits=0)} is wider than +-{target:.0%}"
    return ""


def cycle_cells(walls: list[ProfileWall], nodes: list[dict[str, Any]]) -> Cells:
    """(FUSED ms per (depth, cycle), TIMED band ms per (depth, band, cycle), the cycles)."""
    fused = {(w.depth, w.cycle): w.ms for w in walls if w.mode == "fused"}
    band_ms: dict[tuple[int, str, int], float] = defaultdict(float)
    for r in nodes:
        band_ms[(r["depth"], r["band"], r["cycle"])] += r["ms"]
    return fused, band_ms, sorted({r["cycle"] for r in nodes})


def band_cycles(cells: Cells, chunk: int) -> list[BandCycle]:
    """Each band's ms/token in each cycle on its own (the samples a comparison of two profiles rests on)."""
    fused, band_ms, _ = cells
    out = []
    for depth, c in sorted(fused):
        total = sum(band_ms[(depth, b, c)] for b in BANDS)
        for b in BANDS:
            share = band_ms[(depth, b, c)] / total if total else 0.0
            out.append(BandCycle(cycle=c, depth=depth, band=b, timed_ms=band_ms[(depth, b, c)],
                                 ms_per_token=share * fused[(depth, c)] / chunk))  # fmt: skip
    return out


def derive_for(cells: Cells, cycles: list[int], chunk: int) -> tuple[list[BandDepth], dict[int, float]]:
    """Band rows and TIMED/FUSED gaps per depth from the medians over `cycles` (repeats allowed: a resample)."""
    fused, band_ms, _ = cells
    rows: list[BandDepth] = []
    gaps: dict[int, float] = {}
    for depth in sorted({d for d, _ in fused}):
        per_band = {b: statistics.median(band_ms[(depth, b, c)] for c in cycles) for b in BANDS}
        total = sum(per_band.values())
        fused_ms = statistics.median(fused[(depth, c)] for c in cycles if (depth, c) in fused)
        gaps[depth] = total / fused_ms - 1
        for b in BANDS:
            share = per_band[b] / total if total else 0.0
            rows.append(
                BandDepth(
                    depth=depth, band=b, timed_ms=per_band[b], share=share,
                    fused_chunk_ms=fused_ms, ms_per_token=share * fused_ms / chunk,
                )
            )  # fmt: skip
    return rows, gaps


def derive(walls: list[ProfileWall], nodes: list[dict[str, Any]], chunk: int) -> tuple[list[BandDepth], ProfileSummary]:
    """The per-depth band table and the summary from the medians over cycles, each number with its interval
    from a bootstrap over cycles (a resample draws whole cycles: a cycle's passes ran back to back)."""
    cells = cycle_cells(walls, nodes)
    cycles = cells[2]
    rows, gaps = derive_for(cells, cycles, chunk)
    summary = summarize(rows, gaps)
    boot_rows, boot_sums = [], []
    for idx in resamples(len(cycles), f"profile/{chunk}", count=400):
        b_rows, b_gaps = derive_for(cells, [cycles[i] for i in idx], chunk)
        boot_rows.append({(x.depth, x.band): x.ms_per_token for x in b_rows})
        boot_sums.append(summarize(b_rows, b_gaps))
    n = len(cycles)
    for row in rows:
        iv = from_draws(row.ms_per_token, [b[(row.depth, row.band)] for b in boot_rows], n)
        row.ms_per_token_lo, row.ms_per_token_hi = (iv.lo, iv.hi) if iv else (None, None)
    for d, gap in gaps.items():  # as the ratio TIMED / FUSED
        iv = from_draws(1 + gap, [1 + b.timed_vs_fused_gap[str(d)] for b in boot_sums], n)
        if iv is not None:
            summary.timed_vs_fused_gap_ci[str(d)] = iv
    if summary.crossover_depth is not None:
        summary.crossover_ci = from_draws(
            summary.crossover_depth, [b.crossover_depth for b in boot_sums if b.crossover_depth is not None], n
        )
    summary.attn_slope_ci = from_draws(
        summary.attn_slope_ms_per_token_per_1k, [b.attn_slope_ms_per_token_per_1k for b in boot_sums], n
    )
    summary.attn_r2_ci = from_draws(summary.attn_r2, [b.attn_r2 for b in boot_sums], n)
    summary.cycles = n
    return rows, summary


def summarize(rows: list[BandDepth], gaps: dict[int, float]) -> ProfileSummary:
    per = {(r.depth, r.band): r.ms_per_token for r in rows}
    depths = sorted({r.depth for r in rows})
    crossover: float | None = None
    for d0, d1 in itertools.pairwise(depths):
        a0, f0 = per[(d0, "attn_core")], per[(d0, "ffn_moe")]
        a1, f1 = per[(d1, "attn_core")], per[(d1, "ffn_moe")]
        if a0 <= f0 and a1 > f1:
            t = (f0 - a0) / ((a1 - a0) - (f1 - f0))  # where the two lines meet between d0 and d1
            crossover = d0 + t * (d1 - d0)
            break
    if crossover is None and depths and per[(depths[0], "attn_core")] > per[(depths[0], "ffn_moe")]:
        crossover = float(depths[0])
    xs = [float(d) for d in depths]
    ys = [per[(d, "attn_core")] for d in depths]
    slope, intercept, r2 = linear_fit(xs, ys)
    cv = {}
    for b in ("ffn_moe", "proj", "gdn", "other"):
        vals = [per[(d, b)] for d in depths]
        mean = statistics.fmean(vals)
        cv[b] = statistics.pstdev(vals) / mean if mean else 0.0
    return ProfileSummary(
        max_depth=depths[-1] if depths else 0,
        crossover_depth=crossover,
        crossover_note=f"{crossover:.0f}"
        if crossover is not None
        else f"not reached by depth {depths[-1] if depths else 0}",
        attn_slope_ms_per_token_per_1k=slope * 1000,
        attn_intercept_ms_per_token=intercept,
        attn_r2=r2,
        flat_cv=cv,
        timed_vs_fused_gap={str(d): g for d, g in gaps.items()},
        timed_vs_fused_gap_mean=statistics.fmean(gaps.values()) if gaps else 0.0,
    )


def merge_part(dump: Path, part: Path) -> None:
    """Append what one instrument run wrote (`part`) to the run's dump, whole lines only (a killed instrument's
    torn last line would otherwise sit in the middle of the dump once the resumed run appends after it and
    block every later resume); the dump keeps a single meta line."""
    if not part.exists():
        return
    new = part.read_text()
    new = new[: new.rfind("\n") + 1]
    if dump.exists() and dump.stat().st_size:
        new = new.split("\n", 1)[1] if "\n" in new else ""
    with dump.open("a") as fh:
        fh.write(new)
    part.unlink()


def keep_complete_cycles(dump: Path, n_depths: int) -> int:
    """Cut an interrupted instrument dump back to its complete cycles (both passes at every depth; a torn
    last line is dropped) and return how many there are. Cycles are written in order, so they are 0..k-1."""
    if not dump.exists():
        return 0
    lines = dump.read_text().splitlines()
    parsed: list[tuple[str, dict[str, Any]]] = []
    for i, line in enumerate(lines):
        try:
            parsed.append((line, json.loads(line)))
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                break  # torn tail of a killed writer
            raise RunError(f"{dump}:{i + 1}: bad instrument line: {e}") from e
    walls: dict[int, int] = defaultdict(int)
    for _, row in parsed:
        if row["kind"] in ("fused", "timed"):
            walls[row["cycle"]] += 1
    done = 0
    while walls.get(done) == 2 * n_depths:
        done += 1
    # keep walls of complete cycles; a TIMED wall precedes its nodes, so also drop nodes past the last wall
    kept = [line for line, row in parsed if row["kind"] == "meta" or row.get("cycle", done) < done]
    atomic_write(dump, "".join(f"{line}\n" for line in kept))
    return done


def run_instrument(cmd: list[str], log_path: Path, console: Console, n_steps: int, done_steps: int) -> None:
    """Run the instrument with a progress bar fed by its `progress` lines; never leave it running."""
    with log_path.open("a") as log, progress_bar(console) as progress:
        task = progress.add_task("profile", total=n_steps, completed=done_steps)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
        assert proc.stderr is not None
        try:
            for line in proc.stderr:
                log.write(line)
                if line.startswith("progress "):
                    progress.update(task, advance=1, description=line.split(" ", 1)[1].rsplit(" ms=", 1)[0])
            rc = proc.wait()
        finally:
            if proc.poll() is None:  # interrupted
                proc.kill()
                proc.wait()
    if rc != 0:
        raise RunError(f"the instrument failed ({rc}); see {log_path}")


class Profile(Experiment):
    """The per-node prefill profile: the instrument's cumulative depth sweep, sorted into bands."""

    name = "profile"

    def __init__(self) -> None:
        self.instrument: InstrumentInfo | None = None
        self.cost: CostModel | None = None
        self.no_cost = ""  # why there is no cost model for this model
        self.rows: list[BandDepth] = []
        self.summary: ProfileSummary | None = None
        self.prediction: TimePrediction | None = None

    def params(self, settings: Settings) -> dict[str, Any]:
        p = settings.profile
        return {
            "profile": p.model_dump(mode="json"),
            "threads": p.threads or settings.server.threads,
            "cpu_list": settings.server.cpu_list,
            "model": str(settings.model) if settings.model else None,
        }

    def restore(self, settings: Settings, run: RunFolder) -> Settings:
        params = run.manifest().params
        return settings.model_copy(
            update={
                "profile": ProfileSettings.model_validate(params["profile"]),
                "server": settings.server.model_copy(
                    update={"threads": params["threads"], "cpu_list": params.get("cpu_list")}
                ),
                "model": Path(params["model"]) if params.get("model") else None,
            }
        )

    def prepare(self, settings: Settings, parts: Parts) -> None:
        assert parts.engine is not None
        self.instrument = build_instrument(parts.engine, settings.cache_dir)  # a compile error creates no run
        assert parts.model is not None
        try:  # the predictions beside the measurement; a model the cost model does not know is measured anyway
            self.cost = model_cost(parts.model, settings.profile.chunk)
        except HparamsError as e:
            self.no_cost = f"no prediction: {e}"

    def measure(self, sess: Session, console: Console) -> Outcome:
        settings, run, inst = sess.settings, sess.run, self.instrument
        assert inst is not None
        p = settings.profile
        threads = p.threads or settings.server.threads
        for src in (SOURCE, *HEADERS):  # what measured: the instrument's source (with the shared header) and build
            shutil.copyfile(src, run.path / "raw" / src.name)
        (run.path / "raw" / "instrument.json").write_text(inst.model_dump_json(indent=2))
        dump = run.path / "raw" / "profile.jsonl"
        part = dump.with_suffix(".part.jsonl")
        merge_part(dump, part)  # left by a hard-killed run
        n_depths = p.max_depth // p.chunk + 1
        done = keep_complete_cycles(dump, n_depths)
        room = CleanRoom(p.clean_room_stop, p.clean_room_start) if p.clean_room_stop and p.clean_room_start else None
        with hold(sess.target, room, run):  # the instrument and the llama-bench cross-check, both in the room
            want = p.cycles
            while True:
                if done < want:
                    if done and want == p.cycles:  # an interrupted run, resumed
                        console.print(f"resuming: cycles 0..{done - 1} are complete, running {done}..{want - 1}")
                    cmd = instrument_command(
                        inst, sess.model, part, chunk=p.chunk, max_depth=p.max_depth, cycles=want, threads=threads,
                        threads_batch=p.threads_batch or threads, threadpool=p.threadpool, first_cycle=done,
                        cpu_list=settings.server.cpu_list,
                    )  # fmt: skip
                    try:
                        run_instrument(cmd, run.path / "logs" / "instrument.log", console, want * 2 * n_depths,
                                       done * 2 * n_depths)  # fmt: skip
                    finally:  # what the instrument wrote so far is kept for a resume
                        merge_part(dump, part)
                    done = keep_complete_cycles(dump, n_depths)
                meta, walls, nodes = parse_dump(dump)
                nodes = band_nodes(nodes)
                rows, summary = derive(walls, nodes, p.chunk)
                wide = too_wide(summary, p.target)
                if not wide or want >= (p.max_cycles or p.cycles):
                    break
                want += 1
                console.print(f"after {done} cycles {wide}: one more cycle (at most {p.max_cycles})")
            write_parquet(nodes, run.path / "raw" / NODES_PARQUET)
            peaks = None
            if p.peaks and self.cost is not None:
                with console.status("probing this host's GEMM and memcpy peaks ..."):
                    peaks = measure_peaks(*probe_shape(self.cost), threads, settings.server.cpu_list)
            if p.bench_check:
                with console.status("cross-checking FUSED chunk times with llama-bench ..."):
                    bench = measure_prefill_tps(
                        sess.target, sess.engine, sess.model, [p.chunk], sorted({w.depth for w in walls}), p.cycles,
                        threads, "auto", run.path / "logs" / "llama-bench.log", cpu_list=settings.server.cpu_list,
                    )  # fmt: skip
                run.rewrite(BENCH, bench)
                fused = {r.depth: r.fused_chunk_ms for r in rows}  # medians derive() already took
                summary.fused_vs_bench = {str(b.depth): fused[b.depth] / b.avg_ms for b in bench if b.avg_ms > 0}
                for b in bench:  # the FUSED side's interval over cycles, against llama-bench's mean
                    iv = median_interval([w.ms for w in walls if w.mode == "fused" and w.depth == b.depth],
                                         key=f"fused/{b.depth}")  # fmt: skip
                    if iv is not None and b.avg_ms > 0:
                        summary.fused_vs_bench_ci[str(b.depth)] = Interval(
                            value=fused[b.depth] / b.avg_ms, lo=iv.lo / b.avg_ms, hi=iv.hi / b.avg_ms, n=iv.n
                        )
        cycle_rows = band_cycles(cycle_cells(walls, nodes), p.chunk)
        if self.cost is not None:
            annotate(rows, summary, self.cost, peaks)
            self.prediction = add_time_model(
                summary, cycle_rows, self.cost, run.path.name, sess.model.name, p.predict_depths
            )
            run.rewrite(PREDICTED, self.prediction.at if self.prediction else [])
        else:
            summary.cost_model = self.no_cost
        summary.dump_json_bytes = dump.stat().st_size
        summary.dump_parquet_bytes = (run.path / "raw" / NODES_PARQUET).stat().st_size
        run.rewrite(WALLS, walls)
        run.rewrite(BANDS_TABLE, rows)
        run.rewrite(BAND_CYCLES, cycle_rows)
        (run.path / "raw" / "profile_summary.json").write_text(summary.model_dump_json(indent=2))
        dump.unlink()  # the Parquet file and the walls table hold the same content
        self.rows, self.summary = rows, summary
        return Outcome(results={"instrument_meta": meta})

    def present(self, sess: Session, outcome: Outcome, console: Console) -> None:
        assert self.summary is not None
        console.print(profile_table(self.rows, self.summary))
        if any(r.gflops for r in self.rows):
            console.print(efficiency_table(self.rows, self.summary))
        if self.prediction is not None and self.prediction.at and self.cost is not None:
            console.print(time_tables(self.prediction, self.cost)[0])
        for line in prediction_lines(self.summary):
            console.print(line, highlight=False)


def run_profile(settings: Settings, resume: RunFolder | None = None, console: Console | None = None) -> RunFolder:
    return run_experiment(Profile(), settings, resume, console)


def _pm(value: float, lo: float | None, hi: float | None) -> str:
    """`0.123 +-3%`: a value and its 95% interval's half-width, relative."""
    if lo is None or hi is None or not value:
        return f"{value:.3f}"
    return f"{value:.3f} +-{(hi - lo) / 2 / value:.0%}"


def _iv(iv: Interval | None, pct: bool = False, digits: int = 3) -> str:
    return "-" if iv is None else iv.fmt(pct=pct, digits=digits)


def profile_table(rows: list[BandDepth], s: ProfileSummary) -> Table:
    t = Table(
        title=f"prefill ms/token per band vs depth (TIMED share x FUSED chunk ms / chunk; +- the 95% interval over "
        f"{s.cycles} cycles)"
    )
    t.add_column("depth", justify="right")
    for b in BANDS:
        t.add_column(b, justify="right")
    t.add_column("TIMED/FUSED - 1", justify="right")
    t.add_column("FUSED/bench", justify="right")
    for depth in sorted({r.depth for r in rows}):
        per = {r.band: r for r in rows if r.depth == depth}
        gap = s.timed_vs_fused_gap_ci.get(str(depth))
        bench = s.fused_vs_bench_ci.get(str(depth))
        ratio = s.fused_vs_bench.get(str(depth))
        t.add_row(
            str(depth), *(_pm(per[b].ms_per_token, per[b].ms_per_token_lo, per[b].ms_per_token_hi) for b in BANDS),
            _iv(gap, pct=True) if gap else f"{s.timed_vs_fused_gap[str(depth)]:+.1%}",
            _iv(bench) if bench else (f"{ratio:.3f}" if ratio is not None else "-"),
        )  # fmt: skip
    t.caption = (
        f"crossover attn_core > ffn_moe: {crossover_text(s)}; attention slope {_iv(s.attn_slope_ci, digits=4)} "
        f"ms/token per 1k depth, R^2 {_iv(s.attn_r2_ci, digits=4)}; mean gap {s.timed_vs_fused_gap_mean:+.1%}"
    )
    return t


def efficiency_table(rows: list[BandDepth], s: ProfileSummary) -> Table:
    """Achieved GFLOP/s per band and depth [95% interval] and its share of the probed GEMM peak."""
    peak = s.peak_gemm_gflops_ci
    t = Table(title="achieved GFLOP/s by band (predicted FLOPs / measured ms) [95% interval]"
              + (f"; share of this host's GEMM peak {peak.fmt(digits=1)} GFLOP/s" if peak else ""))  # fmt: skip
    t.add_column("depth", justify="right")
    for b in BANDS:
        t.add_column(b, justify="right")
    for depth in sorted({r.depth for r in rows}):
        per = {r.band: r for r in rows if r.depth == depth}
        cells = []
        for b in BANDS:
            r = per.get(b)
            if r is None or r.gflops is None:
                cells.append("-")
                continue
            ci = f" [{r.gflops_lo:.1f}, {r.gflops_hi:.1f}]" if r.gflops_lo and r.gflops_hi else ""
            cells.append(f"{r.gflops:.1f}{ci}" + (f" {r.peak_share:.0%}" if r.peak_share is not None else ""))
        t.add_row(str(depth), *cells)
    return t


def crossover_text(s: ProfileSummary) -> str:
    """The measured crossover, its number once: `2658 [2567, 2729]`, or `not reached by depth 1024`."""
    return s.crossover_ci.fmt(digits=0) if s.crossover_ci is not None else s.crossover_note


def time_crossover_text(s: ProfileSummary) -> str:
    if s.time_crossover_ci is None:
        return s.time_crossover_note or "-"
    note = f" ({s.time_crossover_note})" if s.time_crossover_note else ""
    return s.time_crossover_ci.fmt(digits=0) + note


def add_time_model(
    summary: ProfileSummary, rows: list[BandCycle], cost: CostModel, run_id: str, model: str, depths: list[int]
) -> TimePrediction | None:
    """The profile's own rates (lab.timemodel), the crossover in time they predict (into its summary) and each
    band's ms/token at `depths` (returned: the run's profile_predicted table)."""
    try:
        tf = fit(rows, cost, key=run_id)
    except ValueError as e:  # fewer than two depths
        summary.time_crossover_note = f"no time model: {e}"
        return None
    source = f"this run ({len(tf.depths)} depths to {tf.depths[-1]}, {tf.cycles} cycles)"
    pred = predict(tf, None, depths, source=source, model=model)
    summary.time_crossover_ci, summary.time_crossover_note = pred.crossover, pred.crossover_note
    summary.band_gflops_ci = {b: r.gflops for b, r in pred.rates.items() if r.gflops is not None}
    summary.attn_overhead_ms_ci = pred.rates["attn_core"].overhead_ms_per_token
    return pred


def prediction_lines(s: ProfileSummary) -> list[str]:
    """The crossover predicted in time (this profile's rates) and from FLOPs beside the measured one, and the
    attention slope."""
    if s.predicted_crossover_depth is None and s.attn_flops_per_token_per_1k is None:
        return [f"cost model: {s.cost_model}"] if s.cost_model else []
    out = []
    pred = s.predicted_crossover_depth
    line = (
        f"crossover: measured {crossover_text(s)}; predicted in time {time_crossover_text(s)}; "
        f"from FLOPs {'none' if pred is None else f'{pred:.0f}'}"
    )
    if s.crossover_vs_predicted_ci is not None:
        line += f" (measured / FLOP prediction {s.crossover_vs_predicted_ci.fmt()})"
    out.append(line)
    if s.band_gflops_ci:
        rates = ", ".join(f"{b} {iv.fmt(digits=1)}" for b, iv in s.band_gflops_ci.items())
        oh = s.attn_overhead_ms_ci
        overhead = f"; attn_core's per-token overhead {oh.fmt(digits=4)} ms" if oh is not None else ""
        out.append(f"rates (GFLOP/s on counted FLOPs): {rates}{overhead}")
    if s.attn_flops_per_token_per_1k is not None:
        line = f"attention slope: {s.attn_flops_per_token_per_1k / 1e6:.4g} MFLOP per token per 1k depth predicted"
        if s.predicted_attn_slope_ms_per_token_per_1k is not None:
            line += (f", {s.predicted_attn_slope_ms_per_token_per_1k:.4f} ms/token per 1k at the rate ffn_moe "
                     f"achieves; measured {_iv(s.attn_slope_ci, digits=4)}")  # fmt: skip
        if s.attn_slope_vs_predicted_ci is not None:
            line += f" (measured / predicted {s.attn_slope_vs_predicted_ci.fmt()})"
        out.append(line)
    if s.peak_copy_gbps_ci is not None and s.peak_gemm_gflops_ci is not None:
        out.append(f"this host: GEMM {s.peak_gemm_gflops_ci.fmt(digits=1)} GFLOP/s at {tuple(s.peak_gemm_shape)}, "
                   f"memcpy {s.peak_copy_gbps_ci.fmt(digits=2)} GB/s ({s.cost_model})")  # fmt: skip
    return out
