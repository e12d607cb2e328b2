"""conversation: the newest conversation replay, step by step: each arm's prefill ms (no cache, today's server,
the optimum) with its 95% interval, a dashed rule where the prompt departs from the previous prompt and reply
(an eviction, a dropped reasoning), and a triangle where today's server restored a context checkpoint; one
panel per task."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd

from lab.core.settings import ReportSettings
from lab.reports.data import figure_rows, newest_run
from lab.reports.style import MUTED, Chart, nothing_yet, title

TITLE = "An agent conversation, step by step: what today's server pays, what a perfect cache would"
ARMS = {"no_cache_ms": "no cache", "today_ms": "today's server", "optimum_ms": "optimum (fake prefix)"}
COLORS = ["#9aa5b1", "#e15759", "#4e79a7"]
MAX_TASKS = 6  # panels, one per task, stacked


def conversation_chart(catalog_dir: Path, runs: pd.DataFrame, settings: ReportSettings) -> Chart:
    width, height = settings.width, settings.height
    run_id = newest_run(runs, "conversation")
    if run_id is None:
        return nothing_yet(TITLE, "conversation replay", "`lab trace replay CONVERSATION`", width, height)
    steps = figure_rows(catalog_dir, "conversation_steps", runs, ["step"], [run_id])
    if steps.empty:
        return nothing_yet(TITLE, "conversation replay", "`lab trace replay CONVERSATION`", width, height)
    tasks = list(dict.fromkeys(steps["task_id"]))
    shown = tasks[:MAX_TASKS]
    totals = figure_rows(catalog_dir, "conversation_tasks", runs, ["task_id"], [run_id])
    heads = {str(r["task_id"]): task_head(r) for _, r in totals.iterrows()}
    panels = [_task_panel(steps[steps["task_id"] == t], heads.get(t, t), 2 * width, height) for t in shown]
    more = f"; the first {MAX_TASKS} of {len(tasks)} tasks" if len(tasks) > MAX_TASKS else ""
    notes = [
        f"run {run_id}{more}; bars: 95% intervals over reps; dashed: the prompt departs from the previous prompt and "
        "reply before its end (an eviction, a dropped reasoning); triangles: today's server restored a context "
        "checkpoint"
    ]
    return alt.vconcat(*panels).properties(title=title(TITLE, *notes))  # each panel keeps its task's title


def task_head(row: pd.Series) -> str:
    """A task's panel title: the three totals and the share of the saving today's server realised."""

    def iv(col: str, fmt: str) -> str:
        return f"{row[f'{col}_value']:{fmt}} [{row[f'{col}_lo']:{fmt}}, {row[f'{col}_hi']:{fmt}}]"

    if pd.isna(row.get("realised_value")):
        return str(row["task_id"])
    return (
        f"{row['task_id']}: prefill s, no cache {iv('no_cache_s', '.2f')}, today {iv('today_s', '.2f')}, optimum "
        f"{iv('optimum_s', '.2f')}; today's server realised {iv('realised', '.1%')} of the saving"
    )


def _task_panel(steps: pd.DataFrame, task: str, width: int, height: int) -> Chart:
    """One task's conversation: the three arms along its steps, its divergences (each with its cause) and
    checkpoint restores."""
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
    evicted = steps[steps["diverged_at"].notna()].copy()
    if not evicted.empty:
        evicted["why"] = evicted["cause"].fillna("diverges") if "cause" in evicted else "diverges"
        rules = alt.Chart(evicted).mark_rule(color=MUTED, strokeDash=[4, 3]).encode(x=x)
        labels = (
            alt.Chart(evicted)
            .mark_text(align="left", dx=3, dy=-4, color=MUTED, baseline="bottom")
            .encode(x=x, y=alt.value(0), text="why:N")
        )
        layers += [rules, labels]
    restored = steps[steps["checkpoint_restores"] > 0]
    if not restored.empty:
        layers.append(
            alt.Chart(restored)
            .mark_point(shape="triangle-up", size=160, filled=True, color=COLORS[1], stroke="black", strokeWidth=0.5)
            .encode(x=x, y=alt.Y("today_ms_value:Q"), tooltip=[alt.Tooltip("checkpoint_restores:Q")])
        )
    return alt.layer(*layers).properties(width=width, height=height, title=task)
