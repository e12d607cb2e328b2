"""Reports end to end: run folders -> `ingest` -> `render_reports` -> headless Chromium (system browser, offline).

Every chart page must draw its marks from inlined Vega with no request leaving file:// and no console
error; empty tables give an explanatory empty state; two catalogs of the same runs render byte-identical.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright
from pydantic import BaseModel

from lab.catalog.compare import CompareError, compare_catalog
from lab.catalog.ingest import ingest
from lab.catalog.tables import SPECS, load_table, table_path, unflatten
from lab.core.runs import RunError, RunFolder
from lab.core.schemas import (
    ArmName,
    ArmsSummary,
    ArmStats,
    BandDepth,
    Interval,
    ProfileSummary,
    ProfileWall,
    RebuildCostRow,
    RebuildExactRow,
    RebuildRowWork,
    RebuildSpanRow,
    SweepPoint,
    SweepSample,
    ggml_pad,
)
from lab.core.settings import ReportSettings
from lab.experiments.profile.derive import summarize
from lab.experiments.profile.efficiency import annotate
from lab.measure.costmodel import cost_model
from lab.measure.peaks import Peaks
from lab.models.hparams import hparams_of
from lab.reports import render_compare, render_reports
from lab.reports.agreement import agreement_chart
from lab.reports.bands import BENCH, FAKE, GAP, bands_chart, depth_encoding
from lab.reports.data import catalog_runs, figure_rows
from lab.reports.render import save_chart

Mode = Literal["off", "mask", "compact"]
CHROMIUM = Path("/usr/bin/chromium")
CHARTS = ("agreement", "bands", "roofline", "arms", "conversation", "tune", "versus", "rebuild")
SETTINGS = ReportSettings()
BANDS = ("ffn_moe", "attn_core", "proj", "gdn", "other")
ARMS: tuple[ArmName, ...] = ("fake", "genuine", "baseline")
MODES: tuple[Mode, ...] = ("off", "mask", "compact")
SWEEP_GRID = [(64, 64), (512, 64), (512, 256), (2048, 64), (2048, 256)]  # (64, 64): below the 256-column floor
# image steps of the image sweep: (L, new, screenshot, image tokens, vision encode ms)
IMAGE_GRID = [
    (512, 64, "320x200", 82, 310.0),
    (512, 64, "640x400", 258, 960.0),
    (2048, 64, "320x200", 82, 320.0),
    (2048, 64, "640x400", 258, 990.0),
]


# --- run folders built from the schemas ------------------------------------------------------------------


TABLES = {spec.source.name: spec.source for spec in SPECS}  # every run table


def make_run(
    root: Path,
    experiment: str,
    host: str,
    rows: dict[str, list[BaseModel]],
    single: dict[str, BaseModel] | None = None,
    params: dict[str, Any] | None = None,
    complete: bool = True,
) -> str:
    run = RunFolder.create(root, experiment, host, params or {})
    run.update(
        host_summary={"host": host, "Model name": f"Test CPU @ {host}", "CPU(s)": "2", "uname": "Linux test"},
        engine={"source": {"commit": "465b1f0e7", "origin": "test", "pinned": False}, "patch_sha256": "a5d6" * 16},
        lab={"commit": "0" * 40, "dirty": False},
    )
    for table, table_rows in rows.items():
        run.append(TABLES[table], table_rows)
    for name, row in (single or {}).items():
        run.rewrite(TABLES[name], [row])
    if complete:
        run.complete()
    else:
        run.fail("interrupted by SIGTERM")
    return run.path.name


def sweep_rows(speed: float) -> dict[str, list[BaseModel]]:
    points: list[BaseModel] = []
    samples: list[BaseModel] = []
    for i, (L, new) in enumerate(SWEEP_GRID):
        est = new / (3000.0 * speed / (1 + L / 4096)) * 1e3
        fake = est * (1 + 0.03 * (-1) ** i)
        arm = {"fake": fake, "genuine": fake * 1.02, "baseline": (L + new) / (3000.0 * speed) * 1e3 * 1.1}
        stats = {k: ArmStats(median_ms=v, median_lo_ms=v * 0.97, median_hi_ms=v * 1.03, min_ms=v * 0.95,
                             max_ms=v * 1.05, n_ok=3) for k, v in arm.items()}  # fmt: skip
        vs_base = fake / arm["baseline"]
        points.append(
            SweepPoint(
                point=f"L{L}_n{new}",
                L=L,
                new=new,
                n_kv_padded=ggml_pad(L + new),
                measurable=L + new > 256,
                baseline=stats["baseline"],
                fake=stats["fake"],
                genuine=stats["genuine"],
                prefill_tps=new / est * 1e3,
                opt_prefill_ms=est,
                fake_vs_estimate_ci=Interval(value=fake / est, lo=fake / est * 0.97, hi=fake / est * 1.03, n=3),
                fake_vs_genuine_ci=Interval(value=0.98, lo=0.95, hi=1.01, n=3),
                fake_vs_baseline_ci=Interval(value=vs_base, lo=vs_base * 0.95, hi=vs_base * 1.05, n=3),
                baseline_source="direct reps",
            )
        )
        samples += [
            SweepSample(point=f"L{L}_n{new}", L=L, new=new, arm=a, rep=0, ok=True, prompt_ms=arm[a], t_utc="x")
            for a in ARMS
        ]
    return {"points": points, "samples": samples}


def image_sweep_rows(speed: float) -> dict[str, list[BaseModel]]:
    """The text-only grid plus IMAGE_GRID: the estimate is (image + new) / prefill_tps(L) + encode."""
    rows = sweep_rows(speed)
    for i, (L, new, image, tokens, encode) in enumerate(IMAGE_GRID):
        lm_est = (tokens + new) / (3000.0 * speed / (1 + L / 4096)) * 1e3
        est = lm_est + encode
        fake = est * (1 + 0.02 * (-1) ** i)
        arm = {"fake": fake, "genuine": fake * 0.99, "baseline": (L + tokens + new) / (3000.0 * speed) * 1e3 + encode}
        stats = {k: ArmStats(median_ms=v, median_lo_ms=v * 0.97, median_hi_ms=v * 1.03, min_ms=v * 0.95,
                             max_ms=v * 1.05, n_ok=3) for k, v in arm.items()}  # fmt: skip
        point = f"L{L}_n{new}_img{image}"
        rows["points"].append(
            SweepPoint(
                point=point,
                L=L,
                new=new,
                n_kv_padded=ggml_pad(L + tokens + new),
                measurable=True,
                baseline=stats["baseline"],
                fake=stats["fake"],
                genuine=stats["genuine"],
                prefill_tps=(tokens + new) / lm_est * 1e3,
                opt_prefill_ms=est,
                fake_vs_estimate_ci=Interval(value=fake / est, lo=fake / est * 0.97, hi=fake / est * 1.03, n=3),
                fake_vs_genuine_ci=Interval(value=1.01, lo=0.98, hi=1.04, n=3),
                image=image,
                image_tokens=tokens,
                image_positions=16,
                encode_ms=encode,
                lm_ms=fake - encode,
            )
        )
        rows["samples"] += [
            SweepSample(point=point, L=L, new=new, arm=a, rep=0, ok=True, prompt_ms=arm[a], t_utc="x") for a in ARMS
        ]
    return rows


TINY_SHAPED = {
    "general.architecture": "qwen35moe", "qwen35moe.block_count": 8, "qwen35moe.embedding_length": 256,
    "qwen35moe.attention.head_count": 4, "qwen35moe.attention.head_count_kv": 2,
    "qwen35moe.attention.key_length": 64, "qwen35moe.full_attention_interval": 4, "qwen35moe.expert_count": 8,
    "qwen35moe.expert_used_count": 2, "qwen35moe.expert_feed_forward_length": 128,
    "qwen35moe.expert_shared_feed_forward_length": 128, "qwen35moe.ssm.conv_kernel": 4,
    "qwen35moe.ssm.state_size": 64, "qwen35moe.ssm.group_count": 2, "qwen35moe.ssm.time_step_rank": 4,
    "qwen35moe.ssm.inner_size": 256, "qwen35moe.vocab_size": 151936,
}  # fmt: skip


def profile_rows(
    scale: float, slope: float = 0.05, depths: tuple[int, ...] = (0, 512, 1024, 1536, 2048)
) -> tuple[dict[str, list[BaseModel]], dict[str, BaseModel]]:
    bands: list[BaseModel] = []
    walls: list[BaseModel] = []
    for d in depths:
        per = {"ffn_moe": 0.09, "attn_core": 0.01 + slope * d / 1000, "proj": 0.015, "gdn": 0.09, "other": 0.012}
        total = sum(per.values()) * scale
        fused = total * 512
        for b in BANDS:
            share = per[b] * scale / total
            bands.append(
                BandDepth(
                    depth=d,
                    band=b,
                    timed_ms=share * fused * 1.1,
                    share=share,
                    fused_chunk_ms=fused,
                    ms_per_token=share * fused / 512,
                )
            )
        walls += [
            ProfileWall(mode=m, fill="fake", process=0, rep=0, visit=0, depth=d, ms=fused) for m in ("fused", "timed")
        ]
    summary = ProfileSummary(
        max_depth=2048,
        crossover_depth=1600.0,
        crossover_note="1600",
        attn_slope_ms_per_token_per_1k=0.05,
        attn_intercept_ms_per_token=0.01,
        attn_r2=0.99,
        flat_cv={"ffn_moe": 0.02},
        timed_vs_fused_gap={str(d): 0.1 - 0.02 * i for i, d in enumerate(depths)},
        timed_vs_fused_gap_mean=0.06,
        fused_vs_bench={str(d): 1.0 + 0.01 * i for i, d in enumerate(depths)},
        crossover_ci=Interval(value=1600.0, lo=1500.0, hi=1700.0, n=3),
        attn_slope_ci=Interval(value=0.05, lo=0.045, hi=0.055, n=3),
    )
    # the predictions of the real cost model for a tiny-shaped hybrid, and peaks as a probe reports them
    peaks = Peaks(gemm_gflops=Interval(value=150.0, lo=140.0, hi=160.0, n=9),
                  copy_gbps=Interval(value=12.0, lo=11.5, hi=12.5, n=9), gemm_shape=(512, 256, 512),
                  copy_bytes=1 << 28, threads=2)  # fmt: skip
    rows = [b for b in bands if isinstance(b, BandDepth)]
    for r in rows:
        r.ms_per_token_lo, r.ms_per_token_hi = r.ms_per_token * 0.95, r.ms_per_token * 1.05
    annotate(rows, summary, cost_model(hparams_of(TINY_SHAPED), 512), peaks)
    return {"profile_walls": walls, "profile_bands": bands}, {"profile_summary": summary}


def inproc_rows(speed: float) -> tuple[dict[str, list[BaseModel]], dict[str, BaseModel]]:
    """A sweep in one process (`lab sweep --where inproc`) over a 2 x 2 grid, 3 reps per point, with its summary."""
    points: list[BaseModel] = []
    samples: list[BaseModel] = []
    for L, new in ((512, 64), (2048, 64), (512, 256), (2048, 256)):
        decode = new / (3000.0 * speed / (1 + L / 4096)) * 1e3
        ms = {
            "baseline": (L + new) / (3000.0 * speed) * 1e3,
            "fake": decode,
            "genuine": decode * 1.01,
            "plain": decode * 1.005,
        }
        blob, prep, copy = 1044 * L + 430316, 0.3 * L / 1024, 0.15 * L / 1024
        stats = {a: ArmStats(median_ms=v, median_lo_ms=v * 0.97, median_hi_ms=v * 1.03, n_ok=3) for a, v in ms.items()}
        point = f"L{L}_n{new}"
        points.append(SweepPoint(
            where="inproc", point=point, L=L, new=new, n_kv_padded=ggml_pad(L + new), measurable=True, reps=3,
            **stats, restore_prep_ci=Interval(value=prep, lo=prep * 0.95, hi=prep * 1.05, n=3),
            memcpy_ci=Interval(value=copy, lo=copy * 0.95, hi=copy * 1.05, n=3), blob_bytes=blob,
        ))  # fmt: skip
        samples += [
            SweepSample(where="inproc", point=point, L=L, new=new, arm=a, rep=rep, ok=True, prompt_ms=v,
                        prep_ms=prep if a == "genuine" else None, copy_ms=copy if a == "genuine" else None,
                        blob_bytes=blob if a == "genuine" else None, pos_max=-1 if a == "baseline" else L - 1)
            for a, v in ms.items()
            for rep in range(3)
        ]  # fmt: skip
    summary = ArmsSummary(
        bytes_per_cell=1044, fixed_bytes=430316, predicted_bytes_per_cell=1044, predicted_fixed_bytes=430080,
        attention_layers=2, recurrent_layers=6, restore_vs_memcpy_ci=Interval(value=0.49, lo=0.48, hi=0.5, n=12),
        fake_vs_genuine_ci=Interval(value=0.99, lo=0.985, hi=0.995, n=12),
    )  # fmt: skip
    return {"points": points, "samples": samples}, {"arms_summary": summary}


def replay_runs(root: Path) -> None:
    common = {"window": 3, "depth": 2, "length": 8, "keep": 3, "next_input": "9"}
    shared = {"last_full": "22", "last_suffix": "22", "next_full": "25", "next_suffix": "25", "exact": True}
    values = {"last_full_value": 22, "last_suffix_value": 22, "next_full_value": 25, "next_suffix_value": 25}
    per_layer = {"last_full": "28", "last_suffix": "57/2", "next_full": "32", "next_suffix": "193/6", "exact": False}
    diff_values = {"last_full_value": 28, "last_suffix_value": 28.5, "next_full_value": 32, "next_suffix_value": 32.17}
    differs = {"first_diff_layer": 2, "first_diff_pos": 5}
    exact = [
        RebuildExactRow.model_validate({"kv_source": "shared", **common, **shared, **values}),
        RebuildExactRow.model_validate({"kv_source": "per-layer", **common, **per_layer, **diff_values, **differs}),
    ]
    make_run(root, "rebuild_exact", "host-a", {"rebuild_exact": list(exact)})
    span = [
        RebuildSpanRow(
            window=w,
            depth=d,
            span=w + (d - 1) * (w - 1),
            cases=2 ** (w + d + 1),
            shared_window_exact=2 ** (w + d + 1),
            per_layer_span_exact=2 ** (w + d + 1),
            shorter_fails=w,
            counterexample=[0, 1],
            ok=True,
        )
        for w in (2, 3)
        for d in (1, 2)
    ]
    make_run(root, "rebuild_span", "host-a", {"rebuild_span": list(span)})
    cost = [
        RebuildCostRow(
            case=case,
            window=3,
            keep=4,
            length=12,
            start=0,
            end=end,
            valid_start=0,
            mode=mode,
            rows=rows,
            pairs=pairs,
            reference_rows=rows,
            reference_pairs=pairs,
        )
        for case, end, work in (("short", 2, [(2, 3)] * 3), ("long", 12, [(12, 33), (12, 9), (4, 9)]))
        for mode, (rows, pairs) in zip(MODES, work, strict=True)
    ]
    work = [
        RebuildRowWork(
            length=n, producer_layers=20, consumer_layers=20, keep=140, full=40 * n, compact=c, ratio=c / (40 * n)
        )
        for n, c in ((64, 2560), (1024, 23280))
    ]
    make_run(root, "rebuild_cost", "host-a", {"rebuild_cost": list(cost), "rebuild_row_work": list(work)})


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    params = {"sweep": {"Ls": [64, 512, 2048], "news": [64, 256]}}
    make_run(root, "sweep", "host-a", sweep_rows(1.0), params=params)
    make_run(root, "sweep", "host-b", sweep_rows(1.6), params=params)
    make_run(root, "sweep", "host-b", sweep_rows(1.3), params=params, complete=False)  # listed, not drawn
    for host, scale in (("host-a", 1.0), ("host-b", 0.8)):
        rows, single = profile_rows(scale)
        make_run(root, "profile", host, rows, single, params={"profile": {"chunk": 512}})
    for host, speed in (("host-a", 1.0), ("host-b", 1.5)):
        rows, single = inproc_rows(speed)
        params = {"sweep": {"Ls": [512, 2048], "news": [64, 256], "where": "inproc"}}
        make_run(root, "sweep", host, rows, single, params=params)
    replay_runs(root)
    return root


@pytest.fixture(scope="module")
def catalog(runs_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cat = tmp_path_factory.mktemp("clone-a") / "catalog"
    ingest(runs_dir, cat)
    return cat


@pytest.fixture(scope="module")
def reports(catalog: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("reports")
    return out, render_reports(catalog, out, SETTINGS)


@pytest.fixture(scope="module")
def empty_reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A catalog whose only run is incomplete: every table exists, and is empty."""
    root = tmp_path_factory.mktemp("runs-empty")
    make_run(root, "sweep", "host-a", sweep_rows(1.0), complete=False)
    cat = tmp_path_factory.mktemp("catalog-empty")
    ingest(root, cat)
    out = tmp_path_factory.mktemp("reports-empty")
    render_reports(cat, out, SETTINGS)
    return out


@pytest.fixture(scope="module")
def image_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two complete sweep runs: host-a with text-only and image steps, host-b text only."""
    root = tmp_path_factory.mktemp("runs-image")
    params = {"sweep": {"Ls": [64, 512, 2048], "news": [64, 256], "images": ["none", "320x200", "640x400"]}}
    make_run(root, "sweep", "host-a", image_sweep_rows(1.0), params=params)
    make_run(root, "sweep", "host-b", sweep_rows(1.6), params={"sweep": {"Ls": [64, 512, 2048], "news": [64, 256]}})
    cat = tmp_path_factory.mktemp("catalog-image") / "catalog"
    ingest(root, cat)
    return cat


def sweep_runs(catalog_dir: Path, where: str) -> list[str]:
    """The complete sweep runs measured in one place (their params' sweep.where), oldest first."""
    runs = catalog_runs(catalog_dir).query("experiment == 'sweep' and in_figures")
    places = [json.loads(p)["sweep"].get("where", "server") for p in runs["params_json"]]
    return [str(r) for r, w in zip(runs["run_id"], places, strict=True) if w == where]


def render_agreement(catalog_dir: Path, out: Path) -> list[Path]:
    return save_chart(agreement_chart(catalog_dir, catalog_runs(catalog_dir), SETTINGS), out, "agreement", SETTINGS)


# --- the browser ---------------------------------------------------------------------------------------


class Browser:
    """Chromium with every request outside file:// aborted and recorded."""

    def __init__(self, browser: Any) -> None:
        self.browser = browser

    def open(self, path: Path, interact: Any = None, ready: str = "#vis svg") -> dict[str, Any]:
        """Load `path` offline and wait for `ready` (a chart's SVG by default); returns mark counts, requests
        that tried to leave file://, console errors."""
        context = self.browser.new_context()
        blocked: list[str] = []

        def route(r: Any) -> None:
            if r.request.url.startswith("file://"):
                r.continue_()
            else:
                blocked.append(r.request.url)
                r.abort()

        context.route("**/*", route)
        page = context.new_page()
        errors: list[str] = []
        dialogs: list[str] = []  # an alert() a page's data smuggled in
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(path.as_uri())
        try:
            page.wait_for_selector(ready, timeout=10_000)
        except PlaywrightTimeout:
            raise AssertionError(f"{path.name}: no {ready}; blocked requests {blocked}, errors {errors}") from None
        result: dict[str, Any] = {"blocked": blocked, "errors": errors, **self.count(page)}
        result["dialogs"], result["text"] = dialogs, page.inner_text("body")
        if interact is not None:
            result["after"] = interact(page)
        context.close()
        return result

    @staticmethod
    def count(page: Any) -> dict[str, int]:
        def n(selector: str) -> int:
            return int(page.locator(f"#vis svg {selector}").count())

        return {
            "symbols": n("g.mark-symbol.role-mark path"),
            "areas": n("g.mark-area.role-mark path"),
            "rects": n("g.mark-rect.role-mark path"),
            "texts": n("g.mark-text.role-mark text"),
            "lines": n("g.mark-line.role-mark path"),
            "rules": n("g.mark-rule.role-mark line"),
        }


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install the system Chromium (Debian `chromium`; CI installs it)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        yield Browser(b)
        b.close()


# --- tests ------------------------------------------------------------------------------------------------


@pytest.mark.fast
def test_render_writes_every_chart_and_format(reports: tuple[Path, list[Path]]) -> None:
    out, paths = reports
    expected = [out / f"{name}.{fmt}" for name in CHARTS for fmt in ("html", "png", "svg")] + [out / "index.html"]
    assert paths == expected
    for p in paths:
        assert p.stat().st_size > 0, p
    html = (out / "agreement.html").read_text()
    assert "cdn.jsdelivr" not in html and "<script src=" not in html  # Vega is inlined
    assert (out / "agreement.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.browser
def test_agreement_draws_complete_runs_and_the_dropdown_filters(
    reports: tuple[Path, list[Path]], browser: Browser, catalog: Path
) -> None:
    out, _ = reports
    drawn = sweep_runs(catalog, "server")
    assert len(drawn) == 2  # the incomplete sweep run is not drawn, nor the sweeps in one process
    one = drawn[0]

    def pick_one_run(page: Any) -> dict[str, int]:
        page.select_option("select[name='sweep_run']", one)
        page.wait_for_timeout(200)
        return Browser.count(page)

    r = browser.open(out / "agreement.html", interact=pick_one_run)
    assert r["blocked"] == [] and r["errors"] == []
    n = len(SWEEP_GRID)
    # per run: n fake points (left) + n genuine + n baseline (right)
    assert r["symbols"] == 2 * 3 * n, r
    assert r["after"]["symbols"] == 3 * n, r["after"]
    assert r["areas"] == 1 and r["lines"] == 2  # the tolerance band and both y = x lines


@pytest.mark.browser
def test_bands_and_replay_draw_their_marks(reports: tuple[Path, list[Path]], browser: Browser, catalog: Path) -> None:
    out, _ = reports
    profiles = [str(r) for r in catalog_runs(catalog).query("experiment == 'profile'")["run_id"]]

    def pick_each_run(page: Any) -> list[tuple[int, bool]]:
        seen = []
        for run_id in profiles:
            page.select_option("select[name='profile_run']", run_id)
            page.wait_for_timeout(200)
            texts = page.locator("#vis svg g.mark-text.role-mark text").all_text_contents()
            seen.append((Browser.count(page)["areas"], any(run_id in t for t in texts)))
        return seen

    bands = browser.open(out / "bands.html", interact=pick_each_run)
    assert bands["after"] == [(len(BANDS), True)] * len(profiles)  # one run at a time, its own summary line
    assert bands["blocked"] == [] and bands["errors"] == []
    assert bands["areas"] == len(BANDS)  # one stacked area per band, for the selected run only
    assert bands["rules"] >= 2  # the crossover rule and the zero line of the gap panel
    assert bands["lines"] == len(BANDS) + 2  # the areas' outlines, TIMED/FUSED gap and FUSED/llama-bench
    rebuild = browser.open(out / "rebuild.html")
    assert rebuild["blocked"] == [] and rebuild["errors"] == []
    assert rebuild["rects"] >= 2 * 6 + 4 * 6 + 6 * 2 + 2  # exact grid, span grid, cost bars, row-work bars
    assert rebuild["texts"] >= 2 * 6 + 4 * 6


@pytest.mark.browser
def test_bands_mark_the_predicted_crossover_and_the_roofline_places_every_band(
    reports: tuple[Path, list[Path]], browser: Browser
) -> None:
    out, _ = reports
    bands = browser.open(out / "bands.html")
    texts = bands["texts"]
    assert texts >= 3 and bands["errors"] == []
    svg = (out / "bands.svg").read_text()
    assert "predicted from FLOPs" in svg and "crossover measured / predicted" in svg
    roof = browser.open(out / "roofline.html")
    assert roof["blocked"] == [] and roof["errors"] == []
    assert roof["symbols"] == 5 * 5  # every band at every depth of the selected run
    assert roof["lines"] == 1  # the roof: min(GEMM peak, intensity x memcpy bandwidth)
    assert roof["rules"] == 5 * 5  # each point's interval


@pytest.mark.browser
def test_the_index_opens_with_the_answer(reports: tuple[Path, list[Path]], browser: Browser) -> None:
    out, _ = reports

    def read(page: Any) -> dict[str, Any]:
        tables = page.locator("table.headline")
        rows = [tables.nth(i).locator("tbody tr").count() for i in range(tables.count())]
        captions = [tables.nth(i).locator("caption").inner_text() for i in range(tables.count())]
        return {"rows": rows, "captions": captions, "first": page.locator("h2").first.inner_text(),
                "text": page.locator("body").inner_text()}  # fmt: skip

    r = browser.open(out / "index.html", interact=read, ready="table.headline")
    assert r["blocked"] == [] and r["errors"] == []
    got = r["after"]
    assert got["first"] == "The answer"
    # the newest complete sweep of each host (same model, engine), then each host's newest profile: one table each,
    # its caption naming host, model and the llama.cpp it was measured on
    assert got["rows"] == [len(SWEEP_GRID)] * 2 + [1] * 2
    assert all("llama.cpp " in c for c in got["captions"]), got["captions"]
    assert "through llama-server" in got["captions"][0] and "(paired by rep)" in got["text"]
    assert "times faster" in got["text"] and "attention overtakes the MoE FFN at depth 1600 [1500, 1700]" in got["text"]
    assert "after 2,048 cached tokens costs" in got["text"]  # the deepest point in words, with its interval


@pytest.mark.browser
def test_arms_draw_one_run_at_a_time(reports: tuple[Path, list[Path]], browser: Browser, catalog: Path) -> None:
    out, _ = reports
    arms_runs = sweep_runs(catalog, "inproc")
    assert len(arms_runs) == 2

    def pick_each_run(page: Any) -> list[tuple[int, int, bool]]:
        seen = []
        for run_id in arms_runs:
            page.select_option("select[name='arms_run']", run_id)
            page.wait_for_timeout(200)
            texts = page.locator("#vis svg g.mark-text.role-mark text").all_text_contents()
            counts = Browser.count(page)
            seen.append((counts["lines"], counts["rules"], any(run_id in t for t in texts)))
        return seen

    r = browser.open(out / "arms.html", interact=pick_each_run)
    assert r["blocked"] == [] and r["errors"] == []
    # 4 arms x 2 new-token panels, and restore + memcpy per new; an interval bar per arm and point, and per
    # cache-read series and point; the selected run's summary line
    assert r["after"] == [(4 * 2 + 2 * 2, 4 * 4 + 2 * 4, True)] * len(arms_runs), r["after"]


@pytest.mark.browser
def test_empty_catalog_renders_an_explanatory_state(empty_reports: Path, browser: Browser) -> None:
    for name in CHARTS:
        r = browser.open(empty_reports / f"{name}.html")
        assert r["blocked"] == [] and r["errors"] == [], name
        assert r["texts"] >= 1 and r["symbols"] == 0 and r["areas"] == 0, (name, r)
        assert (empty_reports / f"{name}.png").exists() and (empty_reports / f"{name}.svg").exists()
    index = (empty_reports / "index.html").read_text()
    assert "incomplete: not drawn" in index and "interrupted by SIGTERM" in index
    nothing = empty_reports / "from-nothing"
    paths = render_reports(empty_reports / "no-catalog-here", nothing, ReportSettings(formats=["svg"]))
    assert [p.name for p in paths] == [f"{c}.svg" for c in CHARTS] + ["index.html"]


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if key in ("href", "src") and value:
                self.targets.append(value)


@pytest.mark.fast
def test_index_links_resolve_and_lists_provenance(reports: tuple[Path, list[Path]], catalog: Path) -> None:
    out, _ = reports
    html = (out / "index.html").read_text()
    parser = _Links()
    parser.feed(html)
    assert {f"{c}.html" for c in CHARTS} <= set(parser.targets)
    for target in parser.targets:
        assert "://" not in target and (out / target).is_file(), target
    runs = catalog_runs(catalog)
    for _, r in runs.iterrows():
        assert r["run_id"] in html and r["cpu_model"] in html
    assert html.count("not drawn</span>") == 1  # the incomplete sweep run
    assert "<code>465b1f0e7</code>" in html and f"<code>{'a5d6' * 3}</code>" in html  # the patch sha, short


@pytest.mark.fast
def test_same_catalog_renders_byte_identical(runs_dir: Path, reports: tuple[Path, list[Path]], tmp_path: Path) -> None:
    _, paths = reports
    clone = tmp_path / "clone-b" / "catalog"
    ingest(runs_dir, clone)
    again = render_reports(clone, tmp_path / "reports-b", SETTINGS)
    assert [p.name for p in again] == [p.name for p in paths]
    for a, b in zip(paths, again, strict=True):
        assert a.read_bytes() == b.read_bytes(), f"{a.name} differs between two renders of the same runs"


@pytest.mark.fast
def test_incomplete_rows_are_never_drawn(catalog: Path, tmp_path: Path) -> None:
    """Even if a table held rows of an incomplete run, the charts would not take them."""
    cat = tmp_path / "catalog"
    (cat / "tables").mkdir(parents=True)
    for name in ("runs", "sweep_points"):
        table_path(cat, name).write_bytes(table_path(catalog, name).read_bytes())
    runs = catalog_runs(cat)
    dead = str(runs.loc[~runs["in_figures"], "run_id"].iloc[0])
    pts = pd.read_parquet(table_path(cat, "sweep_points"))
    pd.concat([pts, pts.head(2).assign(run_id=dead)]).to_parquet(table_path(cat, "sweep_points"))
    drawn = figure_rows(cat, "sweep_points", runs, keys=["L", "new"])
    assert dead not in set(drawn["run_id"]) and len(drawn) == len(pts)


@pytest.mark.browser
def test_compare_renders_ratios(catalog: Path, reports: tuple[Path, list[Path]], browser: Browser) -> None:
    out, _ = reports
    runs = catalog_runs(catalog).query("in_figures")
    profiles = [str(x) for x in runs.loc[runs["experiment"] == "profile", "run_id"]]
    pairs = {
        "sweep": (sweep_runs(catalog, "server"), 4 * len(SWEEP_GRID)),
        "profile": (profiles, 5 * (len(BANDS) + 1)),
        "sweep in one process": (sweep_runs(catalog, "inproc"), 5 * 4),
    }
    for what, ((a, b), cells) in pairs.items():
        paths = render_compare(compare_catalog(catalog, a, b), out, SETTINGS)
        assert [p.name for p in paths] == [f"compare_{a}_vs_{b}.{fmt}" for fmt in ("html", "png", "svg")]
        r = browser.open(paths[0])
        assert r["blocked"] == [] and r["errors"] == []
        assert r["rects"] == cells and r["texts"] >= cells, (what, r)
    sweep = sweep_runs(catalog, "server")[0]
    profile = str(runs.loc[runs["experiment"] == "profile", "run_id"].iloc[0])
    with pytest.raises(CompareError, match="sweep run"):
        compare_catalog(catalog, sweep, profile)
    with pytest.raises(RunError, match="no unique run 'nope' in the catalog"):  # resolved as runs.resolve_run does
        compare_catalog(catalog, "nope", sweep)


@pytest.mark.browser
def test_agreement_marks_image_steps_and_splits_encode_from_lm(
    image_catalog: Path, browser: Browser, tmp_path: Path
) -> None:
    paths = render_agreement(image_catalog, tmp_path / "a")
    assert [p.name for p in paths] == ["agreement.html", "agreement.png", "agreement.svg"]
    drawn = catalog_runs(image_catalog).query("experiment == 'sweep' and in_figures")
    with_images, text_only = (str(r) for r in drawn["run_id"])

    def marks(page: Any) -> dict[str, Any]:
        def symbols(label: str) -> int:  # Vega-Lite describes every mark in its aria-label
            return int(page.locator(f'#vis svg g.mark-symbol.role-mark path[aria-label*="{label}"]').count())

        return {
            **Browser.count(page),
            "text_steps": symbols("step: text only;"),
            **{size: symbols(f"step: {size};") for size in sizes},
            "encode_bars": int(
                page.locator('#vis svg g.mark-rect.role-mark path[aria-label*="vision encode"]').count()
            ),
            "lm_bars": int(page.locator('#vis svg g.mark-rect.role-mark path[aria-label*="LM prefill"]').count()),
            "share_labels": sum(t.endswith("% encode") for t in page.locator("#vis svg text").all_text_contents()),
        }

    def pick(run_id: str) -> Any:
        def interact(page: Any) -> dict[str, Any]:
            before = marks(page)
            page.select_option("select[name='sweep_run']", run_id)
            page.wait_for_timeout(200)
            return {"before": before, "after": marks(page)}

        return interact

    n, m = len(SWEEP_GRID), len(IMAGE_GRID)
    sizes = sorted({size for _, _, size, _, _ in IMAGE_GRID})
    per_size = {size: 3 * sum(s == size for _, _, s, _, _ in IMAGE_GRID) for size in sizes}  # fake, genuine, baseline
    r = browser.open(paths[0], interact=pick(with_images))
    assert r["blocked"] == [] and r["errors"] == []
    # all runs: fake (left) + genuine and baseline (right), per point of each run
    assert r["symbols"] == 3 * (n + m) + 3 * n, r
    assert r["areas"] == 1 and r["lines"] == 2
    before, after = r["after"]["before"], r["after"]["after"]
    assert before["text_steps"] == 2 * 3 * n and all(before[s] == per_size[s] for s in sizes), before
    # one vision-encode and one LM-prefill bar per image point, and its encode share
    assert before["rects"] == 2 * m and before["encode_bars"] == before["lm_bars"] == before["share_labels"] == m
    assert after["symbols"] == 3 * (n + m) and after["text_steps"] == 3 * n, after
    assert after["rects"] == 2 * m and after["encode_bars"] == after["lm_bars"] == m, after
    other = browser.open(paths[0], interact=pick(text_only))["after"]["after"]  # a run without image steps
    assert other["symbols"] == other["text_steps"] == 3 * n and other["rects"] == other["share_labels"] == 0, other
    html = paths[0].read_text()
    assert '"vision encode"' in html and '"LM prefill"' in html and '"text only"' in html
    svg = paths[2].read_text()
    for label in ("vision encode", "LM prefill", "L 512 · 320x200", "L 2,048 · 640x400", "text only"):
        assert label in svg, label
    again = render_agreement(image_catalog, tmp_path / "b")
    for a, b in zip(paths, again, strict=True):
        assert a.read_bytes() == b.read_bytes(), f"{a.name} differs between two renders of the same catalog"


@pytest.mark.browser
def test_intervals_draw_as_error_bars_and_noise_warnings_reach_the_index(browser: Browser, tmp_path: Path) -> None:
    """A sweep with intervals: every arm's median gets an error bar, the verdicts are counted in the subtitle;
    the run's host-noise warnings are listed on the index."""
    rows = sweep_rows(1.0)
    for p in rows["points"]:
        assert isinstance(p, SweepPoint)
        for arm in (p.fake, p.genuine, p.baseline):
            assert arm.median_ms is not None
            arm.median_lo_ms, arm.median_hi_ms = arm.median_ms * 0.97, arm.median_ms * 1.04
        p.fake_vs_estimate_ci = Interval(
            value=p.fake_vs_estimate_ci.value if p.fake_vs_estimate_ci else 1.0, lo=0.98, hi=1.05, n=5
        )
        p.fake_vs_genuine_ci = Interval(value=0.98, lo=0.97, hi=0.99, n=5, processes=3)  # thin: 3 processes
        p.estimate_verdict, p.genuine_verdict, p.reps = "undecided", "agree", 5
    runs = tmp_path / "runs"
    run_id = make_run(runs, "sweep", "vm", rows)
    RunFolder.open(runs / run_id).add_results(host_state={"warnings": ["turbo/boost is on: the clock moves"]})
    ingest(runs, tmp_path / "cat")
    out = tmp_path / "reports"
    render_reports(tmp_path / "cat", out, SETTINGS)
    r = browser.open(out / "agreement.html")
    assert r["blocked"] == [] and r["errors"] == []
    assert r["rules"] == 3 * len(SWEEP_GRID), r  # fake (left) + genuine and baseline (right)
    spec = (out / "agreement.html").read_text()
    assert f"verdicts vs the estimate {len(SWEEP_GRID)} undecided" in spec
    assert spec.count("[-3.0%, -1.0%] (from fewer than 5 processes or samples)") == len(SWEEP_GRID)
    assert "[-2.0%, +5.0%] (from" not in spec  # five samples, within-run: not thin
    assert "turbo/boost is on: the clock moves" in (out / "index.html").read_text()


@pytest.mark.browser
def test_a_hostile_host_name_is_text_on_every_page_never_a_script(browser: Browser, tmp_path: Path) -> None:
    """Host names (LAB_HOST_NAME, a host alias) and run ids reach the charts' specs inlined in <script>: a name
    that closes the script must stay a name."""
    payload = "x</script><script>alert(1)</script>"
    root = tmp_path / "runs"
    make_run(root, "sweep", payload, sweep_rows(1.0), params={"sweep": {"Ls": [64, 512, 2048], "news": [64, 256]}})
    cat = tmp_path / "catalog"
    ingest(root, cat)
    out = tmp_path / "reports"
    render_reports(cat, out, SETTINGS)
    r = browser.open(out / "agreement.html")
    assert r["dialogs"] == [] and r["errors"] == [] and r["symbols"] > 0, r
    assert payload in (out / "agreement.html").read_text().replace("\\u003c", "<").replace("\\u003e", ">")
    assert "<script>alert(1)" not in (out / "agreement.html").read_text()
    index = browser.open(out / "index.html", ready="body")
    assert index["dialogs"] == [] and payload in index["text"], index["text"][:500]


@pytest.mark.fast
def test_a_profile_that_never_reaches_the_crossover_is_stored_and_drawn_as_not_reached(tmp_path: Path) -> None:
    """A short profile (attention still below the FFN at its deepest depth) is the normal case: its summary says
    'not reached by depth D', the catalog reads it back, and every report renders with it."""
    rows, _ = profile_rows(1.0, slope=0.01, depths=(0, 512, 1024))
    bands = [r for r in rows["profile_bands"] if isinstance(r, BandDepth)]
    summary = summarize(bands)
    assert summary.crossover_depth is None and summary.crossover_note == "not reached by depth 1024"
    annotate(bands, summary, cost_model(hparams_of(TINY_SHAPED), 512), None)
    root = tmp_path / "runs"
    make_run(root, "profile", "host-a", rows, {"profile_summary": summary}, params={"profile": {"chunk": 512}})
    cat = tmp_path / "catalog"
    ingest(root, cat)
    back = [unflatten(r, ProfileSummary) for r in load_table(cat, "profile_summary").to_dict("records")]
    assert [r.crossover_depth for r in back] == [None] and back[0].crossover_note == "not reached by depth 1024"
    out = tmp_path / "reports"
    render_reports(cat, out, SETTINGS)
    assert "not reached by depth 1024" in (out / "bands.svg").read_text()
    index = (out / "index.html").read_text()
    assert "not reached by depth 1024" in index and "predicted from FLOPs" in index


LOG_DEPTHS = (0, *(1024 * 2**k for k in range(8)))  # `--depths log:131072`: 0, 1024, 2048, ..., 131072
LINEAR_DEPTHS = tuple(range(0, 4097, 512))  # the default profile
# a point of the checks panel in the SVG: its series, its depth and its x
CHECK_POINT = re.compile(
    r'aria-label="[^"]*?check: ([^;"]+); series: [^;"]+; depth \(tokens\): (\d+);[^"]*" role="graphics-symbol" '
    r'aria-roledescription="point" transform="translate\(([-\d.]+),'
)


def profile_catalog(tmp: Path, depths: tuple[int, ...], bench_depths: tuple[int, ...]) -> Path:
    """A catalog of one profile run probed at `depths`, its llama-bench and fake-vs-real checks at `bench_depths`,
    every check with an interval over processes."""
    rows, single = profile_rows(1.0, slope=0.01, depths=depths)
    summary = single["profile_summary"]
    assert isinstance(summary, ProfileSummary)

    def ratio(v: float) -> Interval:
        return Interval(value=v, lo=v - 0.02, hi=v + 0.02, n=6, processes=3)

    summary.timed_vs_fused_gap_ci = {d: ratio(1 + gap) for d, gap in summary.timed_vs_fused_gap.items()}
    summary.fused_vs_bench = {str(d): 1.01 for d in bench_depths}
    summary.fused_vs_bench_ci = {str(d): ratio(1.01) for d in bench_depths}
    summary.fake_vs_real = {str(d): {"total": ratio(1.03), "ffn_moe": ratio(1.0)} for d in bench_depths}
    summary.depths, summary.bench_depths = list(depths), list(bench_depths)
    root = tmp / "runs"
    make_run(root, "profile", "host-a", rows, {"profile_summary": summary}, params={"profile": {"chunk": 512}})
    ingest(root, tmp / "catalog")
    return tmp / "catalog"


def depth_encodings(spec: Any) -> list[dict[str, Any]]:
    """Every x encoding of `depth` in a Vega-Lite spec (both panels' layers)."""
    if isinstance(spec, list):
        return [x for item in spec for x in depth_encodings(item)]
    if not isinstance(spec, dict):
        return []
    x = spec.get("encoding", {}).get("x", {})
    found = [x] if isinstance(x, dict) and x.get("field") == "depth" else []
    return found + [x for key, value in spec.items() if key != "encoding" for x in depth_encodings(value)]


@pytest.mark.fast
@pytest.mark.parametrize(("depths", "log"), [(LOG_DEPTHS, True), (LINEAR_DEPTHS, False)])
def test_the_bands_depth_axis_is_log_when_the_probes_span_more_than_a_decade(
    tmp_path: Path, depths: tuple[int, ...], log: bool
) -> None:
    cat = profile_catalog(tmp_path, depths, depths)
    spec = bands_chart(cat, catalog_runs(cat), SETTINGS).to_dict()
    axes = depth_encodings(spec)
    assert len(axes) == 3  # the band areas, the checks' lines and their interval bands
    for x in axes:
        assert x["scale"].get("type") == ("symlog" if log else None), x  # None: Vega-Lite's linear default
        assert ("log axis" in x["title"]) == log, x["title"]
        if log:  # 0 shows, linear below half the shallowest probe; a tick at each (log-spaced) probe
            assert x["scale"]["constant"] == 512 and x["axis"]["values"] == list(depths)
    assert spec["resolve"]["scale"]["x"] == "shared"


@pytest.mark.fast
def test_the_log_axis_starts_above_a_decade_of_nonzero_depths() -> None:
    def scale_type(depths: list[int]) -> Any:
        x: Any = depth_encoding(depths).to_dict()
        return x["scale"].get("type")

    assert scale_type([0, 512, 5120]) is None  # exactly a decade: linear
    assert scale_type([0, 512, 5632]) == "symlog"
    assert scale_type([0, 100, 1000, 100_000]) == "symlog"
    assert scale_type([0]) is None and scale_type([4096]) is None  # nothing to span


@pytest.mark.fast
def test_checks_run_at_the_shallower_depths_only_are_drawn_at_theirs_on_the_bands_scale(tmp_path: Path) -> None:
    """llama-bench and the fake-vs-real check ran at a real fill's depths (0..4096) of a log profile to 131072:
    each check is drawn at its own depths, at the x the band chart puts that depth (one symlog scale)."""
    bench = LOG_DEPTHS[:4]
    cat = profile_catalog(tmp_path, LOG_DEPTHS, bench)
    settings = ReportSettings(formats=["svg"])
    [svg] = save_chart(bands_chart(cat, catalog_runs(cat), settings), tmp_path / "out", "bands", settings)
    points: dict[str, dict[int, float]] = {}
    for series, depth, x in CHECK_POINT.findall(svg.read_text()):
        points.setdefault(series, {})[int(depth)] = float(x)
    assert sorted(points) == sorted([GAP, BENCH, FAKE])
    assert sorted(points[GAP]) == list(LOG_DEPTHS)
    assert sorted(points[BENCH]) == sorted(points[FAKE]) == list(bench)
    for depth in bench:
        assert points[BENCH][depth] == pytest.approx(points[GAP][depth]) == pytest.approx(points[FAKE][depth])
    width = settings.width
    assert points[GAP][0] == 0 and points[GAP][131072] == pytest.approx(width, abs=0.01)  # to the deepest probe
    symlog_4096 = width * math.log1p(4096 / 512) / math.log1p(131072 / 512)  # symlog, constant 512
    assert points[BENCH][4096] == pytest.approx(symlog_4096, abs=0.01)
