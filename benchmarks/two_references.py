"""Two references for prefill_tps(L), side by side in one run: llama-bench against the in-process driver.

Per depth D (--depths, default 512,1024,4096) a chunk of --chunk tokens (default 512) at depth D is timed by
    llama-bench  `llama-bench -p chunk -d D -r reps`: it fills the depth once per call, warms up with a chunk,
                 restores the depth-D state before each rep, and attaches a persistent threadpool
    the driver   the sweep's estimate: the depth-D state of a cumulative fill restored, an untimed warm-up
                 chunk, then the timed chunk; once without a threadpool (as llama-server and the sweep run)
                 and once with one (as llama-bench runs)
in --rounds rounds (each round: llama-bench, then the driver both ways), threads as the server's. Prints each
one's median ms with its 95% interval and driver / llama-bench (unpaired) with its verdict at +-5%.

    .venv/bin/python benchmarks/two_references.py [--depths 512,1024,4096] [--chunk 512] [--reps 5] [--model M]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab.core.schemas import Interval
from lab.core.settings import load_settings
from lab.core.stats import median_interval, unpaired_ratio, verdict
from lab.experiments.prefill_tps import LlamaBench, measure_prefill_tps
from lab.experiments.protocol import resolve_parts
from lab.inproc import DriverSession, driver_command, prepare_driver

TOL = 0.05
WAYS = ("llama-bench", "driver", "driver + threadpool")


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def cell(iv: Interval | None, digits: int = 1) -> str:
    return "-" if iv is None else iv.fmt(digits=digits)


Samples = dict[tuple[str, int], list[float]]  # (way, depth) -> the chunk's ms


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depths", type=ints, default=[512, 1024, 4096])
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--reps", type=int, default=5, help="llama-bench -r, and driver chunks per depth and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", type=Path)
    ap.add_argument(
        "--uniform-tokens",
        action="store_true",
        help="the driver decodes ids drawn uniformly from the vocabulary, as llama-bench does (else the sweep's)",
    )
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    depths = sorted(set(args.depths))
    settings = load_settings(model=args.model, server={"ctx_size": max(depths) + args.chunk + 256})
    parts = resolve_parts(settings, needs_engine=True)
    assert parts.engine is not None and parts.model is not None
    driver, n_vocab = prepare_driver(parts.engine, settings, parts.model, [args.chunk], fake=False, who="benchmark")
    logs = Path(tempfile.mkdtemp(prefix="two-references-"))
    tokens = None
    if args.uniform_tokens:
        rng = random.Random(0)
        tokens = logs / "tokens.txt"
        tokens.write_text(" ".join(str(rng.randrange(n_vocab)) for _ in range(max(depths) + args.chunk)) + "\n")
    ms: Samples = {(w, d): [] for w in WAYS for d in depths}
    for rnd in range(args.rounds):
        bench = LlamaBench(
            parts.engine,
            parts.model,
            [args.chunk],
            depths,
            args.reps,
            settings.server.threads,
            settings.server.flash_attn,
            cpu_list=settings.server.cpu_list,
        )
        for r in measure_prefill_tps(parts.shell, bench, logs / "llama-bench.log"):
            ms[("llama-bench", r.depth)] += r.samples_ms
        for way, pool in (("driver", False), ("driver + threadpool", True)):
            cmd = driver_command(
                driver,
                parts.model,
                Ls=depths,
                news=[args.chunk],
                threads=settings.server.threads,
                threads_batch=settings.server.threads_batch,
                n_ctx=settings.server.ctx_size,
                ubatch=settings.server.ubatch_size,
                flash_attn=settings.server.flash_attn,
                cpu_list=settings.server.cpu_list,
                fake=False,
                threadpool=pool,
                tokens=tokens,
            )
            for depth, chunks in driver_chunks(cmd, logs / f"driver-{rnd}-{pool}.log", depths, args).items():
                ms[(way, depth)] += chunks
    agree = print_table(ms, depths, args, settings.server.threads)
    print(f"like for like (both with a threadpool): {agree} of {len(depths)} depths agree within +-{TOL:.0%}")
    return 0


def driver_chunks(cmd: list[str], log: Path, depths: list[int], args: argparse.Namespace) -> dict[int, list[float]]:
    """One driver process: the cumulative fill, then --reps timed chunks (each after a warm-up) at every depth."""
    out: dict[int, list[float]] = {d: [] for d in depths}
    with DriverSession(cmd, log) as d:
        d.fill(0)  # the depth-D states, and the process warmed up
        for depth in depths:
            for rep in range(args.reps):
                *_, row = d.rep(depth, args.chunk, rep, ["warmup", "genuine"])
                if row["ok"]:
                    out[depth].append(float(row["decode_ms"]))
    return out


def print_table(ms: Samples, depths: list[int], args: argparse.Namespace, threads: int) -> int:
    """Each way's median per depth, and driver / llama-bench with its verdict; returns how many depths agree like
    for like (both with a threadpool)."""
    t = Table(
        title=f"a {args.chunk}-token chunk at depth D, {threads} thread(s), {args.rounds} rounds x {args.reps}: "
        f"median ms [95% interval]; driver / llama-bench (unpaired) and its verdict at +-{TOL:.0%}"
    )
    for c in ("depth", *WAYS, "driver / llama-bench", "with threadpool / llama-bench"):
        t.add_column(c, justify="right")
    agree = 0
    for depth in depths:
        ivs = [median_interval(ms[(w, depth)], f"{w}/{depth}") for w in WAYS]
        ratios = [unpaired_ratio(ms[(w, depth)], ms[("llama-bench", depth)], f"{w}/{depth}/bench") for w in WAYS[1:]]
        verdicts = [verdict(r, TOL) for r in ratios]
        agree += verdicts[1] == "agree"
        t.add_row(
            str(depth),
            *(cell(iv) for iv in ivs),
            *(f"{cell(r, 3)} {v}" for r, v in zip(ratios, verdicts, strict=True)),
        )
    Console().print(t)
    return agree


if __name__ == "__main__":
    sys.exit(main())
