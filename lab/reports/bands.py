"""bands: where a prefill chunk's time goes as the context deepens, one profile run at a time.

Top, the FUSED wall per token split by the TIMED band shares, stacked, with the depth where attn_core
overtakes ffn_moe and its 95% interval (shaded); bottom, how far the instrumented TIMED pass, the llama-bench
cross-check and the fake prefix (against a real fill) sit from the FUSED wall at each depth they ran at, with
their intervals as bands (bootstrap over processes). Depth is on a log axis when the probes span more than a
decade (`lab profile --depths log:...`), on a linear one otherwise; both panels share it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from lab.core.schemas import BANDS
from lab.core.settings import ReportSettings
from lab.reports.data import figure_rows
from lab.reports.style import MUTED, Chart, band_tips, info_panel, newest_run_picker, nothing_yet, title

TITLE = "Prefill time per token by band vs depth"
PARAM = "profile_run"
GAP = "TIMED node sum / FUSED wall - 1"
PREDICTED = "#b42318"
BENCH = "FUSED wall / llama-bench - 1"
FAKE = "fake prefix / real fill - 1 (FUSED wall)"
CHECKS = (GAP, BENCH, FAKE)
CHECK_COLORS = {GAP: "#4c78a8", BENCH: "#e45756", FAKE: "#54a24b"}
DECADE = 10.0  # deepest / shallowest nonzero probe depth above which depth is drawn on a log axis


def bands_chart(catalog_dir: Path, runs: pd.DataFrame, settings: ReportSettings) -> Chart:
    width, height = settings.width, settings.height
    bands = figure_rows(catalog_dir, "profile_bands", runs, keys=["depth", "band"])
    summary = figure_rows(catalog_dir, "profile_summary", runs, keys=[])
    if bands.empty or "ms_per_token" not in bands.columns:
        return nothing_yet(TITLE, "profile run", "`lab profile`", width, height)
    runs_drawn, param, keep = newest_run_picker(PARAM, "profile run ", "profile", runs, bands)
    depth_x = depth_encoding(bands["depth"])
    info = _summary_frame(summary, runs)
    layers = [_band_area(bands, depth_x).transform_filter(keep), *_crossover_layers(info, keep, height)]
    top = alt.layer(*layers).properties(
        width=width,
        height=height,
        title=title(
            "ms per token by band",
            "stacked; dashed: attn_core overtakes ffn_moe (measured, interpolated); "
            "dotted: where its FLOPs overtake ffn_moe's (predicted from the GGUF)",
        ),
    )
    panels = [top]
    if not info.empty:
        panels.append(info_panel(info, keep, width, 34))
    gaps = _gap_frame(summary)
    if not gaps.empty:
        panels.append(_checks_panel(gaps, depth_x, keep, width, max(140, height // 2)))
    return (
        alt.vconcat(*panels, spacing=28)
        .add_params(param)
        .resolve_scale(color="independent", x="shared")  # the checks line up under the bands, depth for depth
        .properties(title=title(TITLE, f"{len(runs_drawn)} complete profile run(s); choose one in the dropdown"))
    )


def depth_encoding(depths: Iterable[int]) -> alt.X:
    """The depth axis of both panels: linear, or log when the probes of the drawn runs span more than a decade.

    Depth 0 has no place on a log axis: a symlog scale is linear below its constant (half the shallowest nonzero
    depth, so 0 sits one step left of it) and logarithmic above, where the probes' doublings spread evenly."""
    nonzero = sorted({int(d) for d in depths if d > 0})
    if not nonzero or nonzero[-1] / nonzero[0] <= DECADE:
        return alt.X("depth:Q", title="depth (tokens already in context)", scale=alt.Scale(nice=False))
    constant = nonzero[0] / 2
    return alt.X(
        "depth:Q",
        title=f"depth (tokens already in context), log axis (linear below {constant:,.0f}, so 0 shows)",
        scale=alt.Scale(type="symlog", constant=constant, nice=False),
        axis=alt.Axis(values=[0, *_spread(nonzero)], format=",~d", labelOverlap=True),
    )


def _spread(depths: list[int], factor: float = 1.8) -> list[int]:
    """Tick depths: the probes, each at least `factor` times the last kept (readable labels on a log axis)."""
    ticks = [depths[0]]
    for d in depths[1:]:
        if d >= factor * ticks[-1]:
            ticks.append(d)
    return ticks


def _band_area(bands: pd.DataFrame, depth_x: alt.X) -> Any:
    """ms per token per band, stacked over depth."""
    order = [*BANDS, *sorted(set(bands["band"]) - set(BANDS))]
    bands = bands[["run_id", "host", "depth", "band", "ms_per_token", "timed_ms", "share", "fused_chunk_ms"]].copy()
    bands["band_order"] = bands["band"].map({b: i for i, b in enumerate(order)})
    return (
        alt.Chart(bands)
        .mark_area(opacity=0.9, line={"strokeWidth": 0.6, "color": "white"})
        .encode(
            x=depth_x,
            y=alt.Y("ms_per_token:Q", stack="zero", title="ms per token (FUSED wall x TIMED share)"),
            color=alt.Color("band:N", sort=order, scale=alt.Scale(domain=order, scheme="tableau10"), title="band"),
            order=alt.Order("band_order:Q", sort="ascending"),
            tooltip=band_tips(
                alt.Tooltip("ms_per_token:Q", title="ms / token", format=".4f"),
                alt.Tooltip("share:Q", title="TIMED share", format=".1%"),
                alt.Tooltip("timed_ms:Q", title="TIMED band ms (chunk)", format=".2f"),
                alt.Tooltip("fused_chunk_ms:Q", title="FUSED chunk ms", format=".1f"),
            ),
        )
    )


def _crossover_layers(info: pd.DataFrame, keep: Any, height: int) -> list[Any]:
    """The measured crossover (a dashed rule, its interval shaded, its label) and the cost model's (dotted)."""
    if info.empty:
        return []
    crossed = info[info["crossover_depth"].notna()]
    rule = alt.Chart(crossed).mark_rule(color="#222", strokeDash=[6, 4], strokeWidth=1.5).encode(x="crossover_depth:Q")
    label = (
        alt.Chart(crossed)
        .mark_text(align="left", dx=5, dy=4, baseline="top", fontSize=11)
        .encode(x="crossover_depth:Q", y=alt.value(0), text="crossover_label:N")
    )
    layers = [rule.transform_filter(keep), label.transform_filter(keep)]
    if "crossover_lo" in crossed.columns:
        spread = (
            alt.Chart(crossed)
            .mark_rect(color="#222", opacity=0.12)
            .encode(x="crossover_lo:Q", x2="crossover_hi:Q")
            .transform_filter("isValid(datum.crossover_lo) && isValid(datum.crossover_hi)")
        )
        layers.insert(0, spread.transform_filter(keep))
    predicted = info[info["predicted_depth"].notna()]
    if not predicted.empty:  # the cost model's crossover: a second marker, labelled at the bottom
        layers += [
            alt.Chart(predicted)
            .mark_rule(color=PREDICTED, strokeDash=[2, 3], strokeWidth=2)
            .encode(x="predicted_depth:Q")
            .transform_filter(keep),
            alt.Chart(predicted)
            .mark_text(align="left", dx=5, dy=-4, baseline="bottom", fontSize=11, color=PREDICTED)
            .encode(x="predicted_depth:Q", y=alt.value(height), text="predicted_label:N")
            .transform_filter(keep),
        ]
    return layers


def _checks_panel(gaps: pd.DataFrame, depth_x: alt.X, keep: Any, width: int, height: int) -> Any:
    """The instrument's overhead (TIMED / FUSED), the cross-check (FUSED / llama-bench) and the fake prefix
    against a real fill, each at the depths it ran at, with its interval as a band."""
    drawn = [c for c in CHECKS if c in set(gaps["series"])]
    colors = alt.Scale(domain=drawn, range=[CHECK_COLORS[c] for c in drawn])
    legend = alt.Legend(labelLimit=320, symbolOpacity=1)  # the lines' colour, not the bands' tint
    color = alt.Color("series:N", title="check", legend=legend, sort=drawn, scale=colors)
    line = (
        alt.Chart(gaps)
        .mark_line(point=True)
        .encode(
            x=depth_x,
            y=alt.Y("value:Q", title="relative difference", axis=alt.Axis(format="+.0%")),
            color=color,
            tooltip=[
                alt.Tooltip("series:N"),
                alt.Tooltip("depth:Q", title="depth (tokens)"),
                alt.Tooltip("value:Q", format="+.1%"),
                alt.Tooltip("lo:Q", title="95% lo (over processes)", format="+.1%"),
                alt.Tooltip("hi:Q", title="95% hi (over processes)", format="+.1%"),
            ],
        )
        .transform_filter(keep)
    )
    zero = alt.Chart(pd.DataFrame({"y": [0.0]})).mark_rule(color=MUTED).encode(y="y:Q")
    check_layers = [zero, line]
    if gaps["lo"].notna().any():  # each check's 95% interval as a band around its line
        band = (
            alt.Chart(gaps)
            .mark_area(opacity=0.18)
            .encode(x=depth_x, y="lo:Q", y2="hi:Q", color=color)
            .transform_filter("isValid(datum.lo) && isValid(datum.hi)")
            .transform_filter(keep)
        )
        check_layers.insert(1, band)
    return alt.layer(*check_layers).properties(
        width=width,
        height=height,
        title=title("instrument overhead and cross-checks", "0 = agrees with the FUSED llama_decode wall"),
    )


def _summary_frame(summary: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per profile run: the crossover and the labels drawn from it."""
    if summary.empty or "crossover_depth" not in summary.columns:
        return pd.DataFrame()
    cols = ["run_id", "crossover_depth", *(c for c in ("crossover_ci_lo", "crossover_ci_hi") if c in summary.columns)]
    out = summary[cols].rename(columns={"crossover_ci_lo": "crossover_lo", "crossover_ci_hi": "crossover_hi"})
    for c in ("crossover_depth", "crossover_lo", "crossover_hi"):
        if c in out.columns:
            out[c] = out[c].astype(float)
    chunks = {str(r["run_id"]): _chunk(str(r["params_json"] or "{}")) for _, r in runs.iterrows()}
    crossover, info = [], []
    for _, r in summary.iterrows():
        depth, note = r.get("crossover_depth"), str(r.get("crossover_note") or "-")
        lo, hi = r.get("crossover_ci_lo"), r.get("crossover_ci_hi")
        spread = (
            f" [{lo:.0f}, {hi:.0f}]" if pd.notna(depth) and lo is not None and pd.notna(lo) and pd.notna(hi) else ""
        )
        crossover.append(f"attn_core > ffn_moe from depth ≈ {depth:.0f}{spread}" if pd.notna(depth) else "")
        first = [f"{r['run_id']} ({r['host']})", f"crossover: {note}"]
        chunk = chunks.get(str(r["run_id"]))
        if chunk:
            first.append(f"chunk: {chunk} tokens per llama_decode")
        second = []
        if pd.notna(r.get("attn_r2")) and pd.notna(r.get("attn_slope_ms_per_token_per_1k")):
            slope, slo, shi = r["attn_slope_ms_per_token_per_1k"], r.get("attn_slope_ci_lo"), r.get("attn_slope_ci_hi")
            ci = f" [{slo:+.4f}, {shi:+.4f}]" if slo is not None and pd.notna(slo) and pd.notna(shi) else ""
            second.append(f"attn_core fit: {slope:+.4f}{ci} ms/token per 1k depth, R² {r['attn_r2']:.3f}")
        if pd.notna(r.get("timed_vs_fused_gap_mean")):
            second.append(f"mean TIMED/FUSED gap {r['timed_vs_fused_gap_mean']:+.1%}")
        ratio, lo, hi = (r.get(f"crossover_vs_predicted_ci_{k}") for k in ("value", "lo", "hi"))
        if ratio is not None and pd.notna(ratio):
            second.append(f"crossover measured / predicted {ratio:.2f} [{lo:.2f}, {hi:.2f}]")
        ratio, lo, hi = (r.get(f"attn_slope_vs_predicted_ci_{k}") for k in ("value", "lo", "hi"))
        if ratio is not None and pd.notna(ratio):
            second.append(f"attention slope measured / predicted {ratio:.2f} [{lo:.2f}, {hi:.2f}]")
        info.append("  ·  ".join(first) + "\n" + "  ·  ".join(second))
    out["crossover_label"], out["info"] = crossover, info
    pred = summary["predicted_crossover_depth"] if "predicted_crossover_depth" in summary.columns else None
    out["predicted_depth"] = pred.astype(float) if pred is not None else float("nan")
    out["predicted_label"] = [f"predicted from FLOPs ≈ {d:.0f}" if pd.notna(d) else "" for d in out["predicted_depth"]]
    return out


def _gap_frame(summary: pd.DataFrame) -> pd.DataFrame:
    """Long rows (run_id, depth, series, value, lo, hi) from the per-depth JSON maps of the summaries: each check
    at its own depths (llama-bench and the fake-vs-real check may run at the shallower ones only)."""
    rows: list[dict[str, object]] = []
    for _, r in summary.iterrows():
        for column, series, shift in (("timed_vs_fused_gap", GAP, 0.0), ("fused_vs_bench", BENCH, 1.0)):
            values = {d: v - shift for d, v in _json_map(r.get(column)).items()}
            rows += _check_rows(r["run_id"], series, values, _json_map(r.get(f"{column}_ci")))
        totals = {d: by["total"] for d, by in _json_map(r.get("fake_vs_real")).items() if by.get("total")}
        rows += _check_rows(r["run_id"], FAKE, {d: iv["value"] - 1 for d, iv in totals.items()}, totals)
    return pd.DataFrame(rows, columns=["run_id", "depth", "series", "value", "lo", "hi"])


def _check_rows(run_id: str, series: str, values: dict[str, float], cis: dict[str, Any]) -> list[dict[str, object]]:
    """One check's rows: its value - 1 at each depth, with its ratio interval shifted alike (when it has one)."""
    out: list[dict[str, object]] = []
    for depth, value in sorted(values.items(), key=lambda kv: int(kv[0])):
        iv = cis.get(depth) or {}
        lo, hi = (iv["lo"] - 1, iv["hi"] - 1) if iv else (None, None)
        out.append({"run_id": run_id, "depth": int(depth), "series": series, "value": value, "lo": lo, "hi": hi})
    return out


def _json_map(text: object) -> dict[str, Any]:
    """A per-depth map stored as JSON text (absent in older catalogs: empty)."""
    return json.loads(text) if isinstance(text, str) and text else {}


def _chunk(params_json: str) -> int | None:
    try:
        chunk = json.loads(params_json).get("profile", {}).get("chunk")
    except (ValueError, AttributeError):
        return None
    return int(chunk) if isinstance(chunk, int) else None
