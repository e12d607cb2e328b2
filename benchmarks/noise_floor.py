"""The noise floor: how wide a point's fake/genuine interval is per rep, and how many points a minute decides,
against the threads (every core vs all but one), pinning, and in process vs through the server.

Each configuration measures the default grid (params.yaml's Ls x news; tiny model unless --model) with a fixed
number of reps (--reps, default 10), in --rounds rounds whose configuration order rotates (drift on a shared
machine spreads over all of them). Per configuration it prints the median over points of fake/genuine's 95%
half-width (with its interval over points), that half-width scaled to one rep (x sqrt(reps): what a rep buys),
the fake/genuine verdicts decided at +-5%, the wall time, and decided points per minute.

    .venv/bin/python benchmarks/noise_floor.py [--reps 10] [--rounds 2] [--Ls 512,2048] [--news 64]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lab.core.schemas.raw import SWEEP_POINTS
from lab.core.settings import load_settings
from lab.core.stats import median_interval
from lab.experiments.sweep.run import run_sweep

CORES = os.cpu_count() or 1
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    f"server, {CORES} threads": ("server", {"threads": CORES}),
    f"server, {max(1, CORES - 1)} threads": ("server", {"threads": max(1, CORES - 1)}),
    f"server, {CORES} threads pinned": ("server", {"threads": CORES, "cpu_list": f"0-{CORES - 1}"}),
    f"server, {max(1, CORES - 1)} threads pinned off core 0": (
        "server",
        {"threads": max(1, CORES - 1), "cpu_list": f"{min(1, CORES - 1)}-{CORES - 1}"},
    ),
    f"in process, {CORES} threads": ("inproc", {"threads": CORES}),
    f"in process, {max(1, CORES - 1)} threads": ("inproc", {"threads": max(1, CORES - 1)}),
}


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def measure(where: str, server: dict[str, Any], args: argparse.Namespace, runs: Path) -> tuple[list[float], int, float]:
    """(fake/genuine half-widths per point, verdicts decided, wall seconds) of one run."""
    grid = {k: v for k, v in (("Ls", args.Ls), ("news", args.news)) if v}
    sweep = {**grid, "reps": args.reps, "where": where}
    settings = load_settings(model=args.model, runs_dir=runs, sweep=sweep, server=server)
    t0 = time.monotonic()
    run = run_sweep(settings, console=Console(quiet=True))
    points = run.read(SWEEP_POINTS)
    wall = time.monotonic() - t0
    widths = [p.fake_vs_genuine_ci.half_width for p in points if p.fake_vs_genuine_ci is not None]
    return widths, sum(p.genuine_verdict != "undecided" for p in points), wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--Ls", type=ints, default=None)
    ap.add_argument("--news", type=ints, default=None)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--runs-dir", type=Path, default=None)
    args = ap.parse_args()
    console = Console()
    runs = args.runs_dir or Path(tempfile.mkdtemp(prefix="noise-floor-"))
    names = list(CONFIGS)
    got: dict[str, list[tuple[list[float], int, float]]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            where, server = CONFIGS[name]
            got[name].append(measure(where, server, args, runs))
            console.print(f"round {r + 1}: {name}: {got[name][-1][2]:.0f} s", highlight=False)
    t = Table(title=f"fake/genuine per configuration, {args.reps} reps per point, {args.rounds} rounds ({runs})")
    for c in (
        "configuration",
        "median half-width [over points]",
        "per rep (x sqrt reps)",
        "decided at +-5%",
        "wall s",
        "decided per minute",
    ):
        t.add_column(c, justify="left" if c == "configuration" else "right")
    for name in names:
        widths = [w for ws, _, _ in got[name] for w in ws]
        iv = median_interval(widths, name)
        decided = sum(d for _, d, _ in got[name])
        points = sum(len(ws) for ws, _, _ in got[name])
        wall = sum(w for _, _, w in got[name])
        t.add_row(
            name,
            f"{iv.value:.1%} [{iv.lo:.1%}, {iv.hi:.1%}]" if iv else "-",
            f"{iv.value * math.sqrt(args.reps):.1%}" if iv else "-",
            f"{decided}/{points}",
            f"{wall:.0f}",
            f"{decided / wall * 60:.1f}",
        )
    console.print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
