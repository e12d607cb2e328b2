"""versus: two configurations of one interleaved run (`--vs`), B/A per point and metric with its interval paired by
process pair, each called faster, slower, the same or undecided (the catalog's versus_rows), the newest run of
each experiment (sweep, profile, decode) by default, any other from the dropdown."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd

from lab.core.schemas import MIN_SUPPORT
from lab.core.settings import ReportSettings
from lab.core.verdicts import CALLS, COLOR
from lab.reports.data import figure_rows
from lab.reports.style import Chart, newest_run_picker, nothing_yet, title

TITLE = "Two configurations in one run: B / A"
PARAM = "versus_run"
CALLED = list(CALLS)
COLORS = [COLOR[c] for c in CALLS]  # one colour per verdict, as the terminal and the compare heatmap


def versus_chart(catalog_dir: Path, runs: pd.DataFrame, settings: ReportSettings) -> Chart:
    rows = figure_rows(catalog_dir, "versus_rows", runs, keys=["metric", "point"])
    if rows.empty:
        return nothing_yet(TITLE, "run of two configurations", "`lab sweep --vs server.threads=2`", 520, 120)
    rows = rows[rows["ratio_value"].notna()].copy()
    rows["point"] = rows["point"].where(rows["point"] != "", "geomean")
    thin = rows["ratio_thin"] if "ratio_thin" in rows.columns else pd.Series(False, index=rows.index)
    thin_note = f"fewer than {MIN_SUPPORT} process pairs or reps: about their range"
    rows["rests_on"] = [thin_note if t is True else "" for t in thin]
    _, param, keep = newest_run_picker(PARAM, "run ", None, runs, rows)
    base = alt.Chart().transform_filter(keep)
    y = alt.Y("point:N", title=None, sort=None)
    x = alt.X("ratio_value:Q", title="B / A", scale=alt.Scale(zero=False))
    color = alt.Color("called:N", scale=alt.Scale(domain=CALLED, range=COLORS), title="called")
    dash = alt.condition("datum.rests_on != ''", alt.value([3, 2]), alt.value([1, 0]))  # thin: dashed
    bars = base.mark_rule(strokeWidth=2).encode(x="ratio_lo:Q", x2="ratio_hi:Q", y=y, color=color, strokeDash=dash)
    dots = base.mark_point(filled=True, size=60).encode(
        x=x,
        y=y,
        color=color,
        tooltip=[
            alt.Tooltip("point:N"),
            alt.Tooltip("metric:N"),
            alt.Tooltip("a:Q", title="A", format=".4g"),
            alt.Tooltip("b:Q", title="B", format=".4g"),
            alt.Tooltip("ratio_value:Q", title="B / A", format=".3f"),
            alt.Tooltip("ratio_lo:Q", title="95% low", format=".3f"),
            alt.Tooltip("ratio_hi:Q", title="95% high", format=".3f"),
            alt.Tooltip("ratio_processes:Q", title="process pairs"),
            alt.Tooltip("called:N"),
            alt.Tooltip("rests_on:N", title="interval"),
        ],
    )
    one = base.mark_rule(color="#5f6b7a", strokeDash=[4, 3]).encode(x=alt.datum(1.0))
    panel = alt.layer(one, bars, dots).properties(width=settings.width, height=alt.Step(16))
    chart = alt.layer(panel, data=rows).facet(row=alt.Row("metric:N", title=None, header=alt.Header(labelAngle=0)))
    chart = chart.resolve_scale(y="independent").add_params(param)
    return chart.properties(
        title=title(
            TITLE,
            "each point: B / A with its 95% interval, process pairs (one process of each side, next in time) then "
            "reps resampled on both sides",
            "blue: B faster, red: slower, green: the same within the run's tolerance, grey: undecided; "
            f"dashed: an interval from fewer than {MIN_SUPPORT} process pairs or reps",
        )
    )
