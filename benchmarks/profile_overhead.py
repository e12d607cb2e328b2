"""Profiler benchmark (seed 002): is the instrument measuring the engine, not itself?

Interleaves R rounds of three measurements on the same build, model and threads, so machine noise hits all
three alike, and prints per-round ratios' medians:
  1. the instrument's cumulative pass (`--fill real`: a FUSED pass, then a TIMED pass over depths 0, chunk, ...,
     max_depth), as `lab profile --fill real` runs it (no threadpool attached, like llama-server) and again with
     --threadpool (a
     persistent polling threadpool, like llama-bench): the FUSED/llama-bench ratio of each;
  2. llama-bench -p <chunk> -d <depth> at the same depths (the independent reference for one chunk);
  3. llama-bench -p <max_depth + chunk> -b <chunk> -ub <chunk>: one plain prefill to the same depth.
Goals: TIMED-sum vs FUSED-wall mean gap <= 3%; FUSED chunk / llama-bench within 5% per depth; the FUSED
pass's total <= 1.15x the plain prefill; the Parquet dump >= 10x smaller than the instrument's JSON lines.

    .venv/bin/python benchmarks/profile_overhead.py [--rounds 3] [--chunk 512] [--max-depth 4096] [--model M]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab.core.schemas import Interval
from lab.core.settings import load_settings
from lab.core.shell import LocalShell
from lab.core.stats import median_interval, verdict
from lab.engine.build import EngineInfo, build_engine
from lab.experiments.prefill_tps import LlamaBench, measure_prefill_tps
from lab.experiments.profile.derive import band_nodes
from lab.experiments.profile.dump import parse_dump, write_parquet
from lab.instrument import InstrumentInfo, build_instrument, instrument_command
from lab.models.resolve import resolve_model


def _fmt(iv: Interval | None, pct: bool = False) -> str:
    return "-" if iv is None else iv.fmt(pct=pct)


@dataclass(frozen=True)
class Setup:
    """What every round measures with: the grid, the threads, the build, the instrument and the model."""

    chunk: int
    max_depth: int
    threads: int
    threads_batch: int
    engine: EngineInfo
    inst: InstrumentInfo
    model: Path
    target: LocalShell

    @property
    def depths(self) -> list[int]:
        return list(range(0, self.max_depth + 1, self.chunk))


@dataclass
class Ratios:
    """Each round's ratios, per depth where they have one."""

    gap: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # TIMED node sum / FUSED wall - 1
    vs_bench: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # FUSED / llama-bench chunk
    vs_bench_tp: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # with a threadpool
    timed_wall: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # TIMED / FUSED wall
    vs_plain: list[float] = field(default_factory=list)  # FUSED pass total / plain prefill
    sizes: tuple[int, int] = (0, 0)  # the first round's dump: JSON lines, Parquet


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk", type=int)
    ap.add_argument("--max-depth", type=int)
    ap.add_argument("--model", type=Path)
    return ap.parse_args()


def prepare(args: argparse.Namespace) -> Setup:
    settings = load_settings(model=args.model)
    chunk = args.chunk or settings.profile.chunk
    threads = settings.profile.threads or settings.server.threads
    engine = build_engine(settings.engine, settings.cache_dir, flavor="release", quiet=True)
    return Setup(
        chunk=chunk,
        max_depth=(args.max_depth or max(settings.profile.depths)) // chunk * chunk,
        threads=threads,
        threads_batch=settings.profile.threads_batch or threads,
        engine=engine,
        inst=build_instrument(engine, settings.cache_dir),
        model=resolve_model(settings),
        target=LocalShell(settings.host_name),
    )


def main() -> int:
    args = parse_args()
    console = Console()
    setup = prepare(args)
    ratios = Ratios()
    with tempfile.TemporaryDirectory(prefix="lab-bench-profile-") as tmp:
        for rnd in range(args.rounds):
            console.print(f"round {rnd + 1}/{args.rounds}: instrument (x2), llama-bench per depth, plain prefill")
            measure_round(setup, Path(tmp), ratios, first=rnd == 0)
    report(console, setup, ratios, args.rounds)
    return 0


def measure_round(setup: Setup, work: Path, ratios: Ratios, first: bool) -> None:
    """One round: the instrument without and with a threadpool, llama-bench per depth, one plain prefill."""
    chunk, max_depth, threads, depths = setup.chunk, setup.max_depth, setup.threads, setup.depths
    dump = work / "nodes.jsonl"
    cmd = instrument_command(
        setup.inst, setup.model, dump, chunk=chunk, depths=depths, fill="real", reps=1, process=0, threads=threads,
        threads_batch=setup.threads_batch,
    )  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    _, walls, nodes = parse_dump(dump)
    subprocess.run([*cmd, "--threadpool"], check=True, capture_output=True)
    fused_tp = {w.depth: w.ms for w in parse_dump(dump)[1] if w.mode == "fused"}
    fused = {w.depth: w.ms for w in walls if w.mode == "fused"}
    timed = {w.depth: w.ms for w in walls if w.mode == "timed"}
    node_sum: dict[int, float] = defaultdict(float)
    for r in nodes:
        node_sum[r["depth"]] += r["ms"]
    engine, model, target = setup.engine, setup.model, setup.target
    bench = measure_prefill_tps(target, LlamaBench(engine, model, [chunk], depths, 1, threads, "auto"), work / "b.log")
    plain = measure_prefill_tps(
        target, LlamaBench(engine, model, [max_depth + chunk], [0], 1, threads, "auto", chunk), work / "b.log"
    )
    for b in bench:
        ratios.vs_bench[b.depth].append(fused[b.depth] / b.avg_ms)
        ratios.vs_bench_tp[b.depth].append(fused_tp[b.depth] / b.avg_ms)
    for d in depths:
        ratios.gap[d].append(node_sum[d] / fused[d] - 1)
        ratios.timed_wall[d].append(timed[d] / fused[d])
    ratios.vs_plain.append(sum(fused.values()) / plain[0].avg_ms)
    if first:
        pq = work / "nodes.parquet"
        write_parquet(band_nodes(nodes), pq)
        ratios.sizes = (dump.stat().st_size, pq.stat().st_size)


def report(console: Console, setup: Setup, ratios: Ratios, rounds: int) -> None:
    """Per depth, then over the depths against the goals: the gap, FUSED against llama-bench, the plain prefill,
    the dump's size."""
    t = Table(title=f"profiler overhead, median of {rounds} interleaved rounds [95% interval] "
                    f"(chunk {setup.chunk}, {setup.threads} threads)")  # fmt: skip
    cols = ("depth", "TIMED nodes / FUSED wall", "TIMED wall / FUSED wall", "FUSED / bench", "same, threadpool")
    for col in cols:
        t.add_column(col, justify="right")
    for d in setup.depths:
        g = median_interval([1 + x for x in ratios.gap[d]], key=f"gap{d}")
        t.add_row(
            str(d), _fmt(g, pct=True), _fmt(median_interval(ratios.timed_wall[d], f"tw{d}")),
            _fmt(median_interval(ratios.vs_bench[d], f"b{d}")), _fmt(median_interval(ratios.vs_bench_tp[d], f"btp{d}")),
        )  # fmt: skip
    console.print(t)
    all_gaps = median_interval([1 + statistics.median(v) for v in ratios.gap.values()], key="gaps")
    console.print(f"TIMED vs FUSED over depths: {_fmt(all_gaps, pct=True)} -> {verdict(all_gaps, 0.03)} at +-3%")
    for label, by_depth in (
        ("FUSED / llama-bench", ratios.vs_bench),
        ("the same with --threadpool", ratios.vs_bench_tp),
    ):
        over = median_interval([statistics.median(v) for v in by_depth.values()], key=label)
        console.print(f"{label} over depths: {_fmt(over)} -> {verdict(over, 0.05)} at +-5%")
    whole = median_interval(ratios.vs_plain, key="plain")
    met = "met" if whole and whole.hi <= 1.15 else "undecided" if whole and whole.lo <= 1.15 else "missed"
    console.print(
        f"FUSED pass total / one plain prefill to {setup.max_depth + setup.chunk}: {_fmt(whole)} "
        f"(rounds {', '.join(f'{v:.3f}' for v in ratios.vs_plain)}); goal <= 1.15x: {met}"
    )
    sizes = ratios.sizes
    ratio = sizes[0] / sizes[1] if sizes[1] else float("inf")
    console.print(
        f"per-node dump, one pass of each mode: JSON {sizes[0] / 1e6:.2f} MB, Parquet {sizes[1] / 1e6:.3f} MB: "
        f"{ratio:.1f}x smaller (deterministic sizes, no interval needed); "
        f"goal 10x: {'met' if ratio >= 10 else 'missed'}"
    )


if __name__ == "__main__":
    sys.exit(main())
