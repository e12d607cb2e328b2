"""catalog/metrics.json (`dvc metrics show`): the headline numbers, from the catalog tables."""

from __future__ import annotations

from typing import Any

from lab.catalog.tables import RunRecord, rows_at, unflatten
from lab.core.stats import median_interval


def _median_abs(values: Any, key: str) -> dict[str, float | int] | None:
    """The median of |values| over points, with its 95% interval (bootstrap over the points)."""
    iv = median_interval([abs(float(v)) for v in values if v == v and v is not None], key=key)  # v == v drops NaN
    return (
        None if iv is None else {"value": round(iv.value, 6), "lo": round(iv.lo, 6), "hi": round(iv.hi, 6), "n": iv.n}
    )


def _num(v: Any) -> float | None:
    return None if v is None or v != v else round(float(v), 1)


def _newest_profiled(runs: Any, profiled: set[str]) -> str:
    """The newest of the profiled runs, by the catalog's one rule (lab.catalog.newest.age)."""
    from lab.catalog.newest import age  # the newest module reads run folders through ingest, which imports this

    records = [unflatten(r, RunRecord) for r in runs.to_dict("records") if r["run_id"] in profiled]
    return max(records, key=age).run_id


def compute_metrics(frames: dict[str, Any]) -> dict[str, Any]:
    runs = frames["runs"]
    in_figures = int(runs["in_figures"].sum()) if len(runs) else 0
    out: dict[str, Any] = {"runs": {"total": len(runs), "in_figures": in_figures}}
    points = rows_at(frames["sweep_points"], "server")
    if len(points):
        usable = points[points["measurable"]]
        out["sweep"] = {
            "runs": int(points["run_id"].nunique()),
            "median_abs_fake_vs_genuine": _median_abs(usable["fake_vs_genuine_ci_value"] - 1, "genuine"),
            "median_abs_fake_vs_estimate": _median_abs(usable["fake_vs_estimate_ci_value"] - 1, "estimate"),
        }
    summary = frames["profile_summary"]
    if len(summary):
        newest = summary[summary["run_id"] == _newest_profiled(runs, set(summary["run_id"]))].iloc[0]
        crossover = newest["crossover_depth"]
        out["profile"] = {
            "run_id": newest["run_id"],
            "crossover_depth": None if crossover != crossover or crossover is None else round(float(crossover), 1),
            "timed_vs_fused_gap_mean": round(float(newest["timed_vs_fused_gap_mean"]), 6),
            "crossover_lo": _num(newest.get("crossover_ci_lo")),
            "crossover_hi": _num(newest.get("crossover_ci_hi")),
            "attn_r2": round(float(newest["attn_r2"]), 6),
        }
    span = frames["rebuild_span"]
    if len(span):
        out["rebuild"] = {"span_cases": int(span["cases"].sum()), "span_all_ok": bool(span["ok"].all())}
    return out
