"""The agreement chart's image panel: per image step, the vision encode beside the LM prefill, by image size."""

from __future__ import annotations

import altair as alt
import pandas as pd

from lab.reports.style import MUTED, Chart, run_filter, title

# marker of each step kind: text only keeps the default circle; screenshot sizes, smallest first
IMAGE_SHAPES = ["triangle-up", "square", "diamond", "triangle-down", "cross", "triangle-right", "triangle-left"]


PARTS = {"encode_ms": "vision encode", "lm_ms": "LM prefill"}


PART_COLORS = ["#b07aa1", "#76b7b2"]


BAR_STEP = 16  # px per bar in the encode / LM panel


TOOLTIP = [  # one bar part of an image point
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


def encode_panel(pts: pd.DataFrame, runs_drawn: pd.DataFrame, sizes: list[str], width: int, param: str) -> Chart | None:
    """Per image point, the fake arm's median prompt time split into vision encode + LM prefill (stacked)."""
    img = pts[pts["image"].notna() & pts["encode_ms"].notna() & pts["lm_ms"].notna()].copy()
    if img.empty:
        return None
    bars, rows, run_order = _encode_bars(img, runs_drawn, sizes)
    parts = list(PARTS.values())
    y = alt.Y("row:N", sort=rows, title="L (tokens) · screenshot", axis=alt.Axis(labelLimit=220))
    y_offset = alt.YOffset("run_id:N", sort=run_order, title="run")
    tooltip = TOOLTIP
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
        .transform_filter(run_filter(param, allow_all=True))
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
        .transform_filter(run_filter(param, allow_all=True))
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


def _encode_bars(
    img: pd.DataFrame, runs_drawn: pd.DataFrame, sizes: list[str]
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The image points as one bar part per row (encode, LM), the rows in (L, size, new) order, the runs drawn."""
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
    return bars, rows, run_order


def size_key(size: str) -> tuple[int, int, str]:
    """Screenshot sizes WxH smallest (by pixels) first; anything unparsable last, by name."""
    w, _, h = size.partition("x")
    if w.isdigit() and h.isdigit():
        return int(w) * int(h), int(w), size
    return 2**62, 0, size
