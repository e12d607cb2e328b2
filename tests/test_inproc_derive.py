"""What the sweep in one process derives from its samples, without an engine: the memory shape from GGUF
metadata, the point summaries (paired ratios, the cache-read share, bandwidth, the fill passes' baseline and
estimate: the one derivation the server side uses too), and which arms each rep runs."""

from __future__ import annotations

import pytest

from lab.core.schemas import InprocFill, SweepPoint, SweepSample
from lab.core.settings import SweepSettings
from lab.experiments.sweep.grid import GridPoint
from lab.experiments.sweep.inproc import restore_summary, summarize_inproc
from lab.experiments.sweep.points import decided, rep_arms
from lab.measure.fills import fill_values
from lab.models.memshape import MemoryShape, memory_shape

pytestmark = pytest.mark.fast

# a qwen35moe hybrid laid out like the reference model (40 layers, every 4th attends: 10 attention and 30
# Gated-DeltaNet layers); head and state sizes are illustrative
HYBRID = {
    "general.architecture": "qwen35moe",
    "qwen35moe.block_count": 40,
    "qwen35moe.embedding_length": 2048,
    "qwen35moe.attention.head_count": 16,
    "qwen35moe.attention.head_count_kv": 2,
    "qwen35moe.attention.key_length": 256,
    "qwen35moe.attention.value_length": 256,
    "qwen35moe.full_attention_interval": 4,
    "qwen35moe.rope.dimension_sections": [11, 11, 10, 0],
    "qwen35moe.ssm.conv_kernel": 4,
    "qwen35moe.ssm.state_size": 128,
    "qwen35moe.ssm.group_count": 16,
    "qwen35moe.ssm.inner_size": 4096,
}


def test_memory_shape_of_the_hybrid() -> None:
    s = memory_shape(HYBRID)
    assert s is not None and (s.attention_layers, s.recurrent_layers) == (10, 30)
    assert s.kv_bytes_per_cell == 10 * 2 * (256 + 256) * 2  # 10 layers x 2 KV heads x (K + V) x f16
    assert s.cell_meta_bytes == 20  # pos, seq-id count, one seq id, the M-RoPE 2-D position
    conv = 3 * (4096 + 2 * 16 * 128)
    assert s.recurrent_bytes == 30 * (conv + 128 * 4096) * 4
    assert s.blob_bytes(32768) == s.recurrent_bytes + 32768 * (20480 + 20)


def test_memory_shape_of_other_layouts() -> None:
    plain = {
        "general.architecture": "qwen3moe",
        "qwen3moe.block_count": 4,
        "qwen3moe.embedding_length": 256,
        "qwen3moe.attention.head_count": 4,
        "qwen3moe.attention.head_count_kv": 2,
    }
    s = memory_shape(plain)
    assert s is not None and (s.attention_layers, s.recurrent_layers, s.recurrent_bytes) == (4, 0, 0)
    assert s.kv_bytes_per_cell == 4 * 2 * (64 + 64) * 2 and s.cell_meta_bytes == 12
    gemma = {k.replace("qwen3moe", "gemma3"): v for k, v in plain.items()} | {"general.architecture": "gemma3"}
    w = memory_shape({**gemma, "gemma3.block_count": 6, "gemma3.attention.sliding_window": 128})
    assert w is not None and (w.attention_layers, w.window) == (1, 128)  # every sixth layer is full attention
    row = 2 * (64 + 64) * 2
    assert (w.kv_bytes_per_cell, w.window_kv_bytes_per_cell) == (row, 5 * row)
    # the full-attention layer keeps every cell; the window layers only the last 128, however deep
    assert w.blob_bytes(1000) == 1000 * (row + 12) + 128 * (5 * row + 12)
    assert w.blob_bytes(100) == 100 * (row + 12) + 100 * (5 * row + 12)
    assert memory_shape({"general.architecture": "x"}) is None


def rows(
    point: str, L: int, reps: int, ms: dict[str, float], prep: float = 0.5, copy: float = 0.25
) -> list[SweepSample]:
    out = []
    for rep in range(reps):
        wobble = 1 + 0.01 * ((rep * 7) % 3 - 1)  # the same drift for every arm of a rep
        for arm, v in ms.items():
            out.append(
                SweepSample(
                    where="inproc",
                    point=point,
                    L=L,
                    new=16,
                    arm=arm,  # type: ignore[arg-type]
                    rep=rep,
                    ok=True,
                    prompt_ms=v * wobble,
                    prep_ms=prep if arm in ("fake", "genuine") else None,
                    copy_ms=copy if arm == "genuine" else None,
                    blob_bytes=1000 * L + 500 if arm == "genuine" else None,
                    pos_max=-1 if arm == "baseline" else L - 1,
                )
            )
    return out


def inproc(
    L: int, samples: list[SweepSample], f: list[InprocFill] | None = None, shape: MemoryShape | None = None
) -> SweepPoint:
    return summarize_inproc(GridPoint(L, 16), samples, 0.05, f, shape)


def fills(Ls: list[int], new: int, passes: int, seg_ms: float = 100.0, chunk_ms: float = 10.0) -> list[InprocFill]:
    """`passes` cumulative passes: each segment up to the next L costs seg_ms, each chunk of `new` chunk_ms."""
    out = []
    for n in range(passes):
        start = 0
        for L in Ls:
            out.append(InprocFill(kind="fill", fill_pass=n, L=L, start=start, ms=seg_ms + n, blob_bytes=1000 * L))
            out.append(InprocFill(kind="chunk", fill_pass=n, L=L, new=new, ms=chunk_ms + n / 10))
            start = L
    return out


def test_a_point_summary_pairs_by_rep() -> None:
    samples = rows("L300_n16", 300, 6, {"baseline": 100.0, "fake": 10.0, "genuine": 10.0, "plain": 10.0})
    p = inproc(300, samples)
    assert p.where == "inproc" and p.fake_vs_genuine_ci is not None and p.fake_vs_genuine_ci.value == 1.0
    assert p.fake_vs_genuine_ci.hi - p.fake_vs_genuine_ci.lo < 1e-9  # the rep's drift cancels in the pair
    assert p.genuine_verdict == "agree" and p.plain_verdict == "agree"
    assert p.restore_step_vs_genuine_ci is not None and p.restore_step_vs_genuine_ci.value > 1.04
    assert p.cache_read_share_ci is not None and 0.04 < p.cache_read_share_ci.value < 0.05
    assert p.restore_vs_memcpy_ci is not None and p.restore_vs_memcpy_ci.value == pytest.approx(0.5)
    assert p.restore_gbps_ci is not None and p.restore_gbps_ci.value == pytest.approx(300500 / 0.5 / 1e6)
    assert p.fake_vs_baseline_ci is not None and p.fake_vs_baseline_ci.value == pytest.approx(0.1)
    # a sweep that measures the estimate waits for it: in one process fake / estimate is a check, paired by rep
    assert decided(p, SweepSettings(target=0.03, arms=["fake", "genuine", "plain"]))
    assert p.fake_vs_estimate_ci is None and p.estimate_verdict == "undecided"
    assert not decided(p, SweepSettings(target=0.03, arms=["fake", "genuine", "plain", "estimate"]))
    assert p.diagnostics == []


def test_the_fill_passes_give_the_baseline_and_never_the_estimate() -> None:
    """The baseline is the prefix sum of a pass's segments up to L plus the chunk at L; fake/baseline falls back
    to them (unpaired) without direct baseline reps. The estimate is only ever the chunk beside the reps: the fill
    passes' chunks give none."""
    f = fills([300, 700], 16, 3)
    assert fill_values(f, 700, 16)[:2] == ([210.0, 212.1, 214.2], [10.0, 10.1, 10.2])
    assert fill_values(f, 300, 16)[:2] == ([110.0, 111.1, 112.2], [10.0, 10.1, 10.2])
    assert fill_values(f[:-1], 700, 16)[0] == [210.0, 212.1]  # a pass without its chunk at L gives nothing
    p = inproc(700, rows("L700_n16", 700, 5, {"fake": 10.1, "genuine": 10.0}), f)
    assert p.baseline_fill.n_ok == 3 and p.baseline_fill.median_ms == pytest.approx(212.1)
    assert p.baseline == p.baseline_fill and p.baseline_source == "fill passes"  # no direct reps
    assert p.fake_vs_baseline_ci is not None and p.fake_vs_baseline_ci.value == pytest.approx(10.1 / 212.1, rel=0.02)
    assert p.estimate_ci is None and p.fake_vs_estimate_ci is None and p.opt_prefill_ms is None


def test_a_disagreeing_point_says_what_to_check() -> None:
    p = inproc(300, rows("L300_n16", 300, 5, {"fake": 13.0, "genuine": 10.0}))
    assert p.genuine_verdict == "disagree" and any("seq_pos_max" in d for d in p.diagnostics)
    p = inproc(300, rows("L300_n16", 300, 5, {"fake": 10.0, "genuine": 13.0, "plain": 10.0}))
    assert p.plain_verdict == "disagree" and any("max position was L-1" in d for d in p.diagnostics)


def test_the_blob_against_the_gguf_and_failed_samples_are_noted() -> None:
    samples = rows("L300_n16", 300, 5, {"fake": 10.0, "genuine": 10.0})
    samples[0] = samples[0].model_copy(update={"ok": False, "prompt_ms": None, "reason": "decode failed: 1"})
    p = inproc(300, samples, shape=memory_shape(HYBRID))
    assert p.predicted_blob_bytes == memory_shape(HYBRID).blob_bytes(300)  # type: ignore[union-attr]
    notes = " ".join(p.diagnostics)
    assert "the GGUF predicts" in notes and "1 failed sample(s), excluded: fake rep 0: decode failed: 1" in notes
    assert p.fake.n_failed == 1 and p.fake.n_ok == 4


def test_the_run_summary_fits_the_blob_against_L() -> None:
    a = rows("L300_n16", 300, 3, {"genuine": 10.0, "plain": 10.0})
    b = rows("L700_n16", 700, 3, {"genuine": 12.0, "plain": 12.0}, prep=0.9)
    f = fills([300, 700], 16, 2)
    points = [inproc(300, a, f), inproc(700, b, f)]
    s = restore_summary(points, a + b, f, memory_shape(HYBRID))
    assert s.bytes_per_cell == pytest.approx(1000) and s.fixed_bytes == pytest.approx(500)
    assert s.restore_ms_per_1k_cells == pytest.approx(1.0)  # 0.5 ms at 300, 0.9 ms at 700
    assert s.restore_vs_memcpy_ci is not None and s.restore_vs_memcpy_ci.n == 6
    assert s.genuine_vs_plain_ci is not None and s.genuine_vs_plain_ci.value == pytest.approx(1.0)
    assert s.attention_layers == 10 and s.fill_passes == 2


def test_the_direct_baseline_runs_in_the_first_reps_and_the_order_rotates() -> None:
    arms = ["baseline", "fake", "genuine", "plain"]
    sw = SweepSettings(min_reps=5, max_reps=12, baseline_reps=2)
    assert rep_arms(arms, 0, sw) == arms and rep_arms(arms, 1, sw) == ["fake", "genuine", "plain", "baseline"]
    assert rep_arms(arms, 2, sw) == ["plain", "fake", "genuine"]  # no baseline from rep 2 on
    assert rep_arms(arms, 7, SweepSettings(min_reps=5, max_reps=12)) == ["genuine", "plain", "fake"]
    assert rep_arms(["fake", "genuine"], 3, sw) == ["genuine", "fake"]


def test_a_run_whose_arm_failed_on_every_sample_is_not_complete() -> None:
    from lab.experiments.sweep.run import all_failed

    good = inproc(300, rows("L300_n16", 300, 3, {"fake": 10.0, "genuine": 10.0}))
    assert all_failed([good]) == ""
    broken = rows("L300_n16", 300, 3, {"fake": 10.0, "genuine": 10.0})
    broken = [
        s.model_copy(update={"ok": False, "prompt_ms": None, "reason": "400: no fake-prefix op"})
        if s.arm == "fake"
        else s
        for s in broken
    ]
    why = all_failed([good.model_copy(update={"L": 700}), inproc(300, broken)])
    assert why == "" and all_failed([inproc(300, broken)]).startswith("every fake sample failed (inproc)")
    assert "no fake-prefix op" in all_failed([inproc(300, broken)])


def test_llama_bench_keeps_every_reps_sample() -> None:
    from lab.experiments.prefill_tps import parse_bench_jsonl

    line = '{"n_prompt": 64, "n_gen": 0, "n_depth": 512, "avg_ns": 2e6, "stddev_ns": 1e5, "avg_ts": 32000,'
    (row,) = parse_bench_jsonl(line + ' "samples_ns": [1900000, 2100000]}\ngarbage\n')
    assert (row.depth, row.chunk, row.reps, row.samples_ms) == (512, 64, 2, [1.9, 2.1])
