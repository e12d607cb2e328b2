"""Every closing table fits a 100-column terminal at its natural width (drawn on a wide console, as a log gets it),
and drawn at 100 columns no line is longer, no cell is cut with an ellipsis and no cell is wrapped: the records
are shaped like a real run's (lab sweep through the server and in one process with images, plain hits and the
decode at depth; lab profile with every check; lab engine decode; lab trace replay and tune; lab compare)."""

from __future__ import annotations

import functools
import io
import re
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from lab.catalog.compare import CompareRow, Comparison, ModelRef
from lab.catalog.headline import profile_of, steps_of
from lab.core.schemas import (
    BANDS,
    ArmsSummary,
    ArmStats,
    AttnKind,
    BandDepth,
    BandProcess,
    Components,
    ConversationCauseResult,
    ConversationStepResult,
    ConversationTaskResult,
    DecodeDepth,
    Interval,
    ProfileSummary,
    ServerShare,
    SweepPoint,
    ggml_pad,
)
from lab.core.schemas.trace import TuneSetting
from lab.experiments.profile.efficiency import annotate
from lab.measure.costmodel import cost_model
from lab.measure.peaks import Peaks
from lab.measure.timemodel import fit, predict
from lab.models.hparams import hparams_of
from lab.presenters.catalog import print_headline
from lab.presenters.compare import compare_table
from lab.presenters.runs import show_decode, show_profile, show_replay, show_sweep, show_tune

pytestmark = pytest.mark.fast

WIDTH = 100
HYBRID = {
    "general.architecture": "qwen35moe", "general.file_type": 1, "qwen35moe.block_count": 8,
    "qwen35moe.embedding_length": 256, "qwen35moe.attention.head_count": 4, "qwen35moe.attention.head_count_kv": 2,
    "qwen35moe.attention.key_length": 64, "qwen35moe.attention.value_length": 64,
    "qwen35moe.full_attention_interval": 4, "qwen35moe.expert_count": 8, "qwen35moe.expert_used_count": 2,
    "qwen35moe.expert_feed_forward_length": 128, "qwen35moe.expert_shared_feed_forward_length": 128,
    "qwen35moe.ssm.conv_kernel": 4, "qwen35moe.ssm.state_size": 64, "qwen35moe.ssm.group_count": 2,
    "qwen35moe.ssm.time_step_rank": 4, "qwen35moe.ssm.inner_size": 256, "qwen35moe.vocab_size": 151936,
}  # fmt: skip
DEPTHS = [0, 512, 1024, 2048, 4096, 8192, 16384]


def iv(value: float, rel: float = 0.04, n: int = 40, processes: int = 8) -> Interval:
    """An interval as a run of 8 processes x 5 reps gives it, `rel` of its value either side (a bit lopsided)."""
    return Interval(value=value, lo=value * (1 - rel), hi=value * (1 + 1.3 * rel), n=n, processes=processes)


def arm(ms: float) -> ArmStats:
    return ArmStats(median_ms=ms, median_lo_ms=ms * 0.96, median_hi_ms=ms * 1.05, min_ms=ms * 0.9, max_ms=ms * 1.2,
                    n_ok=40)  # fmt: skip


GRID = [(512, 64), (2048, 64), (4096, 64), (4096, 256), (16384, 64), (16384, 1024), (32768, 256), (65536, 1024)]


def sweep_points(where: str = "server", images: bool = False, plain: bool = False) -> list[SweepPoint]:
    """A sweep's points to L 65,536 (a 5-digit baseline in ms), every optional column filled."""
    out = []
    for i, (L, new) in enumerate(GRID):
        est = new / (3000.0 / (1 + L / 4096)) * 1e3
        fake = est * (1.02 + 0.01 * (-1) ** i)
        base = (L + new) / 3000.0 * 1e3 * (1 + L / 16384)
        verdicts = ("agree", "undecided", "disagree")
        p = SweepPoint(
            where=where,  # type: ignore[arg-type]
            point=f"L{L}_n{new}" + ("_img640x400" if images else ""),
            L=L, new=new, n_kv_padded=ggml_pad(L + new), measurable=True,
            baseline=arm(base), fake=arm(fake), genuine=arm(fake * 1.003),
            plain=arm(fake * 1.01) if plain else ArmStats(),
            prefill_tps=new / est * 1e3, opt_prefill_ms=est, estimate_ci=iv(est),
            fake_vs_estimate_ci=iv(1.068, 0.03), fake_vs_genuine_ci=iv(0.997, 0.008),
            fake_vs_baseline_ci=iv(fake / base),
            genuine_vs_estimate_ci=iv(1.009, 0.02), batch_effect_ci=iv(1.12, 0.03),
            genuine_verdict=verdicts[i % 3],  # type: ignore[arg-type]
            estimate_verdict=verdicts[(i + 1) % 3] if where == "inproc" else None,  # type: ignore[arg-type]
            server_share_ms_ci=iv(1.234 + L / 4096) if where == "server" else None,
            baseline_fill=arm(base * 0.98), fill_step_ci=iv(est * 0.99), fill_speedup_ci=iv(base / est),
            genuine_vs_plain_ci=iv(0.993, 0.01) if plain else None, plain_verdict="undecided",
            reps=40, processes=8, rep_s=iv(2.345), n_out=32, decode_ci=iv(12.345),
            components={"fake": Components(between=0.021, within=0.034, processes=8, reps=5)},
            diagnostics=["the fake arm's first rep was 3x the median"] if i == 2 else [],
            image="640x400" if images else None, image_tokens=258 if images else None,
            encode_ms=960.0 if images else None, encode_ci=iv(960.0) if images else None,
            bench_check_ci=iv(est * 1.01) if where == "server" else None,
            vs_inproc={"fake": iv(1.031), "genuine": iv(1.027)} if where == "server" else {},
            restore_prep_ci=iv(0.31 * L / 1024) if where == "inproc" else None,
            restore_step_vs_genuine_ci=iv(1.041, 0.02) if where == "inproc" else None,
            cache_read_share_ci=iv(0.043, 0.1) if where == "inproc" else None,
            blob_bytes=1044 * L + 430316 if where == "inproc" else None,
        )  # fmt: skip
        out.append(p)
    return out


def profile_summary(depths: list[int]) -> ProfileSummary:
    d = [str(x) for x in depths]
    verdicts = ("agree", "undecided", "disagree")
    return ProfileSummary(
        max_depth=max(depths), crossover_depth=2320.0, crossover_note="2320", attn_slope_ms_per_token_per_1k=0.0512,
        attn_intercept_ms_per_token=0.01, attn_r2=0.998, flat_cv={"ffn_moe": 0.02},
        timed_vs_fused_gap={k: 0.04 for k in d}, timed_vs_fused_gap_mean=0.04,
        fused_vs_bench={k: 1.01 for k in d[:4]}, fill="fake", reps=5, processes=8, depths=depths,
        bench_depths=depths[:4], crossover_ci=iv(2320.0), attn_slope_ci=iv(0.0512), attn_r2_ci=iv(0.998, 0.001),
        band_slope_ci={b: iv(0.0123) for b in BANDS}, band_r2_ci={b: iv(0.91, 0.02) for b in BANDS},
        timed_vs_fused_gap_ci={k: iv(1.043, 0.02) for k in d}, fused_vs_bench_ci={k: iv(1.012, 0.015) for k in d[:4]},
        timed_vs_fused_verdict={k: verdicts[i % 3] for i, k in enumerate(d)},  # type: ignore[misc]
        fused_vs_bench_verdict={k: verdicts[i % 3] for i, k in enumerate(d[:4])},  # type: ignore[misc]
        timed_vs_fused_all=iv(1.041, 0.01), timed_vs_fused_all_verdict="agree",
        fused_vs_bench_all=iv(1.011, 0.01), fused_vs_bench_all_verdict="agree",
        bench_tolerance=0.05, timed_tolerance=0.1, real_tolerance=0.05,
        fake_vs_real={k: {c: iv(1.004, 0.02) for c in ("total", *BANDS)} for k in d[:4]},
        fake_vs_real_verdict={k: {"total": "agree", "ffn_moe": "undecided", "attn_core": "disagree"} for k in d[:4]},
        fake_vs_real_all={"total": iv(1.002, 0.01)}, fake_vs_real_all_verdict={"total": "agree"},
        attn_kinds=[
            AttnKind(kind="full", layers=2, ms_per_token={k: iv(0.0123 * (1 + int(k) / 1024)) for k in d},
                     slope_ci=iv(0.0123)),
            AttnKind(kind="window", layers=6, window=512, ms_per_token={k: iv(0.0456) for k in d}, fit_from=512,
                     slope_ci=Interval(value=0.0002, lo=-0.0004, hi=0.0009, n=40, processes=8)),
        ],
    )  # fmt: skip


def profile_records() -> tuple[list[BandDepth], ProfileSummary, Any, Any]:
    cost = cost_model(hparams_of(HYBRID), 512)
    per_band = {"ffn_moe": 0.09, "attn_core": 0.01, "proj": 0.015, "gdn": 0.09, "other": 0.012}
    rows = []
    for d in DEPTHS:
        per = {**per_band, "attn_core": 0.01 + 0.05 * d / 1000}
        fused = sum(per.values()) * 512
        for b in BANDS:
            ms = per[b] * fused / sum(per.values()) / 512 * 512
            rows.append(BandDepth(depth=d, band=b, timed_ms=ms * 1.04, share=per[b] / sum(per.values()),
                                  fused_chunk_ms=fused, ms_per_token=ms, ms_per_token_lo=ms * 0.97,
                                  ms_per_token_hi=ms * 1.04))  # fmt: skip
    summary = profile_summary(DEPTHS)
    peaks = Peaks(gemm_gflops=iv(150.0), copy_gbps=iv(12.0), gemm_shape=(512, 256, 512), copy_bytes=1 << 28, threads=2)
    annotate(rows, summary, cost, peaks)
    band_rows = [
        BandProcess(process=c, depth=r.depth, band=r.band, timed_ms=0.0, ms_per_token=r.ms_per_token * (1 + 0.01 * c))
        for c in range(5)
        for r in rows
    ]
    prediction = predict(fit(band_rows, cost), None, DEPTHS, source="run x", model="tiny.gguf")
    return rows, summary, prediction, cost


def decode_rows() -> list[DecodeDepth]:
    return [
        DecodeDepth(depth=L + 64, L=L, new=64, n_out=32, server_ms=iv(12.345 + L / 1e4), bench_ms=iv(12.1 + L / 1e4),
                    ratio=iv(1.021, 0.01), verdict=v, tolerance=0.05)  # type: ignore[arg-type]
        for L, v in ((448, "agree"), (4032, "undecided"), (16320, "disagree"), (65472, "agree"))
    ]  # fmt: skip


CAUSES = ("messages dropped", "reasoning dropped", "tool output cut", "system prompt", "image evicted")


Replay = tuple[list[ConversationStepResult], list[ConversationTaskResult], list[ConversationCauseResult]]


def replay_records() -> Replay:
    steps = []
    for k, task in enumerate(("task000", "swe-bench-lite-astropy-12907")):
        for s in range(1, 8):
            L, new = 1200 * s + 37 * k, 140 + 31 * s
            cause = CAUSES[s % len(CAUSES)] if s % 3 == 0 else None
            steps.append(ConversationStepResult(
                task_id=task, step=s, prompt_cells=L + new, common=L, new=new, diverged_at=s + 3 if cause else None,
                cause=cause, reply_tokens=231, images=0, today_ms=iv(2134.5 if cause else 81.2),
                optimum_ms=iv(78.9), no_cache_ms=iv(12345.6), today_cache_n=L if not cause else 412,
                predicted_cache_n=L if not cause else 4096, checkpoint_restores=3 if cause else 0,
                ram_cache_restores=2 if cause else 0, full_reprocesses=1 if cause else 0, window_departure=bool(cause),
                order="holds" if s % 2 else "violated", decode_ms_per_token=iv(12.34), tool_s=1.5,
            ))  # fmt: skip
    totals = [
        ConversationTaskResult(task_id=t, n_steps=7, today_s=iv(12.34), optimum_s=iv(1.29), no_cache_s=iv(123.45),
                               realised=iv(0.919, 0.04), decode_s=iv(23.45), tool_s=123.4, opt_wall_s=iv(234.56))
        for t in ("task000", "swe-bench-lite-astropy-12907")
    ]  # fmt: skip
    causes = [
        ConversationCauseResult(cause=c, departures=12, today_s=iv(12.34), optimum_s=iv(1.23), no_cache_s=iv(123.45),
                                today_extra_s=iv(11.11))
        for c in CAUSES
    ]  # fmt: skip
    return steps, totals, causes


def tune_rows() -> list[TuneSetting]:
    out = []
    for i, (checkpoints, ram, role, swa) in enumerate(
        ((32, 8192, "defaults", False), (8, 0, "candidate", True), (64, 16384, "candidate", False),
         (0, -1, "grid", False))
    ):  # fmt: skip
        diff = Interval(value=0.004, lo=-0.012, hi=0.021, n=40, processes=8) if role == "candidate" else None
        out.append(TuneSetting(
            key=f"s{i}", flags=f"--ctx-checkpoints {checkpoints} --cache-ram {ram}" + (" --swa-full" if swa else "")
            + " --no-reasoning-preserve" * (i == 2), server_version="0.5.0-dev (build 1, commit 0c1e57098)",
            checkpoints=checkpoints, checkpoint_min_step=8192, cache_ram_mib=ram, swa_full=swa,
            reasoning_preserve=i != 2, role=role, on_front=True, predicted_prefill_s=123.45, predicted_peak_mib=12345.6,
            predicted_reused=1234567, within_budget=i != 2, predicted_exact=13, measured_steps=14,
            today_s=iv(123.45), realised=iv(0.919, 0.04), vs_defaults=diff,
            verdict="undecided" if diff else None, recommended=i == 1, recommended_as="less memory" if i == 1 else None,
            differing_steps=3 if diff else None, vs_defaults_differing=diff, vs_defaults_alike=diff,
        ))  # type: ignore[arg-type]  # fmt: skip
    return out


def comparisons() -> list[Comparison]:
    """Two sweeps compared (unpaired, L / new / image keys), and one run's two sides interleaved (called)."""
    keys = ("where", "L", "new", "image")
    metrics = ("fake_median_ms", "genuine_median_ms", "baseline_median_ms", "fake_vs_genuine_ci_value")
    rows = [
        CompareRow(key=("server", L, new, "640x400"), metric=m, a=1234.5678, b=1301.2345,
                   ci=Interval(value=1.054, lo=0.998, hi=1.112, n=40, processes=8), of_ratio=m.endswith("ci_value"))
        for L, new in GRID
        for m in metrics
    ]  # fmt: skip
    summary = [CompareRow(key=(), metric=m, a=None, b=None, ci=iv(1.054, 0.02)) for m in metrics]
    models = (ModelRef("ab" * 32, "/models/Qwen3.5-35B-A3B-Q4_K_M.gguf"), ModelRef("ab" * 32, "/m/q.gguf"))
    run_a, run_b = "2026-12-06T10-11-12Z_sweep_vm_a1b2c3", "2026-12-06T11-12-13Z_sweep_vm_d4e5f6"
    return [
        Comparison("sweep", run_a, run_b, keys, rows, summary, drift=0.012, models=models),
        Comparison("sweep", run_a, run_a, keys, rows, summary, models=models, paired=True, tolerance=0.03),
        Comparison("profile", run_a, run_b, ("depth", "band"), [
            CompareRow(key=(16384, "attn_core"), metric="ms_per_token", a=0.123, b=0.234, ci=iv(1.9))
        ]),
    ]  # fmt: skip


class Tables(Console):
    """A console that keeps the tables printed to it (and drops the prose lines around them)."""

    def __init__(self) -> None:
        super().__init__(width=WIDTH, record=True, file=io.StringIO())
        self.tables: list[Table] = []

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.tables += [o for o in objects if isinstance(o, Table)]


def closing_tables(wide: bool = False) -> dict[str, Table]:
    """Every closing table, named by the command and its title's first words."""
    out: dict[str, Table] = {}

    def grab(name: str, show: Any, *args: Any) -> None:
        c = Tables()
        show(c, *args, **({"wide": True} if wide else {}))
        for i, t in enumerate(c.tables):
            out[f"{name} {i}: {str(t.title or '')[:40]}"] = t

    for label, points in (
        ("sweep server", sweep_points()),
        ("sweep images+plain", sweep_points(images=True, plain=True)),
        ("sweep inproc", sweep_points("inproc", plain=True)),
        ("sweep both places", sweep_points() + sweep_points("inproc")),
    ):
        summary = ArmsSummary(restore_vs_memcpy_ci=iv(0.49), restore_gbps_ci=iv(4.9), memcpy_gbps_ci=iv(10.1))
        grab(label, show_sweep, points, summary, [1.5], None, 0.0)
        share = ServerShare(fixed_ms_ci=iv(1.234), per_new_ms_ci=iv(0.0123), per_1k_cached_ms_ci=iv(0.0456),
                            share_ci=iv(1.023, 0.01), points=8, processes=8)  # fmt: skip
        with_share = functools.partial(show_sweep, share=share)
        grab(label + " share", with_share, points, summary, [1.5], None, 0.0)
    rows, summary, prediction, cost = profile_records()
    grab("profile", show_profile, rows, summary, prediction, cost)
    model = "Holo3-35B-A3B-Q4_K_M.gguf"
    steps = steps_of(sweep_points(), "nuc16", model, "r1", "465b1f0e7")
    steps += steps_of(sweep_points(), "nuc16", model, "r2", "0c1e57098")
    shares = dict(zip(BANDS, (0.3, 0.5, 0.1, 0.05, 0.05), strict=True))
    bands = [
        BandDepth(depth=65536, band=b, timed_ms=1, share=v, fused_chunk_ms=1, ms_per_token=1) for b, v in shares.items()
    ]
    headline = functools.partial(lambda c, *a, wide=False: print_headline(c, *a))  # the answer has one width
    grab("headline", headline, steps, [profile_of(bands, summary, "nuc16", model, "r3", "465b1f0e7")])
    grab("decode", show_decode, decode_rows(), "Qwen3.5-35B-A3B-Q4_K_M.gguf", 2)
    grab("replay", show_replay, *replay_records())
    grab("tune", show_tune, *replay_records(), tune_rows(), None)
    for i, c in enumerate(comparisons()):
        out[f"compare {i}"] = compare_table(c, wide=wide) if wide else compare_table(c)
    return out


TABLES = closing_tables()
EXPECTED = ("sweep server", "sweep inproc", "profile", "decode", "replay", "tune", "compare")


def natural_width(table: Table) -> int:
    return max(len(line) for line in rendered(table, 400).splitlines())


def rendered(table: Table, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


def cells(table: Table) -> list[str]:
    out = []
    for col in table.columns:
        for c in col.cells:
            out.append(Text.from_markup(c).plain if isinstance(c, str) else str(c))
    return out


def test_every_command_has_closing_tables() -> None:
    for name in EXPECTED:
        assert any(k.startswith(name) for k in TABLES), (name, list(TABLES))


@pytest.mark.parametrize("name", list(TABLES))
def test_the_table_fits_100_columns_at_its_natural_width(name: str) -> None:
    table = TABLES[name]
    assert natural_width(table) <= WIDTH, f"{name}: {natural_width(table)} columns\n{rendered(table, 400)}"


@pytest.mark.parametrize("name", list(TABLES))
def test_drawn_at_100_columns_no_line_is_longer_and_no_cell_is_cut_or_wrapped(name: str) -> None:
    table = TABLES[name]
    text = rendered(table, WIDTH)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH, text
    assert "…" not in text, text
    for c in cells(table):  # each cell whole on one line: not wrapped, a number never split
        assert any(c in line for line in lines), (name, c, text)


NUMBER = re.compile(r"\d+\.\d+")


@pytest.mark.parametrize("name", [n for n in TABLES if not n.startswith("compare") and "predicted front" not in n])
def test_every_printed_median_or_ratio_carries_its_interval(name: str) -> None:
    """A cell with a decimal number holds its interval too: `[lo, hi]`, or `+-x%` (not the policy model's
    predictions on tune's front, nor compare's, whose B/A cells carry theirs and the A and B behind them are --wide)."""
    for col in TABLES[name].columns:
        if str(col.header) == "tool":  # the agent's tool seconds as the trace recorded them: no samples
            continue
        for c in col.cells:
            text = Text.from_markup(c).plain if isinstance(c, str) else str(c)
            if NUMBER.search(text) and "[" not in text and "+-" not in text:
                pytest.fail(f"{name}: {text!r} has no interval")


def test_wide_keeps_every_column_the_default_moved() -> None:
    wide = closing_tables(wide=True)
    headers = {str(c.header) for t in wide.values() for c in t.columns}
    for must in ("llama-bench", "server share - 1", "cache read ms", "decode ms/token at L+new", "s per rep",
                 "genuine/plain - 1", "opt_wall", "peak MiB", "interval over"):  # fmt: skip
        assert must in headers, must
