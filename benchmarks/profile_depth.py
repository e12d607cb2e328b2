"""Deep and cheap: a profile reaching 131072 by the fake prefix against the cumulative profile to 16384.

Each round runs, one after the other in runs folders of their own, two `lab profile` runs on the same build, model
and threads, with the same count of samples per depth (--processes processes of one rep each, the llama-bench
reference and everything else at the defaults):
  cumulative  `--fill real` at every multiple of --chunk to --real-depth (default 16384): every probe prefills
              its whole depth, twice (FUSED and TIMED passes), and llama-bench fills every depth once per process;
  fake        `--depths log:--deep` (default 131072: 0, 1k, 2k, ... 128k): every probe one chunk after a fake
              prefix, llama-bench at the depths a real fill reaches (profile.real_max_depth).
It prints both wall times side by side and fake / cumulative (the median over rounds with its interval from the
second round on). Goal: fake / cumulative < 1, the deep profile cheaper than the shallow cumulative one.

    .venv/bin/python benchmarks/profile_depth.py [--rounds 1] [--processes 2] [--deep 131072] [--real-depth 16384]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab.core.settings import load_settings
from lab.core.settings_profile import log_depths
from lab.core.stats import median_interval
from lab.experiments.profile.run import run_profile


def timed_profile(runs_dir: Path, profile: dict[str, object]) -> float:
    settings = load_settings(runs_dir=runs_dir, profile={"peaks": False, **profile})
    t0 = time.monotonic()
    run_profile(settings, console=Console(quiet=True))
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--deep", type=int, default=131072)
    ap.add_argument("--real-depth", type=int, default=16384)
    args = ap.parse_args()
    console = Console(width=120)
    designs = {
        "cumulative": {"fill": "real", "depths": list(range(0, args.real_depth + 1, args.chunk))},
        "fake": {"fill": "fake", "depths": log_depths(args.deep)},
    }
    walls: dict[str, list[float]] = {name: [] for name in designs}
    with tempfile.TemporaryDirectory(prefix="lab-bench-depth-") as tmp:
        for rnd in range(args.rounds):
            for name, design in designs.items():
                common = {"chunk": args.chunk, "processes": args.processes, "reps": 1}
                walls[name].append(timed_profile(Path(tmp) / f"{name}{rnd}", {**common, **design}))
                console.print(f"round {rnd + 1}/{args.rounds}: {name} {walls[name][-1]:.0f} s")
    t = Table(title=f"profile wall time, {args.processes} processes x 1 rep per depth, chunk {args.chunk}")
    for col in ("design", "depths", "deepest", "wall s (median of rounds)"):
        t.add_column(col, justify="right")
    for name, design in designs.items():
        depths = design["depths"]
        assert isinstance(depths, list)
        t.add_row(name, str(len(depths)), str(max(depths)), f"{sorted(walls[name])[len(walls[name]) // 2]:.0f}")
    console.print(t)
    ratios = [f / c for f, c in zip(walls["fake"], walls["cumulative"], strict=True)]
    iv = median_interval(ratios, "fake/cumulative")
    assert iv is not None
    said = iv.fmt() if args.rounds > 1 else f"{iv.value:.3f} (one round: --rounds 3 for an interval)"
    console.print(f"fake to {args.deep} / cumulative to {args.real_depth}: {said}; goal < 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
