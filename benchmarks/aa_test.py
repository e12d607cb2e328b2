"""The A/A test: do the lab's intervals hold on the next run, and what does a comparison cost?

Two designs of a comparison of two configurations:
- interleaved (`--vs`, lab.experiments.versus): one run, both configurations in alternating processes, B/A
  paired by process pair. An A/A pair is one run with `--vs same`.
- separate: two runs back to back and `lab compare` (B/A from two runs' samples, unpaired). An A/A pair is
  two runs of the same settings.

With honest 95% intervals about 1 in 20 point-metrics of an A/A pair is called significantly different (the
interval excludes 1) by chance; far more means the intervals miss a level of variance (for two separate runs: the
host's drift between them). Per design and experiment (the default sweep, the default profile, the default decode
check; the demo's conversation replay for the separate design) it prints every pair's compared and significant
counts and whole-run shift B/A, the A/A rate with its 95% interval and a verdict against 1 in 20 (`holds` when
the interval lies below it, `fails` above, else `undecided`), the power (one thread against two: how many
point-metrics are called faster with two) and what a pair took; then, apart, the A/A of each ratio of two arms
within a process (the sweep's fake / genuine and fake / estimate). With both designs the pairs alternate
(interleaved pair i, then separate pair i), so the time of one against the other is measured side by side: the
interleaving's cost, with the interleaved sweep's plan (`--plan`) against its time.

    .venv/bin/python benchmarks/aa_test.py [--pairs 3] [--designs interleaved,separate]
                                           [--experiments sweep,profile,decode] [--no-power]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lab.catalog.compare import Comparison, compare_runs
from lab.conversation.synth import SynthConversation, synth_conversation
from lab.core.settings import Settings, load_settings
from lab.core.stats import median_interval, proportion_interval
from lab.experiments.conversation import Replay
from lab.experiments.decode import DecodeCheck
from lab.experiments.profile.run import Profile
from lab.experiments.protocol import Experiment, run_experiment
from lab.experiments.sweep.planning import Before, predicted_plan
from lab.experiments.sweep.rates import rates_for
from lab.experiments.sweep.run import Sweep
from lab.experiments.versus import run_versus
from lab.experiments.versus.config import paired_design

AA_BOUND = 0.05  # one comparison in 20 called significant by chance, at 95% intervals
QUIET = Console(quiet=True)


def maker(name: str, trace: Path, settings: Settings) -> Callable[[], Experiment]:
    """A new experiment of this name per run (an experiment keeps what one run found)."""
    c = settings.conversation
    made: dict[str, Callable[[], Experiment]] = {
        "sweep": Sweep,
        "profile": Profile,
        "decode": DecodeCheck,
        "conversation": lambda: Replay(trace, c.reps, c.arms),
    }
    return made[name]


@dataclass
class Pair:
    comparison: Comparison
    took: float


@dataclass
class Cell:
    """One design and experiment: its A/A pairs and its power pair."""

    aa: list[Pair] = field(default_factory=list)
    power: Pair | None = None


def times(c: Comparison) -> list[Any]:
    """The per-point rows of absolute times (not the geometric means, not a paired ratio of two arms)."""
    return [r for r in c.rows if r.significant is not None and r.metric not in c.kind.paired]


def shift(c: Comparison) -> float:
    """The pair's whole-run shift: the geometric mean of B/A over every compared time."""
    values = [r.ci.value for r in times(c) if r.ci is not None and r.ci.value > 0]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else 1.0


def rate_cell(k: int, n: int) -> str:
    iv = proportion_interval(k, n)
    return f"{k}/{n} = {iv.value:.1%} [{iv.lo:.1%}, {iv.hi:.1%}]" if iv else "-"


def aa_verdict(k: int, n: int) -> str:
    iv = proportion_interval(k, n)
    if iv is None:
        return "-"
    return "holds" if iv.hi <= AA_BOUND else "fails" if iv.lo > AA_BOUND else "undecided"


def interleaved(experiment: Experiment, a: Settings, vs: dict[str, str]) -> Pair:
    t0 = time.monotonic()
    _, c = run_versus(experiment, a, vs, console=QUIET)
    return Pair(c, time.monotonic() - t0)


def separate(make: Callable[[], Experiment], a: Settings, b: Settings) -> Pair:
    """Two runs back to back, with the reps an interleaved run gives each side (the same precision)."""
    t0 = time.monotonic()
    ra = run_experiment(make(), paired_design(a), console=QUIET)
    rb = run_experiment(make(), paired_design(b), console=QUIET)
    return Pair(compare_runs(ra.path, rb.path), time.monotonic() - t0)


def measure(design: str, settings: Callable[[int | None], Settings], make: Callable[[], Experiment]) -> Pair:
    if design == "interleaved":
        return interleaved(make(), settings(None), {})
    return separate(make, settings(None), settings(None))


def power(design: str, settings: Callable[[int | None], Settings], make: Callable[[], Experiment]) -> Pair:
    """One thread (A) against two (B): the server's, and the profile instrument's own."""
    if design == "interleaved":
        experiment = make()
        own = {"profile.threads": "2"} if experiment.name == "profile" else {}
        return interleaved(experiment, settings(1), {"server.threads": "2", **own})
    return separate(make, settings(1), settings(2))


def faster(c: Comparison) -> tuple[int, int]:
    rows = times(c)
    return sum(1 for r in rows if r.ci is not None and r.ci.hi < 1), len(rows)


def plan_of(settings: Settings) -> float:
    """What `lab sweep --plan --vs same` predicts for the interleaved sweep (seconds)."""
    s = paired_design(settings)
    return predicted_plan(s, rates_for(s), s.sweep.where, Before()).times(2).total_s


def table(cells: dict[tuple[str, str], Cell], pairs: int, runs: Path) -> Table:
    t = Table(title=f"A/A: {pairs} pairs per design and experiment, same build and settings ({runs})")
    for col in ("design", "experiment", *(f"pair {i + 1}" for i in range(pairs))):
        t.add_column(col)
    for col in ("A/A significant [95%]", "verdict", "1 vs 2 threads: faster with 2", "pair took (median)"):
        t.add_column(col, justify="right")
    for (design, name), cell in cells.items():
        each = [(sum(bool(r.significant) for r in times(p.comparison)), len(times(p.comparison))) for p in cell.aa]
        k, n = sum(x[0] for x in each), sum(x[1] for x in each)
        t.add_row(
            design,
            name,
            *(f"{s}/{c}, B/A {shift(p.comparison):.3f}" for (s, c), p in zip(each, cell.aa, strict=True)),
            rate_cell(k, n),
            aa_verdict(k, n),
            rate_cell(*faster(cell.power.comparison)) if cell.power else "-",
            f"{statistics.median(p.took for p in cell.aa):.0f} s",
        )
    return t


def paired_lines(cells: dict[tuple[str, str], Cell]) -> list[str]:
    """The A/A of each ratio of two arms within a process (the sweep's fake / genuine and fake / estimate), apart
    from the times: how often one of them is called different from itself by chance."""
    out = []
    for (design, name), cell in cells.items():
        for metric in sorted({m for p in cell.aa for m in p.comparison.kind.paired}):
            rows = [r for p in cell.aa for r in p.comparison.rows if r.metric == metric and r.significant is not None]
            k = sum(bool(r.significant) for r in rows)
            out.append(
                f"{design} {name}, {metric}: {rate_cell(k, len(rows))} called different, {aa_verdict(k, len(rows))}"
            )
    return out


def cost_lines(cells: dict[tuple[str, str], Cell]) -> list[str]:
    """The interleaved pair's time against the separate pair's, pair by pair (they ran one after the other)."""
    out = []
    for (design, name), cell in cells.items():
        other = cells.get(("separate", name))
        if design != "interleaved" or other is None:
            continue
        ratios = [i.took / s.took for i, s in zip(cell.aa, other.aa, strict=False) if s.took > 0]
        iv = median_interval(ratios, f"cost/{name}")
        out.append(f"{name}: an interleaved pair took {iv.fmt() if iv else '-'} x two separate runs of the same reps")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--designs", default="interleaved")
    ap.add_argument("--experiments", default="sweep,profile,decode")
    ap.add_argument("--no-power", action="store_true", help="skip the real difference (1 thread vs 2)")
    ap.add_argument("--model", type=Path)
    ap.add_argument("--runs-dir", type=Path, default=None)
    args = ap.parse_args()
    console = Console(width=200)
    runs = args.runs_dir or Path(tempfile.mkdtemp(prefix="aa-test-"))
    runs.mkdir(parents=True, exist_ok=True)
    trace = synth_conversation(SynthConversation(tasks=3, steps=6, reasoning_words=30), runs / "conversation.jsonl")

    def settings(threads: int | None) -> Settings:
        server: dict[str, Any] = {"threads": threads} if threads else {}
        profile: dict[str, Any] = {"threads": threads} if threads else {}
        return load_settings(model=args.model, runs_dir=runs, server=server, profile=profile)

    designs = [d for d in args.designs.split(",") if d]
    names = [x for x in args.experiments.split(",") if x]
    cells = {(d, n): Cell() for d in designs for n in names if not (d == "interleaved" and n == "conversation")}
    for i in range(args.pairs):
        for (design, name), cell in cells.items():
            p = measure(design, settings, maker(name, trace, settings(None)))
            cell.aa.append(p)
            k, n = sum(bool(r.significant) for r in times(p.comparison)), len(times(p.comparison))
            console.print(
                f"{design} A/A pair {i + 1}, {name}: {k}/{n} significant, B/A {shift(p.comparison):.3f}, "
                f"{p.took:.0f} s",
                highlight=False,
            )
    if not args.no_power:
        for (design, name), cell in cells.items():
            if design != "interleaved" and ("interleaved", name) in cells:
                continue  # the power of the design a user compares with
            cell.power = power(design, settings, maker(name, trace, settings(None)))
            k, n = faster(cell.power.comparison)
            console.print(f"{design} 1 vs 2 threads, {name}: {k}/{n} faster with 2", highlight=False)
    console.print(table(cells, args.pairs, runs))
    for line in [*paired_lines(cells), *cost_lines(cells)]:
        console.print(line, highlight=False)
    if ("interleaved", "sweep") in cells:
        took = statistics.median(p.took for p in cells[("interleaved", "sweep")].aa)
        plan = plan_of(settings(None))
        console.print(f"sweep: the interleaved run's plan {plan:.0f} s, its time {took:.0f} s ({took / plan:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
