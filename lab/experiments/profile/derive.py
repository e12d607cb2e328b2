"""What a profile's walls and nodes say: nodes sorted into bands, per-cycle band rows, ms/token per band and depth
(TIMED share x FUSED chunk ms / chunk) with intervals over cycles, the crossover, the attention fit, the TIMED/FUSED
gap, and the run's own time model (lab.measure.timemodel)."""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from typing import Any

from lab.core.schemas import BANDS, AttnKind, BandCycle, BandDepth, ProfileSummary, ProfileWall
from lab.core.stats import from_draws, linear_fit, resamples
from lab.measure.costmodel import CostModel
from lab.measure.timemodel import TimePrediction, fit, predict
from lab.models.bands import Node, classify_all, resolve_layers

AttnLayers = dict[int, str]  # layer -> "full" or "window", the attention layers of a sliding-window model
KindCells = dict[tuple[int, str, int], float]  # TIMED attn_core ms per (depth, kind, cycle)


def band_nodes(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add layer and band to every node row; CoverageError (listing nodes) unless 100% covered."""
    by_graph: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in nodes:
        by_graph[(r["cycle"], r["depth"])].append(r)
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
    """Why the profile's intervals call for another cycle ('' when they are narrow enough): the TIMED/FUSED gap
    at some depth, or the crossover depth, wider than +-target."""
    wide = [d for d, iv in s.timed_vs_fused_gap_ci.items() if iv.half_width > target]
    if wide:
        return f"the TIMED/FUSED gap is wider than +-{target:.0%} at depth {', '.join(wide[:4])}"
    if s.crossover_ci is not None and s.crossover_ci.half_width > target:
        return f"the crossover {s.crossover_ci.fmt(digits=0)} is wider than +-{target:.0%}"
    return ""


def cycle_cells(walls: list[ProfileWall], nodes: list[dict[str, Any]]) -> Cells:
    """(FUSED ms per (depth, cycle), TIMED band ms per (depth, band, cycle), the cycles)."""
    fused = {(w.depth, w.cycle): w.ms for w in walls if w.mode == "fused"}
    band_ms: dict[tuple[int, str, int], float] = defaultdict(float)
    for r in nodes:
        band_ms[(r["depth"], r["band"], r["cycle"])] += r["ms"]
    return fused, band_ms, sorted({r["cycle"] for r in nodes})


def band_cycles(cells: Cells, chunk: int) -> list[BandCycle]:
    """Each band's ms/token in each cycle on its own (the samples a comparison of two profiles rests on)."""
    fused, band_ms, _ = cells
    out = []
    for depth, c in sorted(fused):
        total = sum(band_ms[(depth, b, c)] for b in BANDS)
        for b in BANDS:
            share = band_ms[(depth, b, c)] / total if total else 0.0
            out.append(
                BandCycle(
                    cycle=c,
                    depth=depth,
                    band=b,
                    timed_ms=band_ms[(depth, b, c)],
                    ms_per_token=share * fused[(depth, c)] / chunk,
                )
            )
    return out


def kind_cells(nodes: list[dict[str, Any]], layers: AttnLayers) -> KindCells:
    """attn_core's TIMED ms split by the kind of its layer (full attention or a window)."""
    out: KindCells = defaultdict(float)
    for r in nodes:
        if r["band"] == "attn_core" and r.get("layer") in layers:
            out[(r["depth"], layers[r["layer"]], r["cycle"])] += r["ms"]
    return out


def derive_for(
    cells: Cells, cycles: list[int], chunk: int, kinds: KindCells | None = None
) -> tuple[list[BandDepth], dict[int, float], dict[tuple[int, str], float]]:
    """Band rows, TIMED/FUSED gaps per depth and attn_core's ms/token per (depth, layer kind) from the medians
    over `cycles` (repeats allowed: a resample). A kind's ms/token is its TIMED share x the FUSED chunk ms, as a
    band's is."""
    fused, band_ms, _ = cells
    rows: list[BandDepth] = []
    gaps: dict[int, float] = {}
    by_kind: dict[tuple[int, str], float] = {}
    for depth in sorted({d for d, _ in fused}):
        per_band = {b: statistics.median(band_ms[(depth, b, c)] for c in cycles) for b in BANDS}
        total = sum(per_band.values())
        fused_ms = statistics.median(fused[(depth, c)] for c in cycles if (depth, c) in fused)
        gaps[depth] = total / fused_ms - 1
        for kind in {k for _, k, _ in kinds or {}}:
            ms = statistics.median((kinds or {}).get((depth, kind, c), 0.0) for c in cycles)
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
    return rows, gaps, by_kind


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
    """The per-depth band table and the summary from the medians over cycles, each number with its interval
    from a bootstrap over cycles (a resample draws whole cycles: a cycle's passes ran back to back; with one
    cycle per instrument process, whole processes). `layers`: a sliding-window model's attention layers by
    kind, for attn_core split into full-attention and window layers (`window`: n_swa)."""
    cells = cycle_cells(walls, nodes)
    cycles = cells[2]
    kinds = kind_cells(nodes, layers) if layers else None
    rows, gaps, by_kind = derive_for(cells, cycles, chunk, kinds)
    summary = summarize(rows, gaps)
    boot_rows, boot_sums, boot_kinds = [], [], []
    for idx in resamples(len(cycles), f"profile/{chunk}", count=400):
        b_rows, b_gaps, b_kind = derive_for(cells, [cycles[i] for i in idx], chunk, kinds)
        boot_rows.append({(x.depth, x.band): x.ms_per_token for x in b_rows})
        boot_sums.append(summarize(b_rows, b_gaps))
        boot_kinds.append((b_kind, kind_slopes(b_kind, window)))
    n, procs = len(cycles), len({w.process for w in walls})  # a resample draws whole cycles, so whole processes
    slopes = kind_slopes(by_kind, window)
    for kind in sorted({k for _, k in by_kind}):
        summary.attn_kinds.append(
            AttnKind(
                kind="full" if kind == "full" else "window",
                layers=sum(1 for k in (layers or {}).values() if k == kind),
                window=window if kind == "window" else None,
                ms_per_token={
                    str(d): iv
                    for (d, k), v in sorted(by_kind.items())
                    if k == kind and (iv := from_draws(v, [b[(d, k)] for b, _ in boot_kinds], n, procs))
                },
                fit_from=fit_start(kind, window),
                slope_ci=from_draws(slopes[kind], [s[kind] for _, s in boot_kinds if kind in s], n, procs)
                if kind in slopes
                else None,
            )
        )
    for row in rows:
        iv = from_draws(row.ms_per_token, [b[(row.depth, row.band)] for b in boot_rows], n, procs)
        row.ms_per_token_lo, row.ms_per_token_hi = (iv.lo, iv.hi) if iv else (None, None)
    for d, gap in gaps.items():  # as the ratio TIMED / FUSED
        iv = from_draws(1 + gap, [1 + b.timed_vs_fused_gap[str(d)] for b in boot_sums], n, procs)
        if iv is not None:
            summary.timed_vs_fused_gap_ci[str(d)] = iv
    if summary.crossover_depth is not None:
        summary.crossover_ci = from_draws(
            summary.crossover_depth, [b.crossover_depth for b in boot_sums if b.crossover_depth is not None], n, procs
        )
    summary.attn_slope_ci = from_draws(
        summary.attn_slope_ms_per_token_per_1k, [b.attn_slope_ms_per_token_per_1k for b in boot_sums], n, procs
    )
    summary.attn_r2_ci = from_draws(summary.attn_r2, [b.attn_r2 for b in boot_sums], n, procs)
    summary.cycles, summary.processes = n, procs
    return rows, summary


def summarize(rows: list[BandDepth], gaps: dict[int, float]) -> ProfileSummary:
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
        timed_vs_fused_gap={str(d): g for d, g in gaps.items()},
        timed_vs_fused_gap_mean=statistics.fmean(gaps.values()) if gaps else 0.0,
    )


def add_time_model(
    summary: ProfileSummary, rows: list[BandCycle], cost: CostModel, run_id: str, model: str, depths: list[int]
) -> TimePrediction | None:
    """The profile's own rates (lab.measure.timemodel), the crossover in time they predict (into its summary) and each
    band's ms/token at `depths` (returned: the run's profile_predicted table)."""
    try:
        tf = fit(rows, cost, key=run_id)
    except ValueError as e:  # fewer than two depths
        summary.time_crossover_note = f"no time model: {e}"
        return None
    source = f"this run ({len(tf.depths)} depths to {tf.depths[-1]}, {tf.cycles} cycles)"
    pred = predict(tf, None, depths, source=source, model=model)
    summary.time_crossover_ci, summary.time_crossover_note = pred.crossover, pred.crossover_note
    summary.band_gflops_ci = {b: r.gflops for b, r in pred.rates.items() if r.gflops is not None}
    summary.attn_overhead_ms_ci = pred.rates["attn_core"].overhead_ms_per_token
    return pred
