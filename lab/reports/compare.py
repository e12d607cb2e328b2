"""compare: two sweep runs per (L, new), or two profile runs per (depth, band), as B / A ratio heatmaps."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import altair as alt
import pandas as pd

from lab.experiments.bands import BANDS
from lab.reports.data import figure_rows, run_label, runs_table
from lab.reports.style import Chart, title

SWEEP_METRICS = {
    "fake_median_ms": "fake",
    "genuine_median_ms": "genuine hit",
    "baseline_median_ms": "baseline",
    "opt_prefill_ms": "estimate",
}
TOTAL = "all bands (FUSED chunk)"


class CompareError(ValueError):
    pass


class Grid(NamedTuple):
    """What one comparison draws: long ratio rows, the heatmap axes, and the facet (one panel per value)."""

    ratios: pd.DataFrame
    x: str  # field:type
    x_title: str
    y: str
    y_title: str
    y_sort: list[str] | str
    panel: str
    panels: list[str]
    what: str


def compare_chart(catalog_dir: Path, run_a: str, run_b: str) -> Chart:
    """B / A per (L, new) for two sweep runs, per (depth, band) for two profile runs (1 = no change)."""
    runs = runs_table(catalog_dir)
    a, b = resolve(runs, run_a), resolve(runs, run_b)
    if a["experiment"] != b["experiment"]:
        raise CompareError(f"{a['run_id']} is a {a['experiment']} run, {b['run_id']} a {b['experiment']} run")
    if a["experiment"] == "sweep":
        grid = _sweep(catalog_dir, runs, a, b)
    elif a["experiment"] == "profile":
        grid = _profile(catalog_dir, runs, a, b)
    else:
        raise CompareError(f"compare draws sweep or profile runs, not {a['experiment']} ({a['run_id']})")
    lo, hi = float(grid.ratios["ratio"].min()), float(grid.ratios["ratio"].max())
    spread = max(abs(lo - 1), abs(hi - 1), 0.05)
    base = alt.Chart().encode(
        x=alt.X(grid.x, title=grid.x_title, axis=alt.Axis(labelAngle=0)),
        y=alt.Y(grid.y, title=grid.y_title, sort=grid.y_sort),
    )
    rect = base.mark_rect(stroke="white", strokeWidth=1.5).encode(
        color=alt.Color(
            "ratio:Q",
            title="B / A",
            scale=alt.Scale(scheme="redblue", reverse=True, domain=[1 - spread, 1 + spread], clamp=True),
            legend=alt.Legend(format=".2f", gradientLength=max(80, 32 * grid.ratios[grid.y.split(":")[0]].nunique())),
        ),
        tooltip=[
            alt.Tooltip(f"{grid.panel}:N"),
            alt.Tooltip(grid.x, title=grid.x_title),
            alt.Tooltip(grid.y, title=grid.y_title or grid.y.split(":")[0]),
            alt.Tooltip("a:Q", title="A", format=".4g"),
            alt.Tooltip("b:Q", title="B", format=".4g"),
            alt.Tooltip("ratio:Q", title="B / A", format=".3f"),
        ],
    )
    text = base.mark_text(fontSize=12).encode(
        text=alt.Text("ratio:Q", format=".2f"),
        color=alt.condition(f"abs(datum.ratio - 1) > {0.6 * spread:.6g}", alt.value("white"), alt.value("#222")),
    )
    cells = alt.layer(rect, text, data=grid.ratios).properties(width=alt.Step(58), height=alt.Step(32))
    chart = cells.facet(
        column=alt.Column(f"{grid.panel}:N", sort=grid.panels, title=None, header=alt.Header(labelFontSize=13))
    )
    return chart.properties(
        title=title(
            f"{grid.what}: B / A",
            f"A = {run_label(a)}",
            f"B = {run_label(b)}",
            "blue: B takes less time than A, red: more; 1.00 = no change",
        )
    )


def resolve(runs: pd.DataFrame, ref: str) -> pd.Series:
    exact = runs[runs["run_id"] == ref]
    found = exact if not exact.empty else runs[runs["run_id"].astype(str).str.startswith(ref)]
    if len(found) != 1:
        raise CompareError(f"no unique run {ref!r} in the catalog ({len(found)} match)")
    return found.iloc[0]


def _pair(df: pd.DataFrame, a: pd.Series, b: pd.Series, keys: list[str], metrics: list[str]) -> pd.DataFrame:
    """Long rows (keys..., metric, a, b, ratio) for the keys both runs have."""
    if df.empty:
        raise CompareError(f"neither {a['run_id']} nor {b['run_id']} has rows in the catalog")
    side: dict[str, pd.DataFrame] = {}
    for tag, run in (("a", a), ("b", b)):
        rows = df[df["run_id"] == run["run_id"]]
        if rows.empty:
            raise CompareError(f"{run['run_id']} has no rows in the catalog (incomplete, or not ingested yet)")
        side[tag] = rows.melt(id_vars=keys, value_vars=metrics, var_name="metric", value_name=tag)
    out = side["a"].merge(side["b"], on=[*keys, "metric"], how="inner").dropna(subset=["a", "b"])
    out = out[(out["a"] > 0) & (out["b"] > 0)].copy()
    if out.empty:
        raise CompareError(f"{a['run_id']} and {b['run_id']} share no points")
    out["ratio"] = out["b"] / out["a"]
    return out.reset_index(drop=True)


def _sweep(catalog_dir: Path, runs: pd.DataFrame, a: pd.Series, b: pd.Series) -> Grid:
    pts = figure_rows(catalog_dir, "sweep_points", runs, keys=["L", "new"], run_ids=[a["run_id"], b["run_id"]])
    if "image" in pts.columns:  # the (L, new) grid is the text-only steps; `lab compare` lists image steps too
        pts = pts[pts["image"].isna()]
    metrics = [m for m in SWEEP_METRICS if m in pts.columns]
    out = _pair(pts, a, b, ["L", "new"], metrics)
    out["arm"] = out["metric"].map(SWEEP_METRICS)
    arms = list(SWEEP_METRICS.values())
    return Grid(out, "L:O", "L (cached tokens)", "new:O", "new tokens", "ascending", "arm", arms, "Sweep medians")


def _profile(catalog_dir: Path, runs: pd.DataFrame, a: pd.Series, b: pd.Series) -> Grid:
    bands = figure_rows(catalog_dir, "profile_bands", runs, keys=["depth", "band"], run_ids=[a["run_id"], b["run_id"]])
    out = _pair(bands, a, b, ["depth", "band"], ["ms_per_token"])
    total = _pair(bands.drop_duplicates(["run_id", "depth"]), a, b, ["depth"], ["fused_chunk_ms"])
    total["band"] = TOTAL
    out = pd.concat([out, total], ignore_index=True)
    out["panel"] = "ms per token"
    order = [*BANDS, *sorted(set(out["band"]) - {*BANDS, TOTAL}), TOTAL]
    return Grid(out, "depth:O", "depth (tokens in context)", "band:N", "", order, "panel", ["ms per token"], "Profile")
