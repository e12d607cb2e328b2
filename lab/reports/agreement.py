"""agreement: the measured fake-prefix prefill against the estimate opt_prefill = new / prefill_tps(L) (seed 000).

Left, the fake arm on log-log axes with y = x and the +-tolerance band; right, the controls on the same
estimate: the genuine hit (must match fake) and the baseline full prefill (what a cache hit saves).
"""

from __future__ import annotations

import math
from pathlib import Path

import altair as alt
import pandas as pd

from lab.reports.data import drawn_runs, figure_rows
from lab.reports.style import MUTED, Chart, empty_chart, run_filter, run_param, title
from lab.settings import ReportSettings

TITLE = "Fake-prefix prefill vs the estimate"
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
    "fake_vs_estimate",
    "fake_vs_genuine",
]
ARMS = {"genuine_median_ms": "genuine hit", "baseline_median_ms": "baseline (no cache)"}
PARAM = "sweep_run"


def agreement_chart(catalog_dir: Path, runs: pd.DataFrame, settings: ReportSettings) -> Chart:
    side = min(settings.width, settings.height)
    pts = figure_rows(catalog_dir, "sweep_points", runs, keys=["L", "new"])
    if pts.empty or any(c not in pts.columns for c in NEEDED):
        return empty_chart(
            TITLE,
            ["No complete sweep run in the catalog yet.", "Run `lab sweep`, then `dvc repro` (or `lab report`)."],
            2 * side,
            side,
        )
    pts = pts[pts["opt_prefill_ms"].notna() & pts["fake_median_ms"].notna()]
    pts = pts[[c for c in COLUMNS if c in pts.columns]].copy()
    if "measurable" not in pts.columns:
        pts["measurable"] = True
    pts["measurable"] = pts["measurable"].fillna(True).astype(bool)
    runs_drawn = drawn_runs(runs, "sweep")
    runs_drawn = runs_drawn[runs_drawn["run_id"].isin(pts["run_id"])]
    news = sorted(int(n) for n in pts["new"].unique())
    tol = settings.tolerance

    param = run_param(PARAM, "sweep run ", runs_drawn, "all", all_label=f"all {len(runs_drawn)} runs")
    color = alt.Color("new:N", title="new tokens", sort=news, scale=alt.Scale(scheme="tableau10"))
    stroke = alt.Stroke("new:N", sort=news, scale=alt.Scale(scheme="tableau10"), legend=None)
    fill_opacity = alt.condition("datum.measurable", alt.value(0.85), alt.value(0.0))
    estimate = "estimate new / prefill_tps(L) (ms)"
    tooltip_base = [
        alt.Tooltip("run_id:N", title="run"),
        alt.Tooltip("host:N"),
        alt.Tooltip("L:Q", title="L (tokens)"),
        alt.Tooltip("new:Q", title="new (tokens)"),
        alt.Tooltip("opt_prefill_ms:Q", title="estimate (ms)", format=".1f"),
    ]

    # left: fake vs estimate
    fake_lo, fake_hi = _extent(pts, ["opt_prefill_ms", "fake_median_ms"])
    fake_scale = alt.Scale(type="log", domain=[fake_lo, fake_hi], nice=False)
    fake_axis = _log_axis(fake_lo, fake_hi)
    band = pd.DataFrame({"x": [fake_lo, fake_hi]})
    band["lo"], band["hi"] = band["x"] * (1 - tol), band["x"] * (1 + tol)
    band_layer = (
        alt.Chart(band)
        .mark_area(color="#9aa5b1", opacity=0.25, clip=True)
        .encode(x=alt.X("x:Q", scale=fake_scale, title=estimate), y=alt.Y("lo:Q", scale=fake_scale), y2="hi:Q")
    )
    diag_fake = alt.Chart(band).mark_line(color=MUTED, strokeDash=[5, 4], clip=True).encode(x="x:Q", y="x:Q")
    fake_points = (
        alt.Chart(pts)
        .mark_point(filled=True, size=80, strokeWidth=1.5)
        .encode(
            x=alt.X("opt_prefill_ms:Q", scale=fake_scale, axis=fake_axis, title=estimate),
            y=alt.Y("fake_median_ms:Q", scale=fake_scale, axis=fake_axis, title="measured fake prefill, median (ms)"),
            color=color,
            stroke=stroke,
            fillOpacity=fill_opacity,
            tooltip=[
                *tooltip_base,
                alt.Tooltip("fake_median_ms:Q", title="fake (ms)", format=".1f"),
                alt.Tooltip("fake_vs_estimate:Q", title="fake / estimate - 1", format="+.1%"),
                alt.Tooltip("fake_vs_genuine:Q", title="fake / genuine - 1", format="+.1%"),
                alt.Tooltip("measurable:N"),
            ],
        )
        .transform_filter(run_filter(PARAM, allow_all=True))
    )
    left = alt.layer(band_layer, diag_fake, fake_points).properties(
        width=side, height=side, title=title("fake (n_fake_cached = L)", f"grey band: y = x ± {tol:.0%}")
    )

    # right: the genuine-hit control and the baseline on the same estimate
    controls = pts.melt(
        id_vars=["run_id", "host", "point", "L", "new", "measurable", "opt_prefill_ms"],
        value_vars=list(ARMS),
        var_name="arm",
        value_name="measured_ms",
    ).dropna(subset=["measured_ms"])
    controls["arm"] = controls["arm"].map(ARMS)
    x_lo, x_hi = _extent(controls, ["opt_prefill_ms"])
    ctl_x = alt.Scale(type="log", domain=[x_lo, x_hi], nice=False)
    ctl_lo, ctl_hi = _extent(controls, ["opt_prefill_ms", "measured_ms"])
    ctl_y = alt.Scale(type="log", domain=[ctl_lo, ctl_hi], nice=False)
    diag_ctl = (
        alt.Chart(pd.DataFrame({"x": [ctl_lo, ctl_hi]}))
        .mark_line(color=MUTED, strokeDash=[5, 4], clip=True)
        .encode(x=alt.X("x:Q", scale=ctl_x, title=estimate), y=alt.Y("x:Q", scale=ctl_y))
    )
    ctl_points = (
        alt.Chart(controls)
        .mark_point(filled=True, size=80, strokeWidth=1.5)
        .encode(
            x=alt.X("opt_prefill_ms:Q", scale=ctl_x, axis=_log_axis(x_lo, x_hi), title=estimate),
            y=alt.Y("measured_ms:Q", scale=ctl_y, axis=_log_axis(ctl_lo, ctl_hi), title="measured prefill (ms)"),
            color=color,
            stroke=stroke,
            fillOpacity=fill_opacity,
            shape=alt.Shape(
                "arm:N",
                title="control arm",
                sort=list(ARMS.values()),
                scale=alt.Scale(domain=list(ARMS.values()), range=["diamond", "square"]),
            ),
            tooltip=[*tooltip_base, alt.Tooltip("arm:N"), alt.Tooltip("measured_ms:Q", title="ms", format=".1f")],
        )
        .transform_filter(run_filter(PARAM, allow_all=True))
    )
    right = alt.layer(diag_ctl, ctl_points).properties(
        width=side,
        height=side,
        title=title("controls: genuine hit and baseline", "genuine should sit on y = x; baseline shows the saving"),
    )

    measurable = pts[pts["measurable"]]
    inside = int((measurable["fake_median_ms"] / measurable["opt_prefill_ms"] - 1).abs().le(tol).sum())
    notes = [
        f"{len(runs_drawn)} complete sweep run(s), {len(pts)} (L, new) points; "
        f"{inside} of {len(measurable)} measurable points within ±{tol:.0%} of the estimate; dashed: y = x",
    ]
    if not pts["measurable"].all():
        notes.append("hollow markers: not measurable (padded KV below the 256-column floor, L changes nothing)")
    return (
        alt.hconcat(left, right, spacing=40)
        .add_params(param)
        .resolve_scale(x="independent", y="independent")
        .properties(title=title(TITLE, *notes))
    )


def _extent(df: pd.DataFrame, columns: list[str]) -> tuple[float, float]:
    """Log-axis domain around the positive values of `columns`, with a margin."""
    values = pd.concat([df[c] for c in columns]).astype(float)
    values = values[values > 0]
    if values.empty:
        return 1.0, 10.0
    return float(values.min()) / 1.15, float(values.max()) * 1.15


def _log_axis(lo: float, hi: float) -> alt.Axis:
    """Ticks at 1, 2, 3 and 5 times the powers of ten inside [lo, hi]: readable labels on a short log axis."""
    ticks: list[float] = []
    exp = math.floor(math.log10(lo))
    while 10.0**exp <= hi:
        ticks += [m * 10.0**exp for m in (1, 2, 3, 5) if lo <= m * 10.0**exp <= hi]
        exp += 1
    return alt.Axis(values=ticks, format=",~g", grid=True)
