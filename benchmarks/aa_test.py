"""The A/A test: do the lab's intervals hold on the next run?

The same experiment runs twice back to back on the same build and settings (an A/A pair), and `lab compare`
(the one compare core) calls each point-metric significantly different or within noise. With honest 95%
intervals about 1 in 20 comparisons of an A/A pair is called significant by chance; far more means the
intervals miss a level of variance a rerun has (the process, the time of day). To show the test keeps its
power, one pair measures a real difference: one thread against every core, back to back.

Per experiment (the default sweep, the default profile, the demo's conversation replay) it prints every pair's
compared and significant counts, the A/A rate with its 95% interval and a verdict against 1 in 20
(`holds` when the interval lies below it, `fails` when above, else `undecided`), and the real difference's rate.

    .venv/bin/python benchmarks/aa_test.py [--pairs 3] [--experiments sweep,profile,conversation] [--no-power]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lab.catalog.compare import Comparison, compare_runs
from lab.conversation.synth import SynthConversation, synth_conversation
from lab.experiments.conversation import run_conversation
from lab.experiments.profile import run_profile
from lab.experiments.sweep import run_sweep
from lab.runs import RunFolder
from lab.settings import Settings, load_settings
from lab.stats import proportion_interval

CORES = os.cpu_count() or 1
AA_BOUND = 0.05  # one comparison in 20 called significant by chance, at 95% intervals


def runner(name: str, trace: Path, reps: int) -> Callable[[Settings], RunFolder]:
    quiet = Console(quiet=True)
    if name == "sweep":
        return lambda s: run_sweep(s, console=quiet)
    if name == "profile":
        return lambda s: run_profile(s, console=quiet)
    return lambda s: run_conversation(s, trace, reps, console=quiet)


def counts(c: Comparison) -> tuple[int, int]:
    """(compared, significant) over the per-point rows (not the geometric means)."""
    rows = [r for r in c.rows if r.significant is not None]
    return len(rows), sum(bool(r.significant) for r in rows)


def pair(run: Callable[[Settings], RunFolder], a: Settings, b: Settings) -> tuple[Comparison, float]:
    t0 = time.monotonic()
    ra, rb = run(a), run(b)
    return compare_runs(ra.path, rb.path), time.monotonic() - t0


def rate_cell(compared: int, significant: int) -> str:
    iv = proportion_interval(significant, compared)
    return f"{significant}/{compared} = {iv.value:.1%} [{iv.lo:.1%}, {iv.hi:.1%}]" if iv else "-"


def aa_verdict(compared: int, significant: int) -> str:
    iv = proportion_interval(significant, compared)
    if iv is None:
        return "-"
    return "holds" if iv.hi <= AA_BOUND else "fails" if iv.lo > AA_BOUND else "undecided"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--experiments", default="sweep,profile,conversation")
    ap.add_argument("--conversation-reps", type=int, default=3)
    ap.add_argument("--no-power", action="store_true", help="skip the real difference (1 thread vs every core)")
    ap.add_argument("--model", type=Path)
    ap.add_argument("--runs-dir", type=Path, default=None)
    args = ap.parse_args()
    console = Console()
    runs = args.runs_dir or Path(tempfile.mkdtemp(prefix="aa-test-"))
    runs.mkdir(parents=True, exist_ok=True)
    trace = synth_conversation(SynthConversation(tasks=3, steps=6, reasoning_words=30), runs / "conversation.jsonl")

    def settings(threads: int | None = None) -> Settings:
        server: dict[str, Any] = {"threads": threads} if threads else {}
        return load_settings(model=args.model, runs_dir=runs, server=server)

    names = [x for x in args.experiments.split(",") if x]
    aa: dict[str, list[tuple[int, int, float]]] = {n: [] for n in names}
    power: dict[str, tuple[int, int, float]] = {}
    for i in range(args.pairs):
        for name in names:
            c, took = pair(runner(name, trace, args.conversation_reps), settings(), settings())
            aa[name].append((*counts(c), took))
            console.print(f"A/A pair {i + 1}, {name}: {aa[name][-1][1]}/{aa[name][-1][0]} significant", highlight=False)
    if not args.no_power:
        for name in names:
            c, took = pair(runner(name, trace, args.conversation_reps), settings(1), settings(CORES))
            power[name] = (*counts(c), took)
            console.print(f"1 vs {CORES} threads, {name}: {power[name][1]}/{power[name][0]} significant")
    t = Table(title=f"A/A: {args.pairs} pairs per experiment, back to back, same build and settings ({runs})")
    for col in ("experiment", *(f"pair {i + 1}" for i in range(args.pairs)), "A/A significant [95%]", "verdict"):
        t.add_column(col, justify="left" if col == "experiment" else "right")
    t.add_column(f"1 vs {CORES} threads significant", justify="right")
    for name in names:
        n, k = sum(x[0] for x in aa[name]), sum(x[1] for x in aa[name])
        pw = power.get(name)
        t.add_row(
            name,
            *(f"{s}/{c} ({w:.0f} s)" for c, s, w in aa[name]),
            rate_cell(n, k),
            aa_verdict(n, k),
            rate_cell(pw[0], pw[1]) if pw else "-",
        )
    n, k = sum(x[0] for v in aa.values() for x in v), sum(x[1] for v in aa.values() for x in v)
    t.add_row("all", *[""] * args.pairs, rate_cell(n, k), aa_verdict(n, k), "")
    console.print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
