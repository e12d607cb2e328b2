"""The A/A test: do the lab's intervals hold on the next run?

The same experiment runs twice back to back on the same build and settings (an A/A pair), and `lab compare`
(the one compare core) calls each point-metric significantly different or within noise. With honest 95%
intervals about 1 in 20 comparisons of an A/A pair is called significant by chance; far more means the
intervals miss a level of variance a rerun has (the process, the time of day). To show the test keeps its
power, one pair measures a real difference: one thread against every core, back to back.

Per experiment (the default sweep, the default profile, the demo's conversation replay) it prints every pair's
compared and significant counts, the A/A rate with its 95% interval and a verdict against 1 in 20
(`holds` when the interval lies below it, `fails` when above, else `undecided`), and the real difference's rate.
A rerun also shifts a whole run's level (the host's drift between runs, which no run's processes carry): each
pair's shift gives the host's run drift (`lab compare --run-drift`), and each pair is judged again with the
drift the other pairs measured, so the allowance is tested on a pair it was not fitted to.

    .venv/bin/python benchmarks/aa_test.py [--pairs 3] [--experiments sweep,profile,conversation] [--no-power]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lab.catalog.compare import Comparison, compare_runs
from lab.conversation.synth import SynthConversation, synth_conversation
from lab.core.runs import RunFolder
from lab.core.settings import Settings, load_settings
from lab.core.stats import drift_of_shifts, proportion_interval
from lab.experiments.conversation import run_conversation
from lab.experiments.profile import run_profile
from lab.experiments.sweep import run_sweep

CORES = os.cpu_count() or 1
AA_BOUND = 0.05  # one comparison in 20 called significant by chance, at 95% intervals


def runner(name: str, trace: Path, reps: int) -> Callable[[Settings], RunFolder]:
    quiet = Console(quiet=True)
    if name == "sweep":
        return lambda s: run_sweep(s, console=quiet)
    if name == "profile":
        return lambda s: run_profile(s, console=quiet)
    return lambda s: run_conversation(s, trace, reps, console=quiet)


def counts(c: Comparison, paired: bool = False) -> tuple[int, int]:
    """(compared, significant) over the per-point rows (not the geometric means) of times, or of the paired
    ratios (two arms within one process)."""
    rows = [r for r in c.rows if r.significant is not None and (r.metric in c.kind.paired) == paired]
    return len(rows), sum(bool(r.significant) for r in rows)


def shift(c: Comparison) -> float:
    """The pair's whole-run shift: the geometric mean of B/A over every compared time."""
    times = [r for r in c.rows if r.metric not in c.kind.paired]
    values = [r.ci.value for r in times if r.ci is not None and r.ci.value > 0]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else 1.0


@dataclass
class Pair:
    a: Path
    b: Path
    took: float

    def compare(self, drift: float = 0.0) -> Comparison:
        return compare_runs(self.a, self.b, drift)


def pair(run: Callable[[Settings], RunFolder], a: Settings, b: Settings) -> Pair:
    t0 = time.monotonic()
    ra, rb = run(a), run(b)
    return Pair(ra.path, rb.path, time.monotonic() - t0)


def rate_cell(compared: int, significant: int) -> str:
    iv = proportion_interval(significant, compared)
    return f"{significant}/{compared} = {iv.value:.1%} [{iv.lo:.1%}, {iv.hi:.1%}]" if iv else "-"


def aa_verdict(compared: int, significant: int) -> str:
    iv = proportion_interval(significant, compared)
    if iv is None:
        return "-"
    return "holds" if iv.hi <= AA_BOUND else "fails" if iv.lo > AA_BOUND else "undecided"


def leave_one_out(pairs: list[Pair], shifts: list[float]) -> list[Comparison]:
    """Each pair compared with the run drift the other pairs measured (its own shift kept out of it, so the
    allowance is tested on a pair it was not fitted to)."""
    return [p.compare(drift_of_shifts([x for j, x in enumerate(shifts) if j != i])) for i, p in enumerate(pairs)]


def views(name: str, c: Comparison) -> list[tuple[str, bool]]:
    """The rows the table shows an experiment in: its times, and its paired ratios when it has them."""
    return [(name, False), *([(f"{name} (fake/genuine)", True)] if c.kind.paired else [])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--experiments", default="sweep,profile,conversation")
    ap.add_argument("--conversation-reps", type=int, default=None, help="default: conversation.reps")
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

    reps = args.conversation_reps or settings().conversation.reps
    names = [x for x in args.experiments.split(",") if x]
    pairs: dict[str, list[Pair]] = {n: [] for n in names}
    aa: dict[str, list[Comparison]] = {n: [] for n in names}
    shifts: dict[str, list[float]] = {n: [] for n in names}
    for i in range(args.pairs):
        for name in names:
            p = pair(runner(name, trace, reps), settings(), settings())
            c = p.compare()
            pairs[name].append(p)
            aa[name].append(c)
            shifts[name].append(shift(c))
            n, k = counts(c)
            console.print(f"A/A pair {i + 1}, {name}: {k}/{n} significant, B/A {shifts[name][-1]:.3f}", highlight=False)
    held = {name: leave_one_out(pairs[name], shifts[name]) for name in names}
    power: dict[str, tuple[Comparison, Comparison, float]] = {}
    if not args.no_power:
        for name in names:
            p = pair(runner(name, trace, reps), settings(1), settings(CORES))
            drift = drift_of_shifts(shifts[name])
            power[name] = (p.compare(), p.compare(drift), drift)
            n, k = counts(power[name][0])
            console.print(f"1 vs {CORES} threads, {name}: {k}/{n} significant", highlight=False)
    t = Table(title=f"A/A: {args.pairs} pairs per experiment, back to back, same build and settings ({runs})")
    cols = [f"pair {i + 1}" for i in range(args.pairs)]
    cols += ["A/A significant [95%]", "verdict", "with the run drift (leave one out)", "verdict"]
    cols += ["run drift (all pairs)", f"1 vs {CORES} threads significant", "with the run drift"]
    t.add_column("experiment")
    for col in cols:
        t.add_column(col, justify="right")
    for name in names:
        for label, paired in views(name, aa[name][0]):
            each = [counts(c, paired) for c in aa[name]]
            n, k = sum(x[0] for x in each), sum(x[1] for x in each)
            hn, hk = (sum(x) for x in zip(*(counts(c, paired) for c in held[name]), strict=True))
            pw = power.get(name)
            t.add_row(
                label,
                *(
                    f"{s}/{c}, B/A {sh:.3f} ({p.took:.0f} s)" if not paired else f"{s}/{c}"
                    for (c, s), sh, p in zip(each, shifts[name], pairs[name], strict=True)
                ),
                rate_cell(n, k),
                aa_verdict(n, k),
                rate_cell(hn, hk),
                aa_verdict(hn, hk),
                f"{drift_of_shifts(shifts[name]):.1%}" if not paired else "cancels",
                rate_cell(*counts(pw[0], paired)) if pw else "-",
                rate_cell(*counts(pw[1], paired)) if pw else "-",
            )
    console.print(t)
    console.print(
        "the run drift is the spread of a whole run's level on this host (lab compare --run-drift); "
        "'leave one out': each pair judged with the drift the other pairs measured; a paired ratio (two arms "
        "back to back in one process) carries no run drift, and threads move both of its arms alike",
        highlight=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
