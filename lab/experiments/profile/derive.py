"""What a profile's walls and nodes say: nodes sorted into bands, per-process band rows (medians over a process's
reps), ms/token per band and depth (TIMED share x FUSED chunk ms / chunk) with intervals over processes, the
crossover, the attention fit, TIMED / FUSED and fake / real depth paired by rep, and the run's own time model
(lab.measure.timemodel)."""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from typing import Any

from lab.core.schemas import BANDS, AttnKind, BandDepth, BandProcess, Interval, ProfileSummary, ProfileWall
from lab.core.stats import from_draws, linear_fit, resamples
from lab.experiments.profile.checks import Chunk, chunk_key, chunk_sums, timed_vs_fused
from lab.measure.costmodel import CostModel
from lab.measure.timemodel import TimePrediction, fit, predict
from lab.models.bands import Node, classify_all, resolve_layers

AttnLayers = dict[int, str]  # layer -> "full" or "window", the attention layers of a sliding-window model
KindCells = dict[tuple[int, str, int], float]  # TIMED attn_core ms per (depth, kind, process)


def band_nodes(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add layer and band to every node row; CoverageError (listing nodes) unless 100% covered."""
    by_graph: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in nodes:
        by_graph[chunk_key(r)].append(r)
    for rows in by_graph.values():
        graph = [Node(r["name"], r["op"], r["src0"]) for r in rows]
        bands = classify_all(graph)
        layers = resolve_layers(graph)
        for r, n in zip(rows, graph, strict=True):
            r["band"] = bands[n]
            r["layer"] = layers.get(n.name)
    return nodes


Cells = tuple[dict[tuple[int, int], float], dict[tuple[int, str, int], float], list[int]]


def too_wide(s: ProfileSummary, target: float) -> str:
    """Why the profile's intervals call for another process ('' when they are narrow enough): the crossover
    depth wider than +-target."""
    iv = s.crossover_ci
    if iv is not None and iv.half_width > target:
        return f"the crossover {iv.fmt(digits=0)} is wider than +-{target:.0%}"
    return ""


def process_cells(walls: list[ProfileWall], nodes: list[dict[str, Any]]) -> Cells:
    """(FUSED ms per (depth, process), TIMED band ms per (depth, band, process), the processes): each the median
    over the process's reps, of the profile's own chunks (not the fake-vs-real check's)."""
    fused_reps: dict[tuple[int, int], list[float]] = defaultdict(list)
    for w in walls:
        if w.mode == "fused" and not w.check:
            fused_reps[(w.depth, w.process)].append(w.ms)
    _, band = chunk_sums([r for r in nodes if not r["check"]])
    band_reps: dict[tuple[int, str, int], list[float]] = defaultdict(list)
    for (k, b), ms in band.items():
        band_reps[(k[3], b, k[0])].append(ms)
    fused = {key: statistics.median(v) for key, v in fused_reps.items()}
    band_ms: dict[tuple[int, str, int], float] = defaultdict(float)
    for (d, b, p), v in band_reps.items():
        # a band with no node in some rep is 0 there: the median over all the process's reps
        n = len(fused_reps.get((d, p), v))
        band_ms[(d, b, p)] = statistics.median([*v, *[0.0] * max(0, n - len(v))])
    return fused, band_ms, sorted({p for _, p in fused})


def band_processes(cells: Cells, chunk: int) -> list[BandProcess]:
    """Each band's ms/token in each process on its own (the samples a comparison of two profiles rests on)."""
    fused, band_ms, _ = cells
    out = []
    for depth, p in sorted(fused):
        total = sum(band_ms[(depth, b, p)] for b in BANDS)
        for b in BANDS:
            share = band_ms[(depth, b, p)] / total if total else 0.0
            out.append(
                BandProcess(
                    process=p,
                    depth=depth,
                    band=b,
                    timed_ms=band_ms[(depth, b, p)],
                    ms_per_token=share * fused[(depth, p)] / chunk,
                )
            )
    return out


def kind_cells(nodes: list[dict[str, Any]], layers: AttnLayers) -> KindCells:
    """attn_core's TIMED ms split by the kind of its layer (full attention or a window), per (depth, kind,
    process): the median over the process's reps."""
    per_chunk: dict[tuple[Chunk, str], float] = defaultdict(float)
    chunks: set[Chunk] = set()
    for r in nodes:
        if not r["check"]:
            chunks.add(chunk_key(r))
            if r["band"] == "attn_core" and r.get("layer") in layers:
                per_chunk[(chunk_key(r), layers[r["layer"]])] += r["ms"]
    reps: dict[tuple[int, str, int], list[float]] = defaultdict(list)
    for k in chunks:
        for kind in set(layers.values()):
            reps[(k[3], kind, k[0])].append(per_chunk.get((k, kind), 0.0))
    return {key: statistics.median(v) for key, v in reps.items()}


def derive_for(
    cells: Cells, processes: list[int], chunk: int, kinds: KindCells | None = None
) -> tuple[list[BandDepth], dict[tuple[int, str], float]]:
    """Band rows and attn_core's ms/token per (depth, layer kind) from the medians over `processes` (repeats
    allowed: a resample). A kind's ms/token is its TIMED share x the FUSED chunk ms, as a band's is."""
    fused, band_ms, _ = cells
    rows: list[BandDepth] = []
    by_kind: dict[tuple[int, str], float] = {}
    for depth in sorted({d for d, _ in fused}):
        per_band = {b: statistics.median(band_ms[(depth, b, p)] for p in processes) for b in BANDS}
        total = sum(per_band.values())
        fused_ms = statistics.median(fused[(depth, p)] for p in processes if (depth, p) in fused)
        for kind in {k for _, k, _ in kinds or {}}:
            ms = statistics.median((kinds or {}).get((depth, kind, p), 0.0) for p in processes)
            by_kind[(depth, kind)] = ms / total * fused_ms / chunk if total else 0.0
        for b in BANDS:
            share = per_band[b] / total if total else 0.0
            rows.append(
                BandDepth(
                    depth=depth,
                    band=b,
                    timed_ms=per_band[b],
                    share=share,
                    fused_chunk_ms=fused_ms,
                    ms_per_token=share * fused_ms / chunk,
                )
            )
    return rows, by_kind


def kind_slopes(by_kind: dict[tuple[int, str], float], window: int | None) -> dict[str, float]:
    """Each kind's ms/token per 1k depth: a full-attention layer's over every depth, a window layer's from the
    window on (where each query reads the same number of keys)."""
    out = {}
    for kind in sorted({k for _, k in by_kind}):
        start = fit_start(kind, window)
        pts = sorted((d, v) for (d, k), v in by_kind.items() if k == kind and d >= start)
        if len(pts) >= 2:
            out[kind] = linear_fit([float(d) for d, _ in pts], [v for _, v in pts])[0] * 1000
    return out


def fit_start(kind: str, window: int | None) -> int:
    return (window or 0) if kind == "window" else 0


def derive(
    walls: list[ProfileWall],
    nodes: list[dict[str, Any]],
    chunk: int,
    layers: AttnLayers | None = None,
    window: int | None = None,
) -> tuple[list[BandDepth], ProfileSummary]:
    """The per-depth band table and the summary from the medians over processes (each process's value the
    median over its reps), each number with its interval from a bootstrap over processes, widened for few of
    them; TIMED / FUSED paired by rep. `layers`: a sliding-window model's attention layers by kind, for attn_core
    split into full-attention and window layers (`window`: n_swa)."""
    cells = process_cells(walls, nodes)
    procs = cells[2]
    kinds = kind_cells(nodes, layers) if layers else None
    rows, by_kind = derive_for(cells, procs, chunk, kinds)
    summary = summarize(rows)
    boot_rows, boot_sums, boot_kinds = [], [], []
    for idx in resamples(len(procs), f"profile/{chunk}", count=400):
        b_rows, b_kind = derive_for(cells, [procs[i] for i in idx], chunk, kinds)
        boot_rows.append({(x.depth, x.band): x.ms_per_token for x in b_rows})
        boot_sums.append(summarize(b_rows))
        boot_kinds.append((b_kind, kind_slopes(b_kind, window)))
    n = len(procs)
    summary.attn_kinds = attn_kinds(by_kind, boot_kinds, layers or {}, window, n)
    for row in rows:
        iv = from_draws(row.ms_per_token, [b[(row.depth, row.band)] for b in boot_rows], n, n)
        row.ms_per_token_lo, row.ms_per_token_hi = (iv.lo, iv.hi) if iv else (None, None)
    per_depth, summary.timed_vs_fused_all = timed_vs_fused(walls, nodes)
    for d, iv in per_depth.items():
        summary.timed_vs_fused_gap_ci[str(d)] = iv
        summary.timed_vs_fused_gap[str(d)] = iv.value - 1
    gaps = summary.timed_vs_fused_gap.values()
    summary.timed_vs_fused_gap_mean = statistics.fmean(gaps) if gaps else 0.0
    if summary.crossover_depth is not None:
        summary.crossover_ci = from_draws(
            summary.crossover_depth, [b.crossover_depth for b in boot_sums if b.crossover_depth is not None], n, n
        )
    summary.attn_slope_ci = from_draws(
        summary.attn_slope_ms_per_token_per_1k,
        [b.attn_slope_ms_per_token_per_1k for b in boot_sums],
        n,
        n,
    )
    summary.attn_r2_ci = at_most_one(from_draws(summary.attn_r2, [b.attn_r2 for b in boot_sums], n, n))
    fits = band_fits({(r.depth, r.band): r.ms_per_token for r in rows})
    boot_fits = [band_fits(b) for b in boot_rows]
    for band, (slope, r2) in fits.items():
        if (iv := from_draws(slope, [f[band][0] for f in boot_fits], n, n)) is not None:
            summary.band_slope_ci[band] = iv
        if (iv := at_most_one(from_draws(r2, [f[band][1] for f in boot_fits], n, n))) is not None:
            summary.band_r2_ci[band] = iv
    summary.processes = n
    summary.depths = sorted({r.depth for r in rows})
    return rows, summary


def attn_kinds(
    by_kind: dict[tuple[int, str], float],
    boot: list[tuple[dict[tuple[int, str], float], dict[str, float]]],
    layers: AttnLayers,
    window: int | None,
    n: int,
) -> list[AttnKind]:
    """attn_core per layer kind: ms/token per depth and the slope, each with its interval over the `n` processes
    (`boot`: each resample's per-kind ms/token and slopes)."""
    slopes = kind_slopes(by_kind, window)
    out = []
    for kind in sorted({k for _, k in by_kind}):
        out.append(
            AttnKind(
                kind="full" if kind == "full" else "window",
                layers=sum(1 for k in layers.values() if k == kind),
                window=window if kind == "window" else None,
                ms_per_token={
                    str(d): iv
                    for (d, k), v in sorted(by_kind.items())
                    if k == kind and (iv := from_draws(v, [b[(d, k)] for b, _ in boot], n, n))
                },
                fit_from=fit_start(kind, window),
                slope_ci=from_draws(slopes[kind], [s[kind] for _, s in boot if kind in s], n, n)
                if kind in slopes
                else None,
            )
        )
    return out


def at_most_one(iv: Interval | None) -> Interval | None:
    """An R^2's interval, whose widening for few processes may not pass 1."""
    return iv.model_copy(update={"hi": min(iv.hi, 1.0)}) if iv is not None else None


def band_fits(per: dict[tuple[int, str], float]) -> dict[str, tuple[float, float]]:
    """Each band's linear fit of ms/token against depth (`per`: (depth, band) -> ms/token): (slope per 1,000
    tokens of depth, R^2)."""
    out: dict[str, tuple[float, float]] = {}
    for b in BANDS:
        pts = sorted((d, v) for (d, band), v in per.items() if band == b)
        if len(pts) >= 2:
            slope, _, r2 = linear_fit([float(d) for d, _ in pts], [v for _, v in pts])
            out[b] = (slope * 1000, r2)
    return out


def summarize(rows: list[BandDepth]) -> ProfileSummary:
    per = {(r.depth, r.band): r.ms_per_token for r in rows}
    depths = sorted({r.depth for r in rows})
    crossover: float | None = None
    for d0, d1 in itertools.pairwise(depths):
        a0, f0 = per[(d0, "attn_core")], per[(d0, "ffn_moe")]
        a1, f1 = per[(d1, "attn_core")], per[(d1, "ffn_moe")]
        if a0 <= f0 and a1 > f1:
            t = (f0 - a0) / ((a1 - a0) - (f1 - f0))  # where the two lines meet between d0 and d1
            crossover = d0 + t * (d1 - d0)
            break
    if crossover is None and depths and per[(depths[0], "attn_core")] > per[(depths[0], "ffn_moe")]:
        crossover = float(depths[0])
    xs = [float(d) for d in depths]
    ys = [per[(d, "attn_core")] for d in depths]
    slope, intercept, r2 = linear_fit(xs, ys)
    cv = {}
    for b in ("ffn_moe", "proj", "gdn", "other"):
        vals = [per[(d, b)] for d in depths]
        mean = statistics.fmean(vals)
        cv[b] = statistics.pstdev(vals) / mean if mean else 0.0
    return ProfileSummary(
        max_depth=depths[-1] if depths else 0,
        crossover_depth=crossover,
        crossover_note=f"{crossover:.0f}"
        if crossover is not None
        else f"not reached by depth {depths[-1] if depths else 0}",
        attn_slope_ms_per_token_per_1k=slope * 1000,
        attn_intercept_ms_per_token=intercept,
        attn_r2=r2,
        flat_cv=cv,
        timed_vs_fused_gap={},
        timed_vs_fused_gap_mean=0.0,
    )


def add_time_model(
    summary: ProfileSummary, rows: list[BandProcess], cost: CostModel, run_id: str, model: str, depths: list[int]
) -> TimePrediction | None:
    """The profile's own rates (lab.measure.timemodel), the crossover in time they predict (into its summary) and each
    band's ms/token at those of `depths` beyond the deepest probe (returned: the run's profile_predicted table)."""
    try:
        tf = fit(rows, cost, key=run_id)
    except ValueError as e:  # fewer than two depths
        summary.time_crossover_note = f"no time model: {e}"
        return None
    source = f"this run ({len(tf.depths)} depths to {tf.depths[-1]}, {tf.processes} processes)"
    beyond = [d for d in depths if d > tf.depths[-1]]  # within the probes, the measurement says it: no prediction
    pred = predict(tf, None, beyond, source=source, model=model)
    summary.time_crossover_ci, summary.time_crossover_note = pred.crossover, pred.crossover_note
    summary.band_gflops_ci = {b: r.gflops for b, r in pred.rates.items() if r.gflops is not None}
    summary.attn_overhead_ms_ci = pred.rates["attn_core"].overhead_ms_per_token
    return pred
