"""agreement: the measured fake-prefix prefill against the estimate opt_prefill = new / prefill_tps(L).

Left, the fake arm on log-log axes with y = x and the +-tolerance band, each point with its 95% interval as
an error bar and its verdicts in the tooltip; right, the controls on the same estimate: the genuine hit (must
match fake) and the baseline full prefill (what a cache hit saves), with their intervals.

Image steps (a screenshot in the new part; the estimate is (image + new) / prefill_tps(L) + encode) get a
marker shape per screenshot size, and a third panel splits the fake arm's prompt time of each image point into
the vision encode and the LM prefill. A catalog without image steps draws no image columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from lab.core.schemas import MIN_SUPPORT
from lab.core.settings import ReportSettings
from lab.reports.agreement_encode import IMAGE_SHAPES, encode_panel, size_key
from lab.reports.data import drawn_runs, figure_rows
from lab.reports.style import MUTED, Chart, error_bars, extent, log_axis, nothing_yet, run_filter, run_param, title

TITLE = "Fake-prefix prefill vs the estimate"
# fake / estimate's split (the server's per-request share) and the batch-size effect beside it
SPLIT = {"genuine_vs_estimate_ci": "server share (genuine / estimate)", "batch_effect_ci": "per token vs 512 tokens"}
SPLIT_COLUMNS = [f"{name}_{end}" for name in SPLIT for end in ("value", "lo", "hi")]
NEEDED = ("opt_prefill_ms", "fake_median_ms", "genuine_median_ms", "baseline_median_ms", "L", "new")
COLUMNS = [
    "run_id",
    "host",
    "point",
    "L",
    "new",
    "measurable",
    "opt_prefill_ms",
    "fake_median_ms",
    "genuine_median_ms",
    "baseline_median_ms",
    "fake_vs_estimate_ci_value",
    "fake_vs_genuine_ci_value",
    "image",
    "image_tokens",
    "encode_ms",
    "lm_ms",
    "fake_median_lo_ms",
    "fake_median_hi_ms",
    "genuine_median_lo_ms",
    "genuine_median_hi_ms",
    "baseline_median_lo_ms",
    "baseline_median_hi_ms",
    "estimate_verdict",
    "genuine_verdict",
    "fake_vs_estimate_ci_lo",
    "fake_vs_estimate_ci_hi",
    "fake_vs_genuine_ci_lo",
    "fake_vs_genuine_ci_hi",
    "fake_vs_estimate_ci_thin",
    "fake_vs_genuine_ci_thin",
    *SPLIT_COLUMNS,
    "reps",
]
IMAGE_COLUMNS = ("image", "image_tokens", "encode_ms", "lm_ms")
ARMS = {"genuine_median_ms": "genuine hit", "baseline_median_ms": "baseline (no cache)"}
PARAM = "sweep_run"
TEXT_STEP = "text only"


def agreement_chart(catalog_dir: Path, runs: pd.DataFrame, settings: ReportSettings) -> Chart:
    side = min(settings.width, settings.height)
    pts = figure_rows(catalog_dir, "sweep_points", runs, keys=["L", "new", "point"], where="server")
    if pts.empty or any(c not in pts.columns for c in NEEDED):
        return nothing_yet(TITLE, "sweep run", "`lab sweep`", 2 * side, side)
    pts, sizes = _points(pts)
    runs_drawn = drawn_runs(runs, "sweep")
    runs_drawn = runs_drawn[runs_drawn["run_id"].isin(pts["run_id"])]
    look = _look(pts, sizes, settings.tolerance, side)
    param = run_param(PARAM, "sweep run ", runs_drawn, "all", all_label=f"all {len(runs_drawn)} runs")
    scatter = alt.hconcat(_fake_panel(pts, look), _controls_panel(pts, look), spacing=40).resolve_scale(
        x="independent", y="independent"
    )
    notes = _notes(pts, runs_drawn, look)
    bars = encode_panel(pts, runs_drawn, sizes, 2 * side + 40, PARAM) if sizes else None
    if bars is None:
        return scatter.add_params(param).properties(title=title(TITLE, *notes))
    return (
        alt.vconcat(scatter, bars, spacing=36)
        .add_params(param)
        .resolve_scale(x="independent", y="independent", color="independent", opacity="independent")
        .properties(title=title(TITLE, *notes))
    )


def _points(pts: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The drawn points' columns, their verdicts and fake / estimate's split in words, and the image sizes."""
    pts = pts[pts["opt_prefill_ms"].notna() & pts["fake_median_ms"].notna()]
    pts = pts[COLUMNS].copy()
    pts["measurable"] = pts["measurable"].astype(bool)
    pts["split"] = [_split(row) for _, row in pts.iterrows()]
    for name in ("fake_vs_estimate", "fake_vs_genuine"):  # the tooltip's ratio - 1, from the stored ratio
        pts[name] = pts[f"{name}_ci_value"] - 1
    verdicts = zip(
        pts["estimate_verdict"],
        pts["fake_vs_estimate_ci_lo"],
        pts["fake_vs_estimate_ci_hi"],
        pts["fake_vs_estimate_ci_thin"],
        pts["genuine_verdict"],
        pts["fake_vs_genuine_ci_lo"],
        pts["fake_vs_genuine_ci_hi"],
        pts["fake_vs_genuine_ci_thin"],
        strict=True,
    )
    pts["verdicts"] = [
        f"vs estimate {e} {_ci(el, eh, et)} · vs genuine {g} {_ci(gl, gh, gt)}"
        for e, el, eh, et, g, gl, gh, gt in verdicts
    ]
    pts["image"] = pts["image"].astype(object).where(pts["image"].notna(), None)
    for c in ("image_tokens", "encode_ms", "lm_ms"):
        pts[c] = pd.to_numeric(pts[c], errors="coerce").astype(float)
    sizes = sorted({str(i) for i in pts["image"].dropna()}, key=size_key)
    pts["step"] = pts["image"].fillna(TEXT_STEP).astype(str)
    if not sizes:  # text only: no image columns in the spec
        pts = pts.drop(columns=[*IMAGE_COLUMNS, "step"])
    return pts, sizes


@dataclass
class Look:
    """What both scatter panels share: encodings, the estimate's axis title, tooltips, the tolerance band."""

    side: int
    tol: float
    sizes: list[str]
    color: Any
    stroke: Any
    fill_opacity: Any
    estimate: str
    tooltip_base: list[Any]
    step_shape: dict[str, Any]


def _look(pts: pd.DataFrame, sizes: list[str], tol: float, side: int) -> Look:
    news = sorted(int(n) for n in pts["new"].unique())
    look = Look(
        side=side,
        tol=tol,
        sizes=sizes,
        color=alt.Color("new:N", title="new tokens", sort=news, scale=alt.Scale(scheme="tableau10")),
        stroke=alt.Stroke("new:N", sort=news, scale=alt.Scale(scheme="tableau10"), legend=None),
        fill_opacity=alt.condition("datum.measurable", alt.value(0.85), alt.value(0.0)),
        estimate="estimate new / prefill_tps(L) (ms)",
        tooltip_base=[
            alt.Tooltip("run_id:N", title="run"),
            alt.Tooltip("host:N"),
            alt.Tooltip("L:Q", title="L (tokens)"),
            alt.Tooltip("new:Q", title="new (tokens)"),
            alt.Tooltip("opt_prefill_ms:Q", title="estimate (ms)", format=".1f"),
        ],
        step_shape={},
    )
    if sizes:  # image steps: a shape per step kind (both panels), the image's numbers in every tooltip
        look.estimate = "estimate (image + new) / prefill_tps(L) + encode (ms)"
        steps = [TEXT_STEP, *sizes]
        shapes = ["circle", *(IMAGE_SHAPES[i % len(IMAGE_SHAPES)] for i in range(len(sizes)))]
        look.step_shape["shape"] = alt.Shape(
            "step:N", title="step", sort=steps, scale=alt.Scale(domain=steps, range=shapes)
        )
        look.tooltip_base += [
            alt.Tooltip("step:N"),
            alt.Tooltip("image_tokens:Q", title="image tokens"),
            alt.Tooltip("encode_ms:Q", title="vision encode (ms)", format=".1f"),
            alt.Tooltip("lm_ms:Q", title="LM prefill (ms)", format=".1f"),
        ]
    return look


def _fake_panel(pts: pd.DataFrame, look: Look) -> Chart:
    """Left: the fake prefix against the estimate, with the tolerance band around y = x."""
    tol = look.tol
    fake_lo, fake_hi = extent(pts, ["opt_prefill_ms", "fake_median_ms"])
    fake_scale = alt.Scale(type="log", domain=[fake_lo, fake_hi], nice=False)
    fake_axis = log_axis(fake_lo, fake_hi)
    band = pd.DataFrame({"x": [fake_lo, fake_hi]})
    band["lo"], band["hi"] = band["x"] * (1 - tol), band["x"] * (1 + tol)
    band_layer = (
        alt.Chart(band)
        .mark_area(color="#9aa5b1", opacity=0.25, clip=True)
        .encode(x=alt.X("x:Q", scale=fake_scale, title=look.estimate), y=alt.Y("lo:Q", scale=fake_scale), y2="hi:Q")
    )
    diag_fake = alt.Chart(band).mark_line(color=MUTED, strokeDash=[5, 4], clip=True).encode(x="x:Q", y="x:Q")
    fake_points = (
        alt.Chart(pts)
        .mark_point(filled=True, size=80, strokeWidth=1.5)
        .encode(
            x=alt.X("opt_prefill_ms:Q", scale=fake_scale, axis=fake_axis, title=look.estimate),
            y=alt.Y("fake_median_ms:Q", scale=fake_scale, axis=fake_axis, title="measured fake prefill, median (ms)"),
            color=look.color,
            stroke=look.stroke,
            fillOpacity=look.fill_opacity,
            **look.step_shape,
            tooltip=[
                *look.tooltip_base,
                alt.Tooltip("fake_median_ms:Q", title="fake (ms)", format=".1f"),
                alt.Tooltip("fake_vs_estimate:Q", title="fake / estimate - 1", format="+.1%"),
                alt.Tooltip("fake_vs_genuine:Q", title="fake / genuine - 1", format="+.1%"),
                alt.Tooltip("measurable:N"),
                alt.Tooltip("verdicts:N", title="verdicts (95%)"),
                alt.Tooltip("split:N", title="fake / estimate's split"),
                alt.Tooltip("reps:Q"),
            ],
        )
        .transform_filter(run_filter(PARAM, allow_all=True))
    )
    # the 95% interval of each point's fake median, as a vertical error bar
    fake_bars = error_bars(pts, "fake_median_lo_ms", "fake_median_hi_ms", fake_scale, look.color, PARAM)
    return alt.layer(band_layer, diag_fake, fake_bars, fake_points).properties(
        width=look.side, height=look.side, title=title("fake (n_fake_cached = L)", f"grey band: y = x ± {tol:.0%}")
    )


def _controls(pts: pd.DataFrame, look: Look) -> pd.DataFrame:
    """One row per point and control arm (genuine hit, baseline), with each arm's own interval."""
    image_fields = ["step", *IMAGE_COLUMNS[1:]] if look.sizes else []
    controls = pts.melt(
        id_vars=["run_id", "host", "point", "L", "new", "measurable", "opt_prefill_ms", *image_fields],
        value_vars=list(ARMS),
        var_name="arm",
        value_name="measured_ms",
    ).dropna(subset=["measured_ms"])
    for end in ("lo", "hi"):  # each control's own interval beside it
        cols = {arm: arm.replace("_ms", f"_{end}_ms") for arm in ARMS}
        part = pts.melt(
            id_vars=["run_id", "point"],
            value_vars=list(cols.values()),
            var_name="arm",
            value_name=f"measured_{end}_ms",
        )
        part["arm"] = part["arm"].map({v: k for k, v in cols.items()})
        controls = controls.merge(part, on=["run_id", "point", "arm"], how="left")
    controls["arm"] = controls["arm"].map(ARMS)
    return controls


def _controls_panel(pts: pd.DataFrame, look: Look) -> Chart:
    """Right: the genuine-hit control and the baseline on the same estimate."""
    controls = _controls(pts, look)
    arms, shapes2 = list(ARMS.values()), ["diamond", "square"]
    x_lo, x_hi = extent(controls, ["opt_prefill_ms"])
    ctl_x = alt.Scale(type="log", domain=[x_lo, x_hi], nice=False)
    ctl_lo, ctl_hi = extent(controls, ["opt_prefill_ms", "measured_ms"])
    ctl_y = alt.Scale(type="log", domain=[ctl_lo, ctl_hi], nice=False)
    diag_ctl = (
        alt.Chart(pd.DataFrame({"x": [ctl_lo, ctl_hi]}))
        .mark_line(color=MUTED, strokeDash=[5, 4], clip=True)
        .encode(x=alt.X("x:Q", scale=ctl_x, title=look.estimate), y=alt.Y("x:Q", scale=ctl_y))
    )
    # the control arm: its own shape when every step is text only; with image steps the shape is the step kind,
    # and the baseline is drawn faded (it sits well above y = x anyway)
    arm_channel: dict[str, Any] = (
        {"opacity": alt.Opacity("arm:N", title="control arm", sort=arms, scale=alt.Scale(domain=arms, range=[1, 0.4]))}
        if look.sizes
        else {"shape": alt.Shape("arm:N", title="control arm", sort=arms, scale=alt.Scale(domain=arms, range=shapes2))}
    )
    ctl_points = (
        alt.Chart(controls)
        .mark_point(filled=True, size=80, strokeWidth=1.5)
        .encode(
            x=alt.X("opt_prefill_ms:Q", scale=ctl_x, axis=log_axis(x_lo, x_hi), title=look.estimate),
            y=alt.Y("measured_ms:Q", scale=ctl_y, axis=log_axis(ctl_lo, ctl_hi), title="measured prefill (ms)"),
            color=look.color,
            stroke=look.stroke,
            fillOpacity=look.fill_opacity,
            **look.step_shape,
            **arm_channel,
            tooltip=[*look.tooltip_base, alt.Tooltip("arm:N"), alt.Tooltip("measured_ms:Q", title="ms", format=".1f")],
        )
        .transform_filter(run_filter(PARAM, allow_all=True))
    )
    ctl_bars = error_bars(controls, "measured_lo_ms", "measured_hi_ms", ctl_y, look.color, PARAM)
    return alt.layer(diag_ctl, ctl_bars, ctl_points).properties(
        width=look.side,
        height=look.side,
        title=title("controls: genuine hit and baseline", "genuine should sit on y = x; baseline shows the saving"),
    )


def _notes(pts: pd.DataFrame, runs_drawn: pd.DataFrame, look: Look) -> list[str]:
    """The chart's subtitle: what is drawn, how many points agree, what hollow markers and bars mean."""
    sizes = look.sizes
    n_image = int(pts["image"].notna().sum()) if sizes else 0
    kinds = f" ({n_image} with a screenshot: {', '.join(sizes)})" if sizes else ""
    notes = [f"{len(runs_drawn)} complete sweep run(s), {len(pts)} (L, new) points{kinds}; dashed: y = x"]
    if not pts["measurable"].all():
        notes.append("hollow markers: not measurable (padded KV below the 256-column floor, L changes nothing)")
    counts = {v: int((pts["estimate_verdict"] == v).sum()) for v in ("agree", "disagree", "undecided")}
    gcounts = {v: int((pts["genuine_verdict"] == v).sum()) for v in ("agree", "disagree", "undecided")}
    told = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    notes.append(
        "bars: 95% intervals; "
        + (f"verdicts vs the estimate {told}; " if told else "vs the estimate: the server's share, measured; ")
        + "verdicts vs the genuine hit "
        + ", ".join(f"{n} {v}" for v, n in gcounts.items() if n)
    )
    return notes


def _split(row: pd.Series) -> str:
    """What fake / estimate is made of at a point, as the sweep's table shows it (changes, with intervals)."""
    parts = [
        f"{label} {row[f'{name}_value'] - 1:+.1%} {_ci(row[f'{name}_lo'], row[f'{name}_hi'])}"
        for name, label in SPLIT.items()
        if row[f"{name}_value"] is not None and row[f"{name}_value"] == row[f"{name}_value"]
    ]
    return " · ".join(parts) or "-"


def _ci(lo: Any, hi: Any, thin: Any = None) -> str:
    """An interval as a change, marked when it rests on fewer than MIN_SUPPORT processes or samples."""
    if lo is None or hi is None or lo != lo or hi != hi:
        return ""
    mark = f" (from fewer than {MIN_SUPPORT} processes or samples)" if thin is True else ""
    return f"[{lo - 1:+.1%}, {hi - 1:+.1%}]{mark}"
