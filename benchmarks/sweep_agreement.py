"""Sweep benchmark: fixed reps vs adaptive reps, side by side on one machine in one run.

Measures the default grid (params.yaml's Ls x news; tiny model unless --model) twice: with a fixed count of
reps per point (--fixed, default 5) and adaptively (min 5, --max-reps, default 30: a point gets reps until
fake/genuine is decided within 1 +- --tolerance and as narrow as --target). Prints per point fake/genuine and
fake/estimate with their 95% intervals, the verdicts and the reps used, then per sweep the wall time, the
decided points and the time per decided point. Goals: every point's fake/genuine agrees within +-3% by
max_reps; the median |fake/estimate - 1| (with its interval over points) <= 5%; the adaptive sweep spends no
more time per decided point than the fixed one.

    .venv/bin/python benchmarks/sweep_agreement.py [--fixed 5] [--max-reps 30] [--Ls 512,2048] [--model M]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab.core.schemas import Interval, SweepPoint
from lab.core.schemas.raw import SWEEP_POINTS
from lab.core.settings import load_settings
from lab.core.stats import median_interval
from lab.experiments.sweep.run import run_sweep


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def sweep(args: argparse.Namespace, runs: Path, console: Console, **sw: object) -> tuple[list[SweepPoint], float]:
    grid = {k: v for k, v in (("Ls", args.Ls), ("news", args.news)) if v}
    settings = load_settings(model=args.model, runs_dir=runs, sweep={**grid, "tolerance": args.tolerance, **sw})
    t0 = time.monotonic()
    run = run_sweep(settings, console=Console(quiet=True))
    return run.read(SWEEP_POINTS), time.monotonic() - t0


def cell(iv: Interval | None, verdict: str | None) -> str:
    """A ratio - 1 and its verdict (through the server fake / estimate has none: it is measured, not judged)."""
    return "-" if iv is None else f"{iv.fmt(pct=True)} {verdict or 'measured'}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixed", type=int, default=5)
    ap.add_argument("--max-reps", type=int, default=30)
    ap.add_argument("--tolerance", type=float, default=0.03)
    ap.add_argument("--target", type=float, default=0.03)
    ap.add_argument("--Ls", type=ints, default=None)
    ap.add_argument("--news", type=ints, default=None)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--runs-dir", type=Path, default=None, help="keep the two runs here (default: a temp dir)")
    args = ap.parse_args()
    console = Console()
    runs = args.runs_dir or Path(tempfile.mkdtemp(prefix="sweep-bench-"))
    console.print(f"runs in {runs}; fixed {args.fixed} reps, then adaptive 5..{args.max_reps}")
    fixed, t_fixed = sweep(args, runs, console, reps=args.fixed)
    adaptive, t_adaptive = sweep(args, runs, console, min_reps=5, max_reps=args.max_reps, target=args.target)

    table = Table(title=f"fixed {args.fixed} reps vs adaptive (5..{args.max_reps}); verdicts at +-{args.tolerance:.0%}")
    for col in ("L", "new", "fixed fake/genuine - 1", "fixed fake/estimate - 1", "adaptive fake/genuine - 1",
                "adaptive fake/estimate - 1", "reps"):  # fmt: skip
        table.add_column(col, justify="right")
    for f, a in zip(fixed, adaptive, strict=True):
        table.add_row(
            str(f.L), str(f.new), cell(f.fake_vs_genuine_ci, f.genuine_verdict),
            cell(f.fake_vs_estimate_ci, f.estimate_verdict), cell(a.fake_vs_genuine_ci, a.genuine_verdict),
            cell(a.fake_vs_estimate_ci, a.estimate_verdict), str(a.reps),
        )  # fmt: skip
    console.print(table)
    ok = True
    for name, pts, wall in (("fixed", fixed, t_fixed), ("adaptive", adaptive, t_adaptive)):
        decided = sum(
            p.genuine_verdict != "undecided" and p.estimate_verdict in ("agree", "disagree", None) for p in pts
        )
        agree = sum(p.genuine_verdict == "agree" for p in pts)
        gaps = [abs(p.fake_vs_estimate_ci.value - 1) for p in pts if p.measurable and p.fake_vs_estimate_ci]
        est = median_interval(gaps, key=name)
        per = f"{wall / decided:.1f} s per decided point" if decided else "no point decided"
        console.print(f"{name}: {wall:.0f} s, {sum(p.reps for p in pts)} reps; {decided}/{len(pts)} points decided "
                      f"({per}); fake/genuine agrees at {agree}/{len(pts)}; median |fake/estimate - 1| "
                      f"{est.fmt(digits=3) if est else '-'}")  # fmt: skip
        if name == "adaptive":
            ok &= agree == len(pts)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
