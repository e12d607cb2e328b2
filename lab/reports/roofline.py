"""roofline: each band of one profile run at each depth, placed by its predicted arithmetic intensity (FLOPs per
byte moved, lab.measure.costmodel) and its achieved GFLOP/s (predicted FLOPs / measured ms), under this host's roofs
probed in the same run (lab.measure.peaks): min(GEMM GFLOP/s, intensity x memcpy GB/s).
"""

from __future__ import annotations

from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

from lab.core.schemas import BANDS
from lab.core.settings import ReportSettings
from lab.reports.data import figure_rows
from lab.reports.style import MUTED, Chart, band_tips, newest_run_picker, nothing_yet, title

TITLE = "Roofline: achieved GFLOP/s per band against this host's peaks"
PARAM = "roofline_run"


def roofline_chart(catalog_dir: Path, runs: pd.DataFrame, settings: ReportSettings) -> Chart:
    width, height = settings.width, settings.height
    bands = figure_rows(catalog_dir, "profile_bands", runs, keys=["depth", "band"])
    if bands.empty or "gflops" not in bands.columns or bands["gflops"].isna().all():
        run = "`lab profile` on a model the cost model knows"
        return nothing_yet(TITLE, "profile run with a cost model", run, width, height)
    bands = bands[bands["gflops"].notna() & bands["intensity"].notna()].copy()
    drawn, param, keep = newest_run_picker(PARAM, "profile run ", "profile", runs, bands)
    roofs = _roof_frame(figure_rows(catalog_dir, "profile_summary", runs, keys=[]), bands)
    x = alt.X("intensity:Q", title="arithmetic intensity (FLOP per byte moved, predicted)", scale=alt.Scale(type="log"))
    y = alt.Y("gflops:Q", title="GFLOP/s (predicted FLOPs / measured ms)", scale=alt.Scale(type="log"))
    color = alt.Color("band:N", sort=list(BANDS), scale=alt.Scale(domain=list(BANDS), scheme="tableau10"))
    points = (
        alt.Chart(bands)
        .mark_point(filled=True, size=70, opacity=0.85)
        .encode(
            x=x,
            y=y,
            color=color,
            shape=alt.Shape("band:N", sort=list(BANDS), legend=None),
            tooltip=band_tips(
                alt.Tooltip("gflops:Q", title="GFLOP/s", format=".2f"),
                alt.Tooltip("gflops_lo:Q", title="95% low", format=".2f"),
                alt.Tooltip("gflops_hi:Q", title="95% high", format=".2f"),
                alt.Tooltip("peak_share:Q", title="of the GEMM peak", format=".1%"),
                alt.Tooltip("intensity:Q", title="FLOP/byte", format=".3g"),
            ),
        )
        .transform_filter(keep)
    )
    bars = (
        alt.Chart(bands)
        .mark_rule(strokeWidth=1.5, opacity=0.6)
        .encode(x=x, y="gflops_lo:Q", y2="gflops_hi:Q", color=color)
        .transform_filter("isValid(datum.gflops_lo) && isValid(datum.gflops_hi)")
        .transform_filter(keep)
    )
    layers = [bars, points]
    if not roofs.empty:
        layers.insert(
            0,
            alt.Chart(roofs)
            .mark_line(color=MUTED, strokeWidth=2)
            .encode(x="intensity:Q", y="gflops:Q", detail="run_id:N", tooltip=[alt.Tooltip("roof:N", title="roof")])
            .transform_filter(keep),
        )
    return (
        alt.layer(*layers)
        .add_params(param)
        .properties(
            width=width,
            height=height,
            title=title(
                TITLE,
                f"{len(drawn)} profile run(s) with predictions; each point a band at one depth; "
                "grey: min(GEMM peak, intensity x memcpy bandwidth)",
            ),
        )
    )


def _roof_frame(summary: pd.DataFrame, bands: pd.DataFrame) -> pd.DataFrame:
    """Per run, the roof min(peak GFLOP/s, intensity x GB/s) over the intensities its bands span."""
    cols = ("peak_gemm_gflops_ci_value", "peak_copy_gbps_ci_value")
    if summary.empty or not all(c in summary.columns for c in cols):
        return pd.DataFrame()
    lo, hi = float(bands["intensity"].min()) / 3, float(bands["intensity"].max()) * 3
    xs = np.geomspace(lo, hi, 48)
    rows = []
    for _, r in summary.iterrows():
        peak, bw = r["peak_gemm_gflops_ci_value"], r["peak_copy_gbps_ci_value"]
        if pd.isna(peak) or pd.isna(bw):
            continue
        label = f"GEMM {peak:.1f} GFLOP/s, memcpy {bw:.1f} GB/s"
        rows += [{"run_id": r["run_id"], "intensity": float(v), "gflops": min(peak, v * bw), "roof": label} for v in xs]
    return pd.DataFrame(rows, columns=["run_id", "intensity", "gflops", "roof"])
