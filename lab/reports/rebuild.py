"""rebuild: the rebuild-lab tables of the newest complete run of each rebuild experiment.

exact rebuild and rebuild span as text grids coloured by verdict, rebuild cost as grouped bars of consumer
rows and visible SWA pairs per chunk case and mode, and the equal-cost row-work ratio per prompt length.
"""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd

from lab.core.settings import ReportSettings
from lab.reports.data import figure_rows, newest_run
from lab.reports.style import BAD, GOOD, MUTED, NEUTRAL, Chart, empty_chart, title

TITLE = "Rebuild labs"
VERDICTS = ["agrees", "differs", "value"]
MODES = ["off", "mask", "compact"]


def rebuild_chart(catalog_dir: Path, runs: pd.DataFrame, settings: ReportSettings) -> Chart:
    width, height = settings.width, settings.height
    panels: list[Chart] = []
    used: list[str] = []
    for experiment, build in (("rebuild_exact", _exact), ("rebuild_span", _span), ("rebuild_cost", _cost)):
        run_id = newest_run(runs, experiment)
        if run_id is None:
            continue
        panel = build(catalog_dir, runs, run_id, width, height)
        if panel is not None:
            panels.append(panel)
            used.append(run_id)
    if not panels:
        return empty_chart(
            TITLE,
            ["No complete rebuild run in the catalog yet.", "Run `lab rebuild exact|span|cost`, then `dvc repro`."],
            width,
            height,
        )
    return (
        alt.vconcat(*panels, spacing=36)
        .resolve_scale(color="independent")
        .properties(title=title(TITLE, "newest complete run of each experiment: " + ", ".join(used)))
    )


def _grid(cells: pd.DataFrame, columns: list[str], rows: list[str], heading: alt.TitleParams, step: int) -> Chart:
    """A text table: `cells` has row, column, text, verdict; one coloured cell per (row, column)."""
    base = alt.Chart(cells).encode(
        x=alt.X(
            "column:N",
            sort=columns,
            title=None,
            axis=alt.Axis(orient="top", labelAngle=0, ticks=False, domain=False, labelLimit=step, labelPadding=6),
        ),
        y=alt.Y("row:N", sort=rows, title=None, axis=alt.Axis(ticks=False, domain=False, labelPadding=8)),
    )
    rect = base.mark_rect(stroke="white", strokeWidth=2).encode(
        color=alt.Color(
            "verdict:N",
            sort=VERDICTS,
            scale=alt.Scale(domain=VERDICTS, range=[GOOD, BAD, NEUTRAL]),
            legend=None,
        )
    )
    text = base.mark_text(fontSize=13).encode(text="text:N")
    return alt.layer(rect, text).properties(width=alt.Step(step), height=alt.Step(30), title=heading)


def _exact(catalog_dir: Path, runs: pd.DataFrame, run_id: str, width: int, height: int) -> Chart | None:
    df = figure_rows(catalog_dir, "rebuild_exact", runs, keys=[], run_ids=[run_id])
    if df.empty:
        return None
    columns = ["last (full)", "last (rebuild)", "next (full)", "next (rebuild)", "first differing entry", "exact"]
    cells: list[dict[str, str]] = []
    for _, r in df.iterrows():
        row = f"{r['kv_source']} KV"
        same_last, same_next = r["last_full"] == r["last_suffix"], r["next_full"] == r["next_suffix"]
        diff = (
            f"layer {int(r['first_diff_layer'])}, pos {int(r['first_diff_pos'])}"
            if pd.notna(r["first_diff_layer"]) and pd.notna(r["first_diff_pos"])
            else "none"
        )
        for column, text, verdict in (
            ("last (full)", r["last_full"], "value"),
            ("last (rebuild)", r["last_suffix"], _verdict(same_last)),
            ("next (full)", r["next_full"], "value"),
            ("next (rebuild)", r["next_suffix"], _verdict(same_next)),
            ("first differing entry", diff, _verdict(diff == "none")),
            ("exact", "yes" if r["exact"] else "no", _verdict(bool(r["exact"]))),
        ):
            cells.append({"row": row, "column": column, "text": str(text), "verdict": verdict})
    r0 = df.iloc[0]
    heading = title(
        "Exact rebuild: full prefill vs rebuild from the last K inputs",
        f"W = {r0['window']}, D = {r0['depth']} layers, inputs 1..{r0['length']}, K = {r0['keep']}, "
        f"next input {r0['next_input']}; exact fractions; green: rebuild = full prefill, red: differs",
    )
    rows = list(dict.fromkeys(c["row"] for c in cells))
    return _grid(pd.DataFrame(cells), columns, rows, heading, step=128)


def _span(catalog_dir: Path, runs: pd.DataFrame, run_id: str, width: int, height: int) -> Chart | None:
    df = figure_rows(catalog_dir, "rebuild_span", runs, keys=["window", "depth"], run_ids=[run_id])
    if df.empty:
        return None
    columns = ["span R", "0/1 cases", "shared KV, W exact", "per-layer, R exact", "per-layer, R-1 fails", "verdict"]
    cells: list[dict[str, str]] = []
    for _, r in df.iterrows():
        row, cases = f"W = {r['window']}, D = {r['depth']}", int(r["cases"])
        for column, text, verdict in (
            ("span R", str(r["span"]), "value"),
            ("0/1 cases", f"{cases:,}", "value"),
            ("shared KV, W exact", f"{int(r['shared_window_exact']):,}", _verdict(r["shared_window_exact"] == cases)),
            ("per-layer, R exact", f"{int(r['per_layer_span_exact']):,}", _verdict(r["per_layer_span_exact"] == cases)),
            ("per-layer, R-1 fails", f"{int(r['shorter_fails']):,}", _verdict(r["shorter_fails"] > 0)),
            ("verdict", "ok" if r["ok"] else "FAILS", _verdict(bool(r["ok"]))),
        ):
            cells.append({"row": row, "column": column, "text": text, "verdict": verdict})
    heading = title(
        "Rebuild span R = W + (D-1)(W-1), checked on every 0/1 input",
        f"{int(df['cases'].sum()):,} cases; green: as the formula predicts (R exact, R-1 fails somewhere)",
    )
    rows = list(dict.fromkeys(c["row"] for c in cells))
    return _grid(pd.DataFrame(cells), columns, rows, heading, step=128)


def _cost(catalog_dir: Path, runs: pd.DataFrame, run_id: str, width: int, height: int) -> Chart | None:
    cost = figure_rows(catalog_dir, "rebuild_cost", runs, keys=[], run_ids=[run_id])
    work = figure_rows(catalog_dir, "rebuild_row_work", runs, keys=["length"], run_ids=[run_id])
    panels = [*(_cost_panels(cost, width, height) if not cost.empty else []), *_row_work_panel(work, width, height)]
    if not panels:
        return None
    return alt.hconcat(*panels, spacing=36).resolve_scale(y="independent")


def _cost_panels(cost: pd.DataFrame, width: int, height: int) -> list[Chart]:
    """Consumer rows and visible window pairs per chunk case and mode, and whether they equal the reference."""
    cases = list(dict.fromkeys(cost["case"]))
    long = cost.melt(
        id_vars=["case", "mode", "window", "keep", "start", "end"],
        value_vars=["rows", "pairs"],
        var_name="measure",
        value_name="count",
    )
    long["measure"] = long["measure"].map({"rows": "consumer rows", "pairs": "visible SWA pairs"})
    checked = bool((cost["rows"] == cost["reference_rows"]).all() and (cost["pairs"] == cost["reference_pairs"]).all())
    r0 = cost.iloc[0]
    panels: list[Chart] = []
    for measure in ("consumer rows", "visible SWA pairs"):
        base = alt.Chart(long[long["measure"] == measure]).encode(
            x=alt.X("case:N", sort=cases, title="chunk case", axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("mode:N", sort=MODES),
            y=alt.Y("count:Q", title=measure),
        )
        bars = base.mark_bar().encode(
            color=alt.Color("mode:N", sort=MODES, scale=alt.Scale(domain=MODES, scheme="set2"), title="mode"),
            tooltip=[
                alt.Tooltip("case:N"),
                alt.Tooltip("mode:N"),
                alt.Tooltip("start:Q", title="chunk start"),
                alt.Tooltip("end:Q", title="chunk end"),
                alt.Tooltip("count:Q", title=measure),
            ],
        )
        labels = base.mark_text(dy=-7, fontSize=10, color=MUTED).encode(text="count:Q")
        panels.append(
            alt.layer(bars, labels).properties(
                width=width * 0.62,
                height=height * 0.6,
                title=title(
                    f"Rebuild cost: {measure} per mode",
                    f"W = {r0['window']}, keep = {r0['keep']}; "
                    + ("= pair-enumerating reference" if checked else "DIFFERS from the reference"),
                ),
            )
        )
    return panels


def _row_work_panel(work: pd.DataFrame, width: int, height: int) -> list[Chart]:
    """Compact / full layer-row work per prompt length (none without rows)."""
    if work.empty:
        return []
    w0 = work.iloc[0]
    work = work[["length", "full", "compact", "ratio"]].copy()
    base = alt.Chart(work).encode(
        x=alt.X("length:O", title="prompt length (tokens)", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("ratio:Q", title="compact / full layer-row work", scale=alt.Scale(domain=[0, 1.1])),
    )
    bars = base.mark_bar(color="#4c78a8", width={"band": 0.6}).encode(
        tooltip=[
            alt.Tooltip("length:Q", title="length (tokens)"),
            alt.Tooltip("full:Q", title="full row-work", format=","),
            alt.Tooltip("compact:Q", title="compact row-work", format=","),
            alt.Tooltip("ratio:Q", format=".4f"),
        ]
    )
    labels = base.mark_text(dy=-8, fontSize=11).encode(text=alt.Text("ratio:Q", format=".3f"))
    return [
        alt.layer(bars, labels).properties(
            width=width * 0.45,
            height=height * 0.6,
            title=title(
                "Rebuild cost: equal-cost row work",
                f"{w0['producer_layers']} producer + {w0['consumer_layers']} consumer layers, keep {w0['keep']}",
            ),
        )
    ]


def _verdict(ok: bool) -> str:
    return VERDICTS[0] if ok else VERDICTS[1]
