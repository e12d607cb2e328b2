"""The look shared by every report chart: fonts, colours, the empty state and the run dropdown."""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import pandas as pd

from lab.reports.data import drawn_runs, newest_run, run_label

# Altair's top-level chart classes (Chart, LayerChart, HConcatChart, ...) share no precise static type.
Chart = Any

MUTED = "#5f6b7a"
GOOD = "#d9efd5"
BAD = "#f6d2d2"
NEUTRAL = "#eef1f4"


def finish(chart: Chart) -> Chart:
    """Top-level configuration: white background (PNGs are not transparent), readable type, quiet frames."""
    return (
        chart.configure(background="white", padding=16)
        .configure_title(fontSize=17, anchor="start", subtitleFontSize=12, subtitleColor=MUTED, offset=10)
        .configure_axis(labelFontSize=11, titleFontSize=12, titleFontWeight="normal", gridColor="#e6e9ed")
        .configure_legend(labelFontSize=11, titleFontSize=12, titleFontWeight="normal", symbolSize=90)
        .configure_header(labelFontSize=12, titleFontSize=12)
        .configure_view(stroke="#d0d5db")
    )


def title(text: str, *subtitle: str) -> alt.TitleParams:
    return alt.TitleParams(text=text, subtitle=[s for s in subtitle if s] or alt.Undefined)


def empty_chart(heading: str, lines: list[str], width: int, height: int) -> Chart:
    """A chart with nothing to draw: the heading and why, as text marks, so the page still renders."""
    df = pd.DataFrame({"i": range(len(lines)), "line": lines})
    return (
        alt.Chart(df, title=title(heading))
        .mark_text(fontSize=14, color=MUTED)
        .encode(y=alt.Y("i:O", axis=None), text="line:N")
        .properties(width=width, height=max(60, min(height, 40 * len(lines))))
    )


def nothing_yet(heading: str, what: str, run: str, width: int, height: int) -> Chart:
    """The empty state of a chart with no complete `what` in the catalog: what to `run` (then repro) to draw it."""
    lines = [f"No complete {what} in the catalog yet.", f"Run {run}, then `dvc repro` (or `lab report`)."]
    return empty_chart(heading, lines, width, height)


def band_tips(*more: alt.Tooltip) -> list[alt.Tooltip]:
    """The tooltip of a profile band at a depth (profile_bands): the band, the depth, then `more`."""
    return [alt.Tooltip("band:N"), alt.Tooltip("depth:Q", title="depth (tokens)"), *more]


def run_param(name: str, prompt: str, runs: pd.DataFrame, default: str, all_label: str | None = None) -> Any:
    """A dropdown over `runs` (bound to the variable `name`); with `all_label`, a first option "all"."""
    options = [str(r) for r in runs["run_id"]]
    labels = [run_label(r) for _, r in runs.iterrows()]
    if all_label is not None:
        options, labels = ["all", *options], [all_label, *labels]
    return alt.param(name=name, value=default, bind=alt.binding_select(options=options, labels=labels, name=prompt))


def run_filter(param: str, allow_all: bool = False) -> str:
    """A Vega expression keeping the rows of the run selected in dropdown `param`."""
    expr = f"datum.run_id === {param}"
    return f"{param} === 'all' || {expr}" if allow_all else expr


def newest_run_picker(
    name: str, prompt: str, experiment: str | None, runs: pd.DataFrame, rows: pd.DataFrame
) -> tuple[pd.DataFrame, Any, str]:
    """For a chart that draws one run at a time: the drawn runs (of `experiment`, if given) that have `rows`, a dropdown
    over them (default: the newest) and the filter expression keeping the chosen run's rows."""
    drawn = drawn_runs(runs, experiment)
    drawn = drawn[drawn["run_id"].isin(rows["run_id"])].reset_index(drop=True)
    default = newest_run(drawn, experiment) or str(rows["run_id"].iloc[-1])
    return drawn, run_param(name, prompt, drawn, default), run_filter(name)


def error_bars(df: pd.DataFrame, lo: str, hi: str, y_scale: Any, color: Any, param: str) -> Chart:
    """Vertical rules from `lo` to `hi` at each point's estimate (rows without an interval draw none)."""
    return (
        alt.Chart(df)
        .mark_rule(strokeWidth=1.5, opacity=0.7)
        .encode(x="opt_prefill_ms:Q", y=alt.Y(f"{lo}:Q", scale=y_scale), y2=f"{hi}:Q", color=color)
        .transform_filter(f"isValid(datum.{lo}) && isValid(datum.{hi})")
        .transform_filter(run_filter(param, allow_all=True))
    )


def extent(df: pd.DataFrame, columns: list[str]) -> tuple[float, float]:
    """Log-axis domain around the positive values of `columns`, with a margin."""
    values = pd.concat([df[c] for c in columns]).astype(float)
    values = values[values > 0]
    if values.empty:
        return 1.0, 10.0
    return float(values.min()) / 1.15, float(values.max()) * 1.15


def log_axis(lo: float, hi: float) -> alt.Axis:
    """Ticks at 1, 2, 3 and 5 times the powers of ten inside [lo, hi]: readable labels on a short log axis."""
    ticks: list[float] = []
    exp = math.floor(math.log10(lo))
    while 10.0**exp <= hi:
        ticks += [m * 10.0**exp for m in (1, 2, 3, 5) if lo <= m * 10.0**exp <= hi]
        exp += 1
    return alt.Axis(values=ticks, format=",~g", grid=True)


def info_panel(info: pd.DataFrame, keep: str, width: int, height: int) -> Chart:
    """The provenance lines under a chart, for the run the picker shows."""
    return (
        alt.Chart(info)
        .mark_text(align="left", baseline="top", lineBreak="\n", fontSize=12, color=MUTED)
        .encode(x=alt.value(0), y=alt.value(0), text="info:N")
        .transform_filter(keep)
        .properties(width=width, height=height, view=alt.ViewConfig(stroke=None))
    )
