"""conversation: the newest conversation replay, step by step: each arm's prefill ms (no cache, today's server,
the optimum) with its 95% interval, a dashed rule where the agent evicted (the prompt diverged from the previous
one), and a triangle where today's server restored a context checkpoint."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd

from lab.reports.data import figure_rows, newest_run
from lab.reports.style import MUTED, Chart, nothing_yet, title
from lab.settings import ReportSettings

TITLE = "An agent conversation, step by step: what today's server pays, what a perfect cache would"
ARMS = {"no_cache_ms": "no cache", "today_ms": "today's server", "optimum_ms": "optimum (fake prefix)"}
COLORS = ["#9aa5b1", "#e15759", "#4e79a7"]


def conversation_chart(catalog_dir: Path, runs: pd.DataFrame, settings: ReportSettings) -> Chart:
    width, height = settings.width, settings.height
    run_id = newest_run(runs, "conversation")
    steps = (
        pd.DataFrame() if run_id is None else figure_rows(catalog_dir, "conversation_steps", runs, ["step"], [run_id])
    )
    if steps.empty:
        return nothing_yet(TITLE, "conversation replay", "`lab trace replay CONVERSATION`", width, height)
    frames = []
    for col, arm in ARMS.items():
        part = steps[["task_id", "step", "new", "common", f"{col}_value", f"{col}_lo", f"{col}_hi"]].copy()
        part.columns = ["task_id", "step", "new", "common", "ms", "lo", "hi"]
        part["arm"] = arm
        frames.append(part)
    long = pd.concat(frames, ignore_index=True).dropna(subset=["ms"])
    arms = list(ARMS.values())
    color = alt.Color("arm:N", title="arm", sort=arms, scale=alt.Scale(domain=arms, range=COLORS))
    x = alt.X("step:O", title="step of the conversation", axis=alt.Axis(labelAngle=0))
    base = alt.Chart(long).encode(x=x, color=color)
    lines = base.mark_line(point=True).encode(
        y=alt.Y("ms:Q", title="prefill (ms)"),
        tooltip=[
            alt.Tooltip("task_id:N", title="task"),
            alt.Tooltip("step:O"),
            alt.Tooltip("arm:N"),
            alt.Tooltip("ms:Q", format=".1f"),
            alt.Tooltip("common:Q", title="shared with the step before (L)"),
            alt.Tooltip("new:Q", title="new tokens"),
        ],
    )
    bars = base.mark_rule().encode(y="lo:Q", y2="hi:Q")
    layers: list[Chart] = [bars, lines]
    evicted = steps[steps["diverged_at"].notna()]
    if not evicted.empty:
        rules = alt.Chart(evicted).mark_rule(color=MUTED, strokeDash=[4, 3]).encode(x=x)
        labels = (
            alt.Chart(evicted)
            .mark_text(align="left", dx=3, dy=-4, color=MUTED, baseline="bottom")
            .encode(x=x, y=alt.value(0), text=alt.value("eviction"))
        )
        layers += [rules, labels]
    restored = steps[steps["checkpoint_restores"] > 0]
    if not restored.empty:
        layers.append(
            alt.Chart(restored)
            .mark_point(shape="triangle-up", size=90, filled=True, color=COLORS[1])
            .encode(x=x, y=alt.Y("today_ms_value:Q"), tooltip=[alt.Tooltip("checkpoint_restores:Q")])
        )
    notes = [
        f"run {run_id}; bars: 95% intervals over reps; dashed: the agent evicted (the prompt diverged from the "
        "previous one); triangles: today's server restored a context checkpoint"
    ]
    return alt.layer(*layers).properties(width=2 * width, height=height, title=title(TITLE, *notes))
