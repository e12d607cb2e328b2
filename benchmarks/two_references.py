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


def main() -> int:
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
    args = ap.parse_args()
    depths = sorted(set(args.depths))
    settings = load_settings(model=args.model, server={"ctx_size": max(depths) + args.chunk + 256})
    srv = settings.server
    parts = resolve_parts(settings, needs_engine=True)
    assert parts.engine is not None and parts.model is not None
    driver, n_vocab = prepare_driver(parts.engine, settings, parts.model, [args.chunk], fake=False, who="benchmark")
    logs = Path(tempfile.mkdtemp(prefix="two-references-"))
    tokens = None
    if args.uniform_tokens:
        rng = random.Random(0)
        tokens = logs / "tokens.txt"
        tokens.write_text(" ".join(str(rng.randrange(n_vocab)) for _ in range(max(depths) + args.chunk)) + "\n")
    ms: dict[tuple[str, int], list[float]] = {(w, d): [] for w in WAYS for d in depths}
    for rnd in range(args.rounds):
        bench = LlamaBench(
            parts.engine,
            parts.model,
            [args.chunk],
            depths,
            args.reps,
            srv.threads,
            srv.flash_attn,
            cpu_list=srv.cpu_list,
        )
        rows = measure_prefill_tps(parts.target, bench, logs / "llama-bench.log")
        for r in rows:
            ms[("llama-bench", r.depth)] += r.samples_ms
        for way, pool in (("driver", False), ("driver + threadpool", True)):
            cmd = driver_command(
                driver,
                parts.model,
                Ls=depths,
                news=[args.chunk],
                threads=srv.threads,
                threads_batch=srv.threads_batch,
                n_ctx=srv.ctx_size,
                ubatch=srv.ubatch_size,
                flash_attn=srv.flash_attn,
                cpu_list=srv.cpu_list,
                fake=False,
                threadpool=pool,
                tokens=tokens,
            )
            with DriverSession(cmd, logs / f"driver-{rnd}-{pool}.log") as d:
                d.fill(0)  # the depth-D states, and the process warmed up
                for depth in depths:
                    for rep in range(args.reps):
                        *_, row = d.rep(depth, args.chunk, rep, ["warmup", "genuine"])
                        if row["ok"]:
                            ms[(way, depth)].append(float(row["decode_ms"]))
    t = Table(
        title=f"a {args.chunk}-token chunk at depth D, {srv.threads} thread(s), {args.rounds} rounds x {args.reps}: "
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
    print(f"like for like (both with a threadpool): {agree} of {len(depths)} depths agree within +-{TOL:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
