"""catalog/metrics.json (`dvc metrics show`): the headline numbers, from the catalog tables."""

from __future__ import annotations

import statistics
from typing import Any


def _median_abs(values: Any) -> float | None:
    vals = [abs(float(v)) for v in values if v == v and v is not None]  # v == v drops NaN
    return round(statistics.median(vals), 6) if vals else None


def compute_metrics(frames: dict[str, Any]) -> dict[str, Any]:
    runs = frames["runs"]
    in_figures = int(runs["in_figures"].sum()) if len(runs) else 0
    out: dict[str, Any] = {"runs": {"total": len(runs), "in_figures": in_figures}}
    points = frames["sweep_points"]
    if len(points):
        usable = points[points["measurable"]]
        out["sweep"] = {
            "runs": int(points["run_id"].nunique()),
            "median_abs_fake_vs_genuine": _median_abs(usable["fake_vs_genuine"]),
            "median_abs_fake_vs_estimate": _median_abs(usable["fake_vs_estimate"]),
        }
    summary = frames["profile_summary"]
    if len(summary):
        started = runs.set_index("run_id")["started_utc"]
        newest = summary.loc[summary["run_id"].map(started).idxmax()]
        crossover = newest["crossover_depth"]
        out["profile"] = {
            "run_id": newest["run_id"],
            "crossover_depth": None if crossover != crossover or crossover is None else round(float(crossover), 1),
            "timed_vs_fused_gap_mean": round(float(newest["timed_vs_fused_gap_mean"]), 6),
            "attn_r2": round(float(newest["attn_r2"]), 6),
        }
    span = frames["replay_span"]
    if len(span):
        out["replay"] = {"span_cases": int(span["cases"].sum()), "span_all_ok": bool(span["ok"].all())}
    return out
