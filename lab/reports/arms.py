"""arms: the sweep in one process (`lab sweep --where inproc|both`), per new-token
count: baseline (from the fill passes and any direct reps), genuine hit (restored), plain genuine hit and fake
prefix vs L (median decode ms with its 95% interval), then what the genuine hit's cache read costs: the restore
ms and a memcpy of as many bytes vs L, with the blob's size and the bandwidth in the tooltip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from lab.core.settings import ReportSettings
from lab.reports.data import figure_rows
from lab.reports.style import Chart, info_panel, newest_run_picker, nothing_yet, title

TITLE = "In one process: what the new tokens cost after each way of having the prefix"
PARAM = "arms_run"
ARMS = {
    "baseline_fill": "baseline (L + new, fill passes)",
    "baseline": "baseline (L + new, direct)",
    "genuine": "genuine hit",
    "plain": "plain genuine hit",
    "fake": "fake prefix",
}
COLORS = ["#9d9da1", "#6f6f73", "#4c78a8", "#72b7b2", "#f58518"]
COST = {"restore_prep_ci": "restore (set_data_ext)", "memcpy_ci": "memcpy of the same bytes"}


def arms_chart(catalog_dir: Path, runs: pd.DataFrame, settings: ReportSettings) -> Chart:
    width, height = settings.width, settings.height
    points = figure_rows(catalog_dir, "sweep_points", runs, keys=["L", "new"], where="inproc")
    if points.empty or "genuine_median_ms" not in points.columns:
        return nothing_yet(TITLE, "in-process sweep", "`lab arms`", width, height)
    drawn, param, keep = newest_run_picker(PARAM, "run ", None, runs, points)
    panels = [
        _per_new_panel(_arm_frame(points), keep, width, height),
        _restore_panel(_cost_frame(points), keep, width, height),
    ]
    info = _info_frame(catalog_dir, runs)
    if not info.empty:
        panels.append(info_panel(info, keep, width, 50))
    return (
        alt.vconcat(*panels, spacing=28)
        .add_params(param)
        .resolve_scale(color="independent")
        .properties(title=title(TITLE, f"{len(drawn)} complete arms run(s); choose one in the dropdown"))
    )


def _per_new_panel(arms: pd.DataFrame, keep: Any, width: int, height: int) -> Any:
    """Each arm's decode ms against L with its interval, one panel per `new`."""
    L_x = alt.X("L:Q", title="L (cached tokens)", scale=alt.Scale(type="log", nice=False))
    arm_color = alt.Color(
        "arm:N", title="arm", sort=list(ARMS.values()), scale=alt.Scale(domain=list(ARMS.values()), range=COLORS)
    )
    tips = _long_tips("arm", ".2f", alt.Tooltip("n:Q", title="samples"))
    line = (
        alt.Chart()
        .mark_line(point=True)
        .encode(
            x=L_x, y=alt.Y("ms:Q", title="decode ms (log)", scale=alt.Scale(type="log")), color=arm_color, tooltip=tips
        )
    )
    bars = alt.Chart().mark_rule(strokeWidth=2).encode(x=L_x, y="lo:Q", y2="hi:Q", color=arm_color)
    return alt.hconcat(
        *(
            alt.layer(bars, line, data=arms[arms["new"] == new])
            .transform_filter(keep)
            .properties(width=max(200, width // 2), height=height, title=title(f"new = {new} tokens"))
            for new in sorted(set(arms["new"]))
        ),
        title=title("decode ms of the new tokens", "bars: 95% interval of the median; log scales"),
    )


def _restore_panel(cost: pd.DataFrame, keep: Any, width: int, height: int) -> Any:
    """The genuine hit's cache read (the restore) and a memcpy of as many bytes against L, with intervals."""
    series = alt.Color(
        "series:N",
        title="cache read",
        sort=list(COST.values()),
        scale=alt.Scale(domain=list(COST.values()), range=["#54a24b", "#9d9da1"]),
    )
    cost_tips = _long_tips(
        "series",
        ".3f",
        alt.Tooltip("blob_mb:Q", title="state blob MB", format=".2f"),
        alt.Tooltip("gbps:Q", title="GB/s", format=".2f"),
    )
    cost_line = (
        alt.Chart()
        .mark_line(point=True)
        .encode(
            x=alt.X("L:Q", title="L (cached tokens)"),
            y=alt.Y("ms:Q", title="ms"),
            color=series,
            detail="new:N",
            tooltip=cost_tips,
        )
    )
    cost_bars = alt.Chart().mark_rule(strokeWidth=2).encode(x="L:Q", y="lo:Q", y2="hi:Q", color=series)
    return (
        alt.layer(cost_bars, cost_line, data=cost)
        .transform_filter(keep)
        .properties(
            width=width,
            height=max(160, height // 2),
            title=title(
                "the genuine hit's cache read vs L",
                "the depth-L state blob read back per step, against a plain memcpy of as many bytes",
            ),
        )
    )


def _ci(lo: Any, hi: Any) -> str:
    return f"[{lo:.2f}, {hi:.2f}]" if pd.notna(lo) and pd.notna(hi) else "-"


def _long_rows(
    points: pd.DataFrame, series: dict[str, str], label: str, columns: tuple[str, str, str]
) -> Iterator[tuple[pd.Series, str, dict[str, Any]]]:
    """Per point and series it has a value of: the point, the series' key and its long row (run_id, L, new, `label`,
    ms, lo, hi, ci). `columns` names the value's, lo's and hi's columns, `{}` standing for the series' key."""
    for _, r in points.iterrows():
        for key, name in series.items():
            ms, lo, hi = (r.get(c.format(key)) for c in columns)
            if ms is None or pd.isna(ms):
                continue
            row = {"run_id": r["run_id"], "L": int(r["L"]), "new": int(r["new"]), label: name, "ms": float(ms)}
            yield r, key, {**row, "lo": lo, "hi": hi, "ci": _ci(lo, hi)}


def _long_tips(label: str, ms_format: str, *more: alt.Tooltip) -> list[alt.Tooltip]:
    """The tooltip of a long row (_long_rows): its `label`, L, new, the median ms and its interval, then `more`."""
    ms, ci = alt.Tooltip("ms:Q", title="median ms", format=ms_format), alt.Tooltip("ci:N", title="95% interval")
    return [alt.Tooltip(f"{label}:N"), alt.Tooltip("L:Q"), alt.Tooltip("new:Q"), ms, ci, *more]


def _arm_frame(points: pd.DataFrame) -> pd.DataFrame:
    """Long rows (run_id, L, new, arm, ms, lo, hi) of the arms each point measured."""
    medians = ("{}_median_ms", "{}_median_lo_ms", "{}_median_hi_ms")
    rows = [{**row, "n": int(r[f"{arm}_n_ok"])} for r, arm, row in _long_rows(points, ARMS, "arm", medians)]
    return pd.DataFrame(rows, columns=["run_id", "L", "new", "arm", "ms", "lo", "hi", "ci", "n"])


def _cost_frame(points: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for r, _, row in _long_rows(points, COST, "series", ("{}_value", "{}_lo", "{}_hi")):
        blob, ms = r.get("blob_bytes"), row["ms"]
        if blob is not None and not pd.isna(blob):
            rows.append({**row, "blob_mb": float(blob) / 1e6, "gbps": float(blob) / ms / 1e6 if ms else None})
    return pd.DataFrame(rows, columns=["run_id", "L", "new", "series", "ms", "lo", "hi", "ci", "blob_mb", "gbps"])


def _info_frame(catalog_dir: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """One text per run: the blob's bytes per cell (measured and predicted) and the restore's bandwidth."""
    summary = figure_rows(catalog_dir, "arms_summary", runs, keys=[])
    if summary.empty:
        return pd.DataFrame()
    infos = []
    for _, r in summary.iterrows():
        first = f"{r['run_id']} ({r['host']})"
        if pd.notna(r.get("bytes_per_cell")):
            first += f"  ·  state blob {r['bytes_per_cell']:,.0f} B per cell + {r['fixed_bytes']:,.0f} B fixed"
            if pd.notna(r.get("predicted_bytes_per_cell")):
                first += (
                    f" (the GGUF predicts {r['predicted_bytes_per_cell']:,.0f} + {r['predicted_fixed_bytes']:,.0f})"
                )
        second = ""
        v, lo, hi = (r.get(f"restore_vs_memcpy_ci_{k}") for k in ("value", "lo", "hi"))
        if v is not None and pd.notna(v):
            second = f"restore runs at {v:.0%} [{lo:.0%}, {hi:.0%}] of memcpy bandwidth"
        v, lo, hi = (float(r.get(f"fake_vs_genuine_ci_{k}") or "nan") for k in ("value", "lo", "hi"))
        if pd.notna(v):
            second += f"  ·  fake/genuine over all reps {v - 1:+.1%} [{lo - 1:+.1%}, {hi - 1:+.1%}]"
        infos.append({"run_id": r["run_id"], "info": first + "\n" + second})
    return pd.DataFrame(infos, columns=["run_id", "info"])
