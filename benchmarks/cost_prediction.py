"""Held-out checks of the time model: a profile that stops early predicts what a longer one measures.

Per model (--models: `tiny`, the embedded tiny qwen35moe, and names of lab.models.pretrained, default
gemma3-270m-q4_k_m: a pretrained quantized GGUF the lab did not write, from the package index), two profile runs in
a runs folder of their own, one after the other: to --short (default 1024) and to --long (4096), at every multiple
of --chunk, in --processes instrument processes each. The long run measures the crossover in time and each band's
ms/token at --long; two predictions of them stand beside it (lab.measure.timemodel): from the long run's own depths
up to --short (held out in depth) and from the short run (held out in depth and in run: what a user who stops early
gets). Each with its 95% interval; predicted / measured (its interval the conservative one, predicted's ends over
measured's), the verdict at +-15% (agree: that interval wholly inside; disagree: wholly outside; else undecided),
and whether the predicted interval covers the measured value. The caption gives the crossover where FLOPs are equal
and how far the two runs differ at the depths both measured (this host's run-to-run drift, which no interval of a
single run contains).

On a host whose CPU advertises AMX, the engine is built (once, cached beside the default build) without AMX:
at the pinned commit ggml's AMX kernels die with an illegal instruction on quantized models on such VMs
(llama-bench included), while the F16 tiny model never reaches them. --amx keeps AMX.

    .venv/bin/python benchmarks/cost_prediction.py [--models tiny,gemma3-270m-q4_k_m] [--short 1024] [--long 4096]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab.core.schemas import BANDS, BandDepth, Interval, ProfileSummary
from lab.core.schemas.raw import PROFILE_BANDS
from lab.core.settings import load_settings
from lab.core.stats import verdict
from lab.experiments.profile.rates import profile_fit
from lab.experiments.profile.run import run_profile
from lab.measure.timemodel import predict
from lab.models.pretrained import ensure_pretrained

TOL = 0.15
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def advertises_amx() -> bool:
    try:
        return "amx_tile" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def ratio(pred: Interval | None, meas: Interval | None) -> Interval | None:
    if pred is None or meas is None or meas.lo <= 0:
        return None
    return Interval(value=pred.value / meas.value, lo=pred.lo / meas.hi, hi=pred.hi / meas.lo, n=min(pred.n, meas.n))


def measured_at(run: Path, depth: int) -> dict[str, Interval]:
    out = {}
    for r in read_bands(run):
        if r.depth == depth and r.ms_per_token_lo is not None and r.ms_per_token_hi is not None:
            out[r.band] = Interval(value=r.ms_per_token, lo=r.ms_per_token_lo, hi=r.ms_per_token_hi, n=1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,gemma3-270m-q4_k_m")
    ap.add_argument("--short", type=int, default=1024)
    ap.add_argument("--long", type=int, default=4096)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--amx", action="store_true", help="keep the default engine build on an AMX host")
    ap.add_argument("--from-runs", type=Path, help="compare the profile runs of an earlier call again, measure nothing")
    args = ap.parse_args()
    console = Console(width=200)
    if args.from_runs:
        for name, runs in stored_pairs(args.from_runs).items():
            console.print(comparison(name, runs[args.short], runs[args.long], args.from_runs, args.short, args.long))
        return 0
    runs_dir = Path(tempfile.mkdtemp(prefix="cost-prediction-"))
    base = load_settings()
    engine = {}
    if advertises_amx() and not args.amx:
        engine = {"extra_cmake_flags": [f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"]}
        console.print("this CPU advertises AMX: the engine is built without it (--amx keeps it)")
    for name in args.models.split(","):
        model = None if name == "tiny" else ensure_pretrained(name, base.cache_dir)
        runs = {}
        for depth in (args.short, args.long):
            profile = {
                "depths": list(range(0, depth + 1, args.chunk)),
                "processes": args.processes,
                "chunk": args.chunk,
                "bench_check": False,
                "peaks": False,
            }
            settings = load_settings(model=model, runs_dir=runs_dir, profile=profile, engine=engine)
            runs[depth] = run_profile(settings, console=Console(quiet=True)).path
        console.print(comparison(name, runs[args.short], runs[args.long], runs_dir, args.short, args.long))
    console.print(f"runs: {runs_dir}")
    return 0


def stored_pairs(runs_dir: Path) -> dict[str, dict[int, Path]]:
    """The complete profile runs of a runs folder by model file and max depth."""
    from lab.core.runs import RunFolder

    out: dict[str, dict[int, Path]] = {}
    for folder in sorted(p for p in runs_dir.iterdir() if (p / "manifest.json").exists()):
        run = RunFolder.open(folder)
        m = run.manifest()
        if m.experiment == "profile" and run.ready:
            name = Path(str(m.model.get("path", "?"))).name
            out.setdefault(name, {})[max(m.params["profile"]["depths"])] = folder
    return out


def comparison(name: str, short: Path, long: Path, runs_dir: Path, upto: int, depth: int) -> Table:
    """The long run's crossover and band times at `depth` beside two predictions: from the long run's own depths
    up to `upto` (held out in depth) and from the short run (held out in depth and run)."""
    summary = ProfileSummary.model_validate_json((long / "raw" / "profile_summary.json").read_text())
    meas = measured_at(long, depth)
    preds = []
    for run in (long, short):
        tf, source = profile_fit(str(run), runs_dir, max_depth=upto)
        preds.append(predict(tf, None, [depth], source, name))
    t = Table("", f"measured (to {depth})", title=f"{name}: a profile to {upto} predicts one to {depth}")
    for what in (f"the same run's depths <= {upto}", f"a run to {upto}"):
        for col in (f"predicted from {what}", "predicted / measured", f"+-{TOL:.0%}", "covers"):
            t.add_column(col)
    top = sorted(BANDS, key=lambda b: -(meas[b].value if b in meas else 0))
    rows = [("crossover in time", summary.crossover_ci, [p.crossover for p in preds], 0)]
    rows += [
        (f"{b} ms/token at {depth}", meas.get(b), [p.band_at(depth, b) for p in preds], 4) for b in top if b in meas
    ]
    for label, m, ps, digits in rows:
        cells = [label, m.fmt(digits=digits) if m else summary.crossover_note]
        for p in ps:
            r = ratio(p, m)
            covers = "-" if p is None or m is None else "yes" if p.lo <= m.value <= p.hi else "no"
            cells += [p.fmt(digits=digits) if p else "-", r.fmt() if r else "-", verdict(r, TOL) if r else "-", covers]
        t.add_row(*cells)
    flop = preds[0].flop_crossover
    x = summary.crossover_ci
    t.caption = (
        f"crossover where FLOPs are equal: {'none' if flop is None else f'{flop:,.0f}'}"
        + (f" (measured / FLOP prediction {x.value / flop:.2f})" if x and flop else "")
        + f"; the short run against the long one at the depths both measured: {drift(short, long, upto)}"
    )
    return t


def drift(short: Path, long: Path, upto: int) -> str:
    """How much the two runs differ where they measured the same thing (run-to-run drift on this host)."""
    a, b = ({(r.depth, r.band): r.ms_per_token for r in read_bands(run) if r.depth <= upto} for run in (short, long))
    out = []
    for band in BANDS:
        ratios = [a[k] / b[k] for k in a if k[1] == band and b.get(k)]
        if ratios and a.get((0, band)):
            out.append(f"{band} {min(ratios):.2f}..{max(ratios):.2f}")
    return ", ".join(out)


def read_bands(run: Path) -> list[BandDepth]:
    from lab.core.runs import RunFolder

    return RunFolder.open(run).read(PROFILE_BANDS)


if __name__ == "__main__":
    sys.exit(main())
