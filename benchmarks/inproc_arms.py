"""In-process arms benchmark: the same points measured inside one process and through the server, in one run.

Runs `lab sweep --where both --arms baseline,fake,genuine,plain` over the default grid (params.yaml's Ls x news;
tiny model unless --model) with a fixed count of reps (--reps, default 8) and prints per point: in-process
fake/genuine with its 95% interval (goal: inside [0.98, 1.02]) beside the same ratio through HTTP, how much
narrower the in-process interval is, restored/plain genuine (the restore's proof: goal inside [0.98, 1.02]
pooled), the no-patch fallback's whole step (cache read + decode) against the genuine hit's decode, the
cache-read share of that step, and server / in-process per arm (the server's own share of each arm). Then over
the grid: how many points meet the goal, the median interval half-width in-process vs through HTTP (with its
interval over points), and the restore's bandwidth against memcpy.

    .venv/bin/python benchmarks/inproc_arms.py [--reps 8] [--Ls 512,2048] [--news 64] [--model M]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab.core.schemas import ArmsSummary, Interval, SweepPoint
from lab.core.schemas.raw import ARMS_SUMMARY, SWEEP_POINTS
from lab.core.settings import load_settings
from lab.core.stats import median_interval
from lab.experiments.sweep.run import run_sweep

GOAL = (0.98, 1.02)


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def pct(iv: Interval | None) -> str:
    return "-" if iv is None else iv.fmt(pct=True)


def share(iv: Interval | None) -> str:
    return "-" if iv is None else f"{iv.value:.1%} [{iv.lo:.1%}, {iv.hi:.1%}]"


def ratio(iv: Interval | None) -> str:
    return "-" if iv is None else iv.fmt(digits=3)


def inside(iv: Interval | None) -> bool:
    return iv is not None and GOAL[0] <= iv.lo and iv.hi <= GOAL[1]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--Ls", type=ints, default=None)
    ap.add_argument("--news", type=ints, default=None)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--runs-dir", type=Path, default=None, help="keep the run here (default: a temp dir)")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    console = Console()
    runs = args.runs_dir or Path(tempfile.mkdtemp(prefix="arms-bench-"))
    grid = {k: v for k, v in (("Ls", args.Ls), ("news", args.news)) if v}
    settings = load_settings(
        model=args.model,
        runs_dir=runs,
        sweep={
            **grid,
            "reps": args.reps,
            "tolerance": 0.02,
            "where": "both",
            "arms": ["baseline", "fake", "genuine", "plain"],
        },
    )
    t0 = time.monotonic()
    run = run_sweep(settings, console=Console(quiet=True))
    wall = time.monotonic() - t0
    rows = run.read(SWEEP_POINTS)
    points = [p for p in rows if p.where == "inproc"]
    http = {p.point: p for p in rows if p.where == "server"}
    (summary,) = run.read(ARMS_SUMMARY)
    t, widths = points_table(points, http, f"{args.reps} interleaved reps per point ({run.path.name})")
    console.print(t)
    met = sum(inside(p.fake_vs_genuine_ci) for p in points)
    console.print(f"{wall:.0f} s; in-process fake/genuine inside [{GOAL[0]}, {GOAL[1]}] at {met}/{len(points)} "
                  f"points; pooled over every rep {pct(summary.fake_vs_genuine_ci)}")  # fmt: skip
    for line in grid_lines(points, http, widths, summary):
        console.print(line)
    return 0 if met == len(points) else 1


def points_table(points: list[SweepPoint], http: dict[str, SweepPoint], what: str) -> tuple[Table, list[float]]:
    """Per point: fake/genuine in process beside through HTTP, the restore's proofs and share, server/in-process
    per arm; and the in-process/HTTP interval width ratio of each point that has both."""
    t = Table(title=f"in-process vs server, {what}; goal: in-process fake/genuine inside [{GOAL[0]}, {GOAL[1]}]")
    for col in ("L", "new", "in-process fake/genuine - 1", "HTTP fake/genuine - 1", "width in-proc/HTTP",
                "genuine/plain - 1", "restore step/genuine - 1", "cache-read share", "server/in-proc baseline",
                "server/in-proc fake", "server/in-proc genuine"):  # fmt: skip
        t.add_column(col, justify="right")
    widths: list[float] = []
    for p in points:
        a, b = p.fake_vs_genuine_ci, http[p.point].fake_vs_genuine_ci
        w = a.half_width / b.half_width if a and b and b.half_width > 0 else None
        if w is not None:
            widths.append(w)
        t.add_row(
            str(p.L), str(p.new), pct(a) + (" ok" if inside(a) else ""), pct(b), "-" if w is None else f"{w:.2f}",
            pct(p.genuine_vs_plain_ci), pct(p.restore_step_vs_genuine_ci), share(p.cache_read_share_ci),
            *(ratio(http[p.point].vs_inproc.get(arm)) for arm in ("baseline", "fake", "genuine")),
        )  # fmt: skip
    return t, widths


def grid_lines(
    points: list[SweepPoint], http: dict[str, SweepPoint], widths: list[float], summary: ArmsSummary
) -> list[str]:
    """Over the grid: the median interval half-width in process and through HTTP, the restore's bandwidth
    against memcpy, restored/plain pooled and what a rep costs."""
    in_w = median_interval([p.fake_vs_genuine_ci.half_width for p in points if p.fake_vs_genuine_ci], "in")
    http_w = median_interval([p.fake_vs_genuine_ci.half_width for p in http.values() if p.fake_vs_genuine_ci], "http")
    out = [f"median interval half-width: in-process {in_w.fmt(digits=4) if in_w else '-'}, through HTTP "
           f"{http_w.fmt(digits=4) if http_w else '-'}; in-process/HTTP width ratio, median over points "
           f"{sorted(widths)[len(widths) // 2]:.2f}" if widths else ""]  # fmt: skip
    if summary.restore_vs_memcpy_ci and summary.restore_gbps_ci and summary.memcpy_gbps_ci:
        out.append(f"restore at {share(summary.restore_vs_memcpy_ci)} of memcpy bandwidth "
                   f"({summary.restore_gbps_ci.fmt(digits=2)} vs {summary.memcpy_gbps_ci.fmt(digits=2)} GB/s); "
                   f"restore step/genuine pooled {pct(summary.restore_step_vs_genuine_ci)}")  # fmt: skip
    rep = summary.rep_s_ci.fmt(digits=3) if summary.rep_s_ci else "-"
    out.append(
        f"restored/plain genuine pooled over every rep: {pct(summary.genuine_vs_plain_ci)} (goal inside "
        f"[{GOAL[0]}, {GOAL[1]}]); one rep costs {rep} s"
    )
    return out


if __name__ == "__main__":
    sys.exit(main())
