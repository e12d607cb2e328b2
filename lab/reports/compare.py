"""compare: two sweep runs or two in-process arms runs per (L, new), or two profile runs per (depth, band), as
B / A ratio heatmaps drawn from the compare core's rows (lab.catalog.compare)."""

from __future__ import annotations

from typing import NamedTuple

import altair as alt
import pandas as pd

from lab.catalog.compare import TOLERANCE, CompareError, Comparison
from lab.catalog.samples import TOTAL_BAND
from lab.core.schemas import BANDS
from lab.core.verdicts import CALLS, COLOR
from lab.reports.style import Chart, title

ARM_METRICS = (
    "fake_median_ms",
    "genuine_median_ms",
    "plain_median_ms",
    "baseline_median_ms",
    "opt_prefill_ms",
    "restore_prep_ci_value",
)


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


def compare_chart(c: Comparison, label_a: str | None = None, label_b: str | None = None) -> Chart:
    """B / A per (L, new) for two sweep runs, per (depth, band) for two profile runs (1 = no change): the rows
    of the compare core, the same ones `lab compare` prints."""
    grid = _sweep(c) if c.experiment == "sweep" else _profile(c)
    base = alt.Chart().encode(
        x=alt.X(grid.x, title=grid.x_title, axis=alt.Axis(labelAngle=0)),
        y=alt.Y(grid.y, title=grid.y_title, sort=grid.y_sort),
    )
    called = alt.Color("called:N", scale=alt.Scale(domain=list(CALLS), range=[COLOR[k] for k in CALLS]), title="called")
    rect = base.mark_rect(stroke="white", strokeWidth=1.5).encode(
        # each cell in its verdict's colour (lab.core.verdicts), the ratio written in it
        color=called,
        tooltip=[
            alt.Tooltip(f"{grid.panel}:N"),
            alt.Tooltip(grid.x, title=grid.x_title),
            alt.Tooltip(grid.y, title=grid.y_title or grid.y.split(":")[0]),
            alt.Tooltip("a:Q", title="A", format=".4g"),
            alt.Tooltip("b:Q", title="B", format=".4g"),
            alt.Tooltip("ratio:Q", title="B / A", format=".3f"),
            alt.Tooltip("ci:N", title="95% interval"),
        ],
    )
    text = base.mark_text(fontSize=12).encode(
        text=alt.Text("ratio:Q", format=".2f"),
        color=alt.condition("datum.called != 'undecided'", alt.value("white"), alt.value("#222")),
    )
    cells = alt.layer(rect, text, data=grid.ratios).properties(width=alt.Step(58), height=alt.Step(32))
    chart = cells.facet(
        column=alt.Column(f"{grid.panel}:N", sort=grid.panels, title=None, header=alt.Header(labelFontSize=13))
    )
    return chart.properties(
        title=title(
            f"{grid.what}: B / A",
            f"A = {label_a or c.run_a}",
            f"B = {label_b or c.run_b}",
            f"called at 1 +- {c.tolerance or TOLERANCE:.0%}: faster (blue), slower (red), lower or higher (gold: "
            "a ratio of two arms), the same (green), undecided (grey)",
        )
    )


def _frame(c: Comparison) -> pd.DataFrame:
    """Long rows (keys..., metric, a, b, ratio) where both runs have a value."""
    rows = [
        {
            **dict(zip(c.keys, r.key, strict=True)),
            "metric": r.metric,
            "a": r.a,
            "b": r.b,
            "ratio": r.ratio,
            "called": r.called(c.tolerance or TOLERANCE),
            "ci": r.ci.fmt() if r.ci else "no samples",
        }
        for r in c.rows
        if r.a is not None and r.b is not None and r.a > 0 and r.b > 0
    ]
    if not rows:
        raise CompareError(f"{c.run_a} and {c.run_b} share no points")
    return pd.DataFrame(rows)


def _sweep(c: Comparison) -> Grid:
    """One panel per arm and place (through the server, in one process) over the (L, new) grid of text steps."""
    out = _frame(c)
    out = out[out["image"].isna() & out["metric"].isin(ARM_METRICS)].copy()  # the (L, new) grid: text steps
    if out.empty:
        raise CompareError(f"{c.run_a} and {c.run_b} share no text-only points")
    place = {"server": "", "inproc": " (in one process)"}
    out["arm"] = [c.kind.metrics[m] + place[w] for m, w in zip(out["metric"], out["where"], strict=True)]
    arms = [c.kind.metrics[m] + place[w] for w in place for m in ARM_METRICS]
    arms = [a for a in arms if a in set(out["arm"])]
    return Grid(out, "L:O", "L (cached tokens)", "new:O", "new tokens", "ascending", "arm", arms, "Sweep medians")


def _profile(c: Comparison) -> Grid:
    out = _frame(c)
    out["panel"] = "ms per token"
    order = [*BANDS, *sorted(set(out["band"]) - {*BANDS, TOTAL_BAND}), TOTAL_BAND]
    return Grid(out, "depth:O", "depth (tokens in context)", "band:N", "", order, "panel", ["ms per token"], "Profile")
