"""What precision costs: the default grid measured the old way and the new way, side by side in one run.

The old way is the sweep before cumulative fills, reproduced by its settings: the genuine arm prefills its prefix
every rep (sweep.genuine_prefix = prefill), the estimate is one `llama-bench -d L -r 3` call per rep
(sweep.estimate_tool = llama-bench) and the direct baseline runs every rep. The new way is the lab's default
(restored genuine hit, the in-process chunk as the estimate, the baseline from the fill passes).

1. Same reps (--reps, default 12: the old sweep's max_reps) both ways: the wall-time ratio old/new (goal: at
   least 5x) and per point the fake/genuine interval's half-width both ways.
2. At equal wall time: the new way gets the old way's wall time as its --budget (adaptive reps from 5), and both
   count their fake/genuine verdicts decided at +-5% (goal: at least 7 of 8 for the new way).
3. What one more rep costs, per point both ways (the wall seconds of a rep: the old way pays a baseline, a
   genuine prefill and a llama-bench run; the new way its new tokens).

    .venv/bin/python benchmarks/sweep_cost.py [--reps 12] [--Ls 512,2048] [--news 64] [--model M]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lab.core.runs import RunFolder
from lab.core.schemas import Interval, SweepPoint
from lab.core.schemas.raw import SWEEP_POINTS
from lab.core.settings import Settings, load_settings
from lab.experiments.sweep.planning import budget_reps, plans
from lab.experiments.sweep.run import run_sweep
from lab.measure.plan import Rates

OLD = {
    "genuine_prefix": "prefill",
    "estimate_tool": "llama-bench",
    "baseline_reps": None,
    "arms": ["baseline", "fake", "genuine", "estimate"],
}


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def settings_of(args: argparse.Namespace, runs: Path, **sw: Any) -> Settings:
    grid = {k: v for k, v in (("Ls", args.Ls), ("news", args.news)) if v}
    return load_settings(model=args.model, runs_dir=runs, sweep={**grid, "tolerance": 0.05, **sw})


def measure(settings: Settings) -> tuple[RunFolder, list[SweepPoint], float]:
    t0 = time.monotonic()
    run = run_sweep(settings, console=Console(quiet=True))
    return run, run.read(SWEEP_POINTS), time.monotonic() - t0


def half(iv: Interval | None) -> str:
    return "-" if iv is None else f"{iv.half_width:.1%}"


def decided(points: list[SweepPoint]) -> int:
    return sum(p.genuine_verdict != "undecided" for p in points)


def rep_s(p: SweepPoint) -> str:
    return "-" if p.rep_s is None else p.rep_s.fmt(digits=2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--Ls", type=ints, default=None)
    ap.add_argument("--news", type=ints, default=None)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--runs-dir", type=Path, default=None, help="keep the runs here (default: a temp dir)")
    args = ap.parse_args()
    console = Console()
    runs = args.runs_dir or Path(tempfile.mkdtemp(prefix="sweep-cost-"))
    console.print(f"runs in {runs}; {args.reps} reps the old way, then the new way, then the new way on a budget")
    _, old, t_old = measure(settings_of(args, runs, reps=args.reps, **OLD))
    new_run, new, t_new = measure(settings_of(args, runs, reps=args.reps))

    t = Table(title=f"{args.reps} reps per point both ways: fake/genuine - 1 [95% interval] and its half-width")
    for col in ("L", "new", "old way", "half-width", "new way", "half-width", "s per rep old", "s per rep new"):
        t.add_column(col, justify="right")
    for o, n in zip(old, new, strict=True):
        t.add_row(
            str(o.L),
            str(o.new),
            o.fake_vs_genuine_ci.fmt(pct=True) if o.fake_vs_genuine_ci else "-",
            half(o.fake_vs_genuine_ci),
            n.fake_vs_genuine_ci.fmt(pct=True) if n.fake_vs_genuine_ci else "-",
            half(n.fake_vs_genuine_ci),
            rep_s(o),
            rep_s(n),
        )
    console.print(t)
    ratio = t_old / t_new
    console.print(
        f"same reps: old way {t_old:.0f} s, new way {t_new:.0f} s: {ratio:.1f}x less wall time "
        f"(goal >= 5x); decided {decided(old)}/{len(old)} vs {decided(new)}/{len(new)}"
    )

    # equal wall time: the new way's reps chosen by its own plan to fit the old way's wall time
    base = settings_of(args, runs, min_reps=5, max_reps=200)
    plan_rates = json.loads(new_run.manifest_path.read_text())["results"].get("plan", {}).get("rates")
    rates = Rates.model_validate(plan_rates) if plan_rates else None
    budgeted = budget_reps(base, rates, "server", t_old) if rates else base
    if rates:
        console.print(
            f"budget {t_old:.0f} s: up to {budgeted.sweep.max_reps} reps per point "
            f"(planned {plans(budgeted, rates, 'server')[1].total_s:.0f} s)"
        )
    _, eq, t_eq = measure(budgeted)
    goal = decided(eq) >= 7 * len(eq) / 8
    console.print(
        f"equal wall time: old way {decided(old)}/{len(old)} fake/genuine verdicts decided at +-5% in "
        f"{t_old:.0f} s; new way {decided(eq)}/{len(eq)} in {t_eq:.0f} s (goal >= 7 of 8), reps "
        f"{[p.reps for p in eq]}"
    )
    return 0 if ratio >= 5 and goal else 1


if __name__ == "__main__":
    sys.exit(main())
