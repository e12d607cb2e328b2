"""Sweep benchmark: how well the fake prefix agrees with a genuine cache hit and with the arithmetic estimate.

Runs `lab sweep` on the default grid (params.yaml; tiny model unless --model) or reads an existing run, and
prints the medians of |fake/genuine - 1| and |fake/estimate - 1| over the measurable points (goal <= 5% each).

    .venv/bin/python benchmarks/sweep_agreement.py [--run RUN] [--model M.gguf]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from rich.console import Console

from lab.experiments.fakeprefix import POINTS, print_summary, run_sweep
from lab.runs import resolve_run
from lab.schemas import SweepPoint
from lab.settings import load_settings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", help="use this existing sweep run instead of measuring a new one")
    ap.add_argument("--model", type=Path)
    args = ap.parse_args()
    console = Console()
    settings = load_settings(model=args.model)
    run = resolve_run(args.run, settings.runs_dir) if args.run else run_sweep(settings, console=console)
    points = run.read(POINTS, SweepPoint)
    if args.run:
        print_summary(console, points)
    usable = [p for p in points if p.measurable]
    gen = [abs(p.fake_vs_genuine) for p in usable if p.fake_vs_genuine is not None]
    est = [abs(p.fake_vs_estimate) for p in usable if p.fake_vs_estimate is not None]
    console.print(f"run {run.path.name}: {len(usable)} measurable points of {len(points)}")
    for name, vals in (("|fake/genuine - 1|", gen), ("|fake/estimate - 1|", est)):
        if vals:
            med = statistics.median(vals)
            verdict = "meets" if med <= 0.05 else "MISSES"
            console.print(f"median {name} = {med:.1%} (max {max(vals):.1%}) -> {verdict} the 5% goal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
