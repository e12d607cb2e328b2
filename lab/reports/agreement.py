"""agreement: the measured fake-prefix prefill against the estimate opt_prefill = new / prefill_tps(L).

Left, the fake arm on log-log axes with y = x and the +-tolerance band, each point with its 95% interval as
an error bar and its verdicts in the tooltip; right, the controls on the same estimate: the genuine hit (must
match fake) and the baseline full prefill (what a cache hit saves), with their intervals.

Image steps (a screenshot in the new part; the estimate is (image + new) / prefill_tps(L) + encode) get a
marker shape per screenshot size, and a third panel splits the fake arm's prompt time of each image point into
the vision encode and the LM prefill. Catalogs without image columns (or without image steps) draw as before.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

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
    "reps",
]
INTERVAL_COLUMNS = COLUMNS[COLUMNS.index("fake_median_lo_ms") :]
IMAGE_COLUMNS = ("image", "image_tokens", "encode_ms", "lm_ms")
ARMS = {"genuine_median_ms": "genuine hit", "baseline_median_ms": "baseline (no cache)"}
PARAM = "sweep_run"
TEXT_STEP = "text only"
# marker of each step kind: text only keeps the default circle; screenshot sizes, smallest first
IMAGE_SHAPES = ["triangle-up", "square", "diamond", "triangle-down", "cross", "triangle-right", "triangle-left"]
PARTS = {"encode_ms": "vision encode", "lm_ms": "LM prefill"}
PART_COLORS = ["#b07aa1", "#76b7b2"]
BAR_STEP = 16  # px per bar in the encode / LM panel


def agreement_chart(catalog_dir: Path, runs: pd.DataFrame, settings: ReportSettings) -> Chart:
    side = min(settings.width, settings.height)
    pts = figure_rows(catalog_dir, "sweep_points", runs, keys=["L", "new", "point"], where="server")
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
    for c in IMAGE_COLUMNS:  # older catalogs: no image columns, every step is text only
        if c not in pts.columns:
            pts[c] = None
    has_intervals = "fake_median_lo_ms" in pts.columns and bool(pts["fake_median_lo_ms"].notna().any())
    if not has_intervals:  # catalogs from before intervals: the same data (and spec) as then
        pts = pts.drop(columns=[c for c in INTERVAL_COLUMNS if c in pts.columns])
    else:
        pts["verdicts"] = [
            f"vs estimate {e} {_ci(elo, ehi)} · vs genuine {g} {_ci(glo, ghi)}"
            for e, elo, ehi, g, glo, ghi in zip(
                pts["estimate_verdict"], pts["fake_vs_estimate_ci_lo"], pts["fake_vs_estimate_ci_hi"],
                pts["genuine_verdict"], pts["fake_vs_genuine_ci_lo"], pts["fake_vs_genuine_ci_hi"], strict=True,
            )
        ]  # fmt: skip
    pts["image"] = pts["image"].astype(object).where(pts["image"].notna(), None)
    for c in ("image_tokens", "encode_ms", "lm_ms"):
        pts[c] = pd.to_numeric(pts[c], errors="coerce").astype(float)
    sizes = sorted({str(i) for i in pts["image"].dropna()}, key=_size_key)
    has_images = bool(sizes)
    pts["step"] = pts["image"].fillna(TEXT_STEP).astype(str)
    image_fields = ["step", *IMAGE_COLUMNS[1:]] if has_images else []
    if not has_images:  # text only: the same data (and spec) as before image steps existed
        pts = pts.drop(columns=[*IMAGE_COLUMNS, "step"])
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
    # image steps: a shape per step kind (both panels), the image's numbers in every tooltip
    step_shape: dict[str, Any] = {}
    if has_images:
        estimate = "estimate (image + new) / prefill_tps(L) + encode (ms)"
        steps = [TEXT_STEP, *sizes]
        shapes = ["circle", *(IMAGE_SHAPES[i % len(IMAGE_SHAPES)] for i in range(len(sizes)))]
        step_shape["shape"] = alt.Shape("step:N", title="step", sort=steps, scale=alt.Scale(domain=steps, range=shapes))
        tooltip_base += [
            alt.Tooltip("step:N"),
            alt.Tooltip("image_tokens:Q", title="image tokens"),
            alt.Tooltip("encode_ms:Q", title="vision encode (ms)", format=".1f"),
            alt.Tooltip("lm_ms:Q", title="LM prefill (ms)", format=".1f"),
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
            **step_shape,
            tooltip=[
                *tooltip_base,
                alt.Tooltip("fake_median_ms:Q", title="fake (ms)", format=".1f"),
                alt.Tooltip("fake_vs_estimate:Q", title="fake / estimate - 1", format="+.1%"),
                alt.Tooltip("fake_vs_genuine:Q", title="fake / genuine - 1", format="+.1%"),
                alt.Tooltip("measurable:N"),
                *([alt.Tooltip("verdicts:N", title="verdicts (95%)"), alt.Tooltip("reps:Q")] if has_intervals else []),
            ],
        )
        .transform_filter(run_filter(PARAM, allow_all=True))
    )
    fake_layers = [band_layer, diag_fake, fake_points]
    if has_intervals:  # the 95% interval of each point's fake median, as a vertical error bar
        fake_layers.insert(2, _error_bars(pts, "fake_median_lo_ms", "fake_median_hi_ms", fake_scale, color))
    left = alt.layer(*fake_layers).properties(
        width=side, height=side, title=title("fake (n_fake_cached = L)", f"grey band: y = x ± {tol:.0%}")
    )

    # right: the genuine-hit control and the baseline on the same estimate
    controls = pts.melt(
        id_vars=["run_id", "host", "point", "L", "new", "measurable", "opt_prefill_ms", *image_fields],
        value_vars=list(ARMS),
        var_name="arm",
        value_name="measured_ms",
    ).dropna(subset=["measured_ms"])
    if has_intervals:  # each control's own interval beside it
        for end in ("lo", "hi"):
            cols = {arm: arm.replace("_ms", f"_{end}_ms") for arm in ARMS}
            part = pts.melt(id_vars=["run_id", "point"], value_vars=list(cols.values()), var_name="arm",
                            value_name=f"measured_{end}_ms")  # fmt: skip
            part["arm"] = part["arm"].map({v: k for k, v in cols.items()})
            controls = controls.merge(part, on=["run_id", "point", "arm"], how="left")
    controls["arm"] = controls["arm"].map(ARMS)
    arms, shapes2 = list(ARMS.values()), ["diamond", "square"]
    x_lo, x_hi = _extent(controls, ["opt_prefill_ms"])
    ctl_x = alt.Scale(type="log", domain=[x_lo, x_hi], nice=False)
    ctl_lo, ctl_hi = _extent(controls, ["opt_prefill_ms", "measured_ms"])
    ctl_y = alt.Scale(type="log", domain=[ctl_lo, ctl_hi], nice=False)
    diag_ctl = (
        alt.Chart(pd.DataFrame({"x": [ctl_lo, ctl_hi]}))
        .mark_line(color=MUTED, strokeDash=[5, 4], clip=True)
        .encode(x=alt.X("x:Q", scale=ctl_x, title=estimate), y=alt.Y("x:Q", scale=ctl_y))
    )
    # the control arm: its own shape when every step is text only; with image steps the shape is the step kind,
    # and the baseline is drawn faded (it sits well above y = x anyway)
    arm_channel: dict[str, Any] = (
        {"opacity": alt.Opacity("arm:N", title="control arm", sort=arms, scale=alt.Scale(domain=arms, range=[1, 0.4]))}
        if has_images
        else {"shape": alt.Shape("arm:N", title="control arm", sort=arms, scale=alt.Scale(domain=arms, range=shapes2))}
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
            **step_shape,
            **arm_channel,
            tooltip=[*tooltip_base, alt.Tooltip("arm:N"), alt.Tooltip("measured_ms:Q", title="ms", format=".1f")],
        )
        .transform_filter(run_filter(PARAM, allow_all=True))
    )
    ctl_layers = [diag_ctl, ctl_points]
    if has_intervals:
        ctl_layers.insert(1, _error_bars(controls, "measured_lo_ms", "measured_hi_ms", ctl_y, color))
    right = alt.layer(*ctl_layers).properties(
        width=side,
        height=side,
        title=title("controls: genuine hit and baseline", "genuine should sit on y = x; baseline shows the saving"),
    )

    measurable = pts[pts["measurable"]]
    inside = int((measurable["fake_median_ms"] / measurable["opt_prefill_ms"] - 1).abs().le(tol).sum())
    n_image = int(pts["image"].notna().sum()) if has_images else 0
    kinds = f" ({n_image} with a screenshot: {', '.join(sizes)})" if has_images else ""
    within = (
        "" if has_intervals else f"{inside} of {len(measurable)} measurable points within ±{tol:.0%} of the estimate; "
    )
    notes = [f"{len(runs_drawn)} complete sweep run(s), {len(pts)} (L, new) points{kinds}; {within}dashed: y = x"]
    if not pts["measurable"].all():
        notes.append("hollow markers: not measurable (padded KV below the 256-column floor, L changes nothing)")
    if has_intervals:
        counts = {v: int((pts["estimate_verdict"] == v).sum()) for v in ("agree", "disagree", "undecided")}
        gcounts = {v: int((pts["genuine_verdict"] == v).sum()) for v in ("agree", "disagree", "undecided")}
        notes.append(
            "bars: 95% intervals; verdicts vs the estimate "
            + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
            + "; vs the genuine hit "
            + ", ".join(f"{n} {v}" for v, n in gcounts.items() if n)
        )
    scatter = alt.hconcat(left, right, spacing=40).resolve_scale(x="independent", y="independent")
    bars = _encode_panel(pts, runs_drawn, sizes, 2 * side + 40) if has_images else None
    if bars is None:
        return scatter.add_params(param).properties(title=title(TITLE, *notes))
    return (
        alt.vconcat(scatter, bars, spacing=36)
        .add_params(param)
        .resolve_scale(x="independent", y="independent", color="independent", opacity="independent")
        .properties(title=title(TITLE, *notes))
    )


def _ci(lo: Any, hi: Any) -> str:
    return "" if lo is None or hi is None or lo != lo or hi != hi else f"[{lo - 1:+.1%}, {hi - 1:+.1%}]"


def _error_bars(df: pd.DataFrame, lo: str, hi: str, y_scale: Any, color: Any) -> Chart:
    """Vertical rules from `lo` to `hi` at each point's estimate (rows without an interval draw none)."""
    return (
        alt.Chart(df)
        .mark_rule(strokeWidth=1.5, opacity=0.7)
        .encode(x="opt_prefill_ms:Q", y=alt.Y(f"{lo}:Q", scale=y_scale), y2=f"{hi}:Q", color=color)
        .transform_filter(f"isValid(datum.{lo}) && isValid(datum.{hi})")
        .transform_filter(run_filter(PARAM, allow_all=True))
    )


def _encode_panel(pts: pd.DataFrame, runs_drawn: pd.DataFrame, sizes: list[str], width: int) -> Chart | None:
    """Per image point, the fake arm's median prompt time split into vision encode + LM prefill (stacked)."""
    img = pts[pts["image"].notna() & pts["encode_ms"].notna() & pts["lm_ms"].notna()].copy()
    if img.empty:
        return None
    several_news = img["new"].nunique() > 1
    img["row"] = [
        f"L {int(L):,} · {image}" + (f" · new {int(new)}" if several_news else "")
        for L, image, new in zip(img["L"], img["image"], img["new"], strict=True)
    ]
    order = img.assign(_size=[sizes.index(str(i)) for i in img["image"]]).sort_values(
        ["L", "_size", "new"], kind="stable"
    )
    rows = list(dict.fromkeys(order["row"]))
    run_order = [str(r) for r in runs_drawn["run_id"] if r in set(img["run_id"])]
    img["total_ms"] = img["encode_ms"] + img["lm_ms"].clip(lower=0)
    img["encode_share"] = img["encode_ms"] / img["total_ms"]
    img["share_label"] = [f"{share:.0%} encode" for share in img["encode_share"]]
    bars = img.melt(
        id_vars=[
            "run_id",
            "host",
            "row",
            "L",
            "new",
            "image",
            "image_tokens",
            "encode_share",
            "share_label",
            "fake_median_ms",
            "total_ms",
        ],
        value_vars=list(PARTS),
        var_name="part",
        value_name="ms",
    )
    bars["part_order"] = bars["part"].map({k: i for i, k in enumerate(PARTS)})
    bars["part"] = bars["part"].map(PARTS)
    bars["ms"] = bars["ms"].clip(lower=0)
    parts = list(PARTS.values())
    y = alt.Y("row:N", sort=rows, title="L (tokens) · screenshot", axis=alt.Axis(labelLimit=220))
    y_offset = alt.YOffset("run_id:N", sort=run_order, title="run")
    tooltip = [
        alt.Tooltip("run_id:N", title="run"),
        alt.Tooltip("host:N"),
        alt.Tooltip("L:Q", title="L (tokens)"),
        alt.Tooltip("new:Q", title="new (tokens)"),
        alt.Tooltip("image:N", title="screenshot"),
        alt.Tooltip("image_tokens:Q", title="image tokens"),
        alt.Tooltip("part:N"),
        alt.Tooltip("ms:Q", title="ms", format=".1f"),
        alt.Tooltip("fake_median_ms:Q", title="fake prompt, median (ms)", format=".1f"),
        alt.Tooltip("encode_share:Q", title="encode share", format=".0%"),
    ]
    stacked = (
        alt.Chart(bars)
        .mark_bar(height={"band": 0.85})
        .encode(
            x=alt.X(
                "ms:Q",
                stack="zero",
                title="fake arm prompt time, median (ms)",
                scale=alt.Scale(zero=True),
                axis=alt.Axis(tickCount=8, format=",~f"),
            ),
            y=y,
            yOffset=y_offset,
            color=alt.Color(
                "part:N", title="fake prompt time", sort=parts, scale=alt.Scale(domain=parts, range=PART_COLORS)
            ),
            order=alt.Order("part_order:Q"),
            tooltip=tooltip,
        )
        .transform_filter(run_filter(PARAM, allow_all=True))
    )
    totals = bars[bars["part_order"] == 0]
    labels = (
        alt.Chart(totals)
        .mark_text(align="left", dx=4, fontSize=10, color=MUTED)
        .encode(
            x=alt.X("total_ms:Q"),
            y=y,
            yOffset=y_offset,
            text=alt.Text("share_label:N"),
            tooltip=tooltip,
        )
        .transform_filter(run_filter(PARAM, allow_all=True))
    )
    height = max(80, BAR_STEP * len(rows) * max(1, len(run_order)))
    return alt.layer(stacked, labels).properties(
        width=width - 130,
        height=height,
        title=title(
            "image steps: where the fake arm's prompt time goes",
            "vision encode + LM prefill = the fake arm's median prompt time; one bar per run and (L, screenshot)",
        ),
    )


def _size_key(size: str) -> tuple[int, int, str]:
    """Screenshot sizes WxH smallest (by pixels) first; anything unparsable last, by name."""
    w, _, h = size.partition("x")
    if w.isdigit() and h.isdigit():
        return int(w) * int(h), int(w), size
    return 2**62, 0, size


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
