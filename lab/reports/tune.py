"""tune: the newest `lab trace tune`: every llama-server cache setting on its grid as the policy model predicts it
(the conversation's prefill seconds against the most memory its caches hold), the predicted front as a line, and
the settings measured (the defaults and the candidates) at their measured prefill with its 95% interval; the
recommended setting starred, its flags and realised share in the title."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd

from lab.core.releases import server_label
from lab.core.settings import ReportSettings
from lab.core.stats import called
from lab.reports.data import figure_rows, newest_run
from lab.reports.style import MUTED, Chart, nothing_yet, title

TITLE = "llama-server cache settings for a recorded workload: predicted prefill against memory, and measured"
ROLES = ["defaults", "candidate"]
COLORS = ["#9aa5b1", "#4e79a7"]


def tune_chart(catalog_dir: Path, runs: pd.DataFrame, settings: ReportSettings) -> Chart:
    width, height = settings.width, settings.height
    run_id = newest_run(runs, "tune")
    rows = figure_rows(catalog_dir, "tune_settings", runs, ["key"], [run_id]) if run_id else pd.DataFrame()
    if rows.empty:
        return nothing_yet(TITLE, "tune", "`lab trace tune CONVERSATION`", width, height)
    x = alt.X(
        "predicted_peak_mib:Q",
        title="memory the caches hold at most (MiB, predicted): checkpoints, RAM cache, --swa-full",
    )
    tips = [alt.Tooltip("flags:N"), alt.Tooltip("predicted_prefill_s:Q", format=".2f", title="predicted s")]
    grid = (
        alt.Chart(rows)
        .mark_circle(size=30, color=MUTED, opacity=0.5)
        .encode(x=x, y=alt.Y("predicted_prefill_s:Q", title="the conversation's prefill (s)"), tooltip=tips)
    )
    on_front = rows[rows["on_front"]].sort_values("predicted_peak_mib")
    line = alt.Chart(on_front).mark_line(color=MUTED, strokeDash=[4, 3]).encode(x=x, y="predicted_prefill_s:Q")
    measured = rows[rows["role"] != "grid"]
    color = alt.Color("role:N", sort=ROLES, scale=alt.Scale(domain=ROLES, range=COLORS))
    bars = alt.Chart(measured).mark_rule().encode(x=x, y="today_s_lo:Q", y2="today_s_hi:Q", color=color)
    points = (
        alt.Chart(measured)
        .mark_point(filled=True, size=80)
        .encode(
            x=x,
            y="today_s_value:Q",
            color=color,
            shape=alt.Shape("recommended:N", title="recommended"),
            tooltip=[*tips, alt.Tooltip("today_s_value:Q", format=".2f", title="measured s")],
        )
    )
    best = measured[measured["recommended"]]
    notes = [f"run {run_id}; grey: every setting predicted, dashed: the predicted front; bars: 95% intervals"]
    if not best.empty:
        b = best.iloc[0]
        realised = f"{b['realised_value']:.1%} [{b['realised_lo']:.1%}, {b['realised_hi']:.1%}]"
        server = server_label(str(b.get("server_version", "")))
        notes.append(f"recommended for {server}: {b['flags']}, realising {realised} of the optimum's saving")
        if pd.notna(b.get("vs_defaults_value")):
            lo, value, hi = (100 * b[f"vs_defaults_{k}"] for k in ("lo", "value", "hi"))
            notes[-1] += f", {value:+.1f} [{lo:+.1f}, {hi:+.1f}] points on the defaults ({called(b['verdict'], value)})"
    chart = alt.layer(grid, line, bars, points).properties(width=2 * width, height=height)
    return chart.properties(title=title(TITLE, *notes))
