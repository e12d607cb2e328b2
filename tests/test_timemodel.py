"""The time model: rates fitted from per-process band rows come back as the rates that made them, predictions at
depths the rows never reached land on the truth inside their interval, the crossover in time is where the
two bands' times meet (not where their FLOPs do), window-capped attention never crosses, and rates applied to
another model scale the attention overhead with its attention layers."""

from __future__ import annotations

import math

import pytest

from lab.core.schemas import BANDS, BandProcess
from lab.measure.costmodel import CostModel, cost_model
from lab.measure.timemodel import BandTime, FlopTable, fit, predict, predict_ms, time_crossover
from lab.models.hparams import hparams_of

pytestmark = pytest.mark.fast

HYBRID = {
    "general.architecture": "qwen35moe",
    "general.file_type": 1,
    "qwen35moe.block_count": 8,
    "qwen35moe.embedding_length": 256,
    "qwen35moe.attention.head_count": 4,
    "qwen35moe.attention.head_count_kv": 2,
    "qwen35moe.attention.key_length": 64,
    "qwen35moe.attention.value_length": 64,
    "qwen35moe.full_attention_interval": 4,
    "qwen35moe.expert_count": 8,
    "qwen35moe.expert_used_count": 2,
    "qwen35moe.expert_feed_forward_length": 128,
    "qwen35moe.expert_shared_feed_forward_length": 128,
    "qwen35moe.ssm.conv_kernel": 4,
    "qwen35moe.ssm.state_size": 64,
    "qwen35moe.ssm.group_count": 2,
    "qwen35moe.ssm.time_step_rank": 4,
    "qwen35moe.ssm.inner_size": 256,
    "qwen35moe.vocab_size": 151936,
}
SLIDING_ONLY = {
    "general.architecture": "gemma3",
    "general.file_type": 15,
    "gemma3.block_count": 4,
    "gemma3.embedding_length": 64,
    "gemma3.attention.head_count": 2,
    "gemma3.attention.head_count_kv": 1,
    "gemma3.attention.key_length": 32,
    "gemma3.feed_forward_length": 4096,
    "gemma3.attention.sliding_window": 128,
    "gemma3.attention.sliding_window_pattern": 5,
    "gemma3.vocab_size": 1000,
}
TRUE: dict[str, BandTime] = {  # FLOPs per ms
    "ffn_moe": BandTime(0.0, 60e6),
    "proj": BandTime(0.0, 80e6),
    "gdn": BandTime(0.0, 30e6),
    "other": BandTime(0.0, 20e6),
    "attn_core": BandTime(0.0, 25e6),
}
SCALE = dict.fromkeys(BANDS, 1.0)


def synthetic_rows(cost: CostModel, depths: list[int], processes: int = 5, noise: float = 0.01) -> list[BandProcess]:
    """Per-process band rows made from TRUE, each process off by a fixed few per cent."""
    flops = FlopTable(cost)
    rows = []
    for c in range(processes):
        wobble = 1 + noise * ((c * 7) % 5 - 2) / 2
        for d in depths:
            ms = predict_ms(TRUE, flops, d, SCALE)
            rows += [BandProcess(process=c, depth=d, band=b, timed_ms=0.0, ms_per_token=ms[b] * wobble) for b in BANDS]
    return rows


def test_the_fit_gives_back_the_rates_that_made_the_rows_and_one_odd_depth_does_not_move_them() -> None:
    cost = cost_model(hparams_of(HYBRID), 512)
    rows = synthetic_rows(cost, [0, 512, 1024, 1536], noise=0.0)
    for r in rows:  # the first chunk of every process 30% slower (a warm-up): the median over depths ignores it
        if r.depth == 0:
            r.ms_per_token *= 1.3
    tf = fit(rows, cost)
    for b in BANDS:
        assert tf.params[b].flop_per_ms == pytest.approx(TRUE[b].flop_per_ms, rel=1e-6), b
        assert tf.params[b].overhead_ms == 0.0


def test_a_short_profile_predicts_deeper_depths_and_the_crossover_within_its_interval() -> None:
    cost = cost_model(hparams_of(HYBRID), 512)
    rows = synthetic_rows(cost, [0, 512, 1024, 1536, 2048, 4096, 8192, 16384])
    short = fit(rows, cost, max_depth=1024, key="short")
    assert short.depths == [0, 512, 1024] and short.processes == 5
    pred = predict(short, None, [4096, 16384], source="s", model="m")
    truth = {d: predict_ms(TRUE, FlopTable(cost), d, SCALE) for d in (4096, 16384)}
    for d in (4096, 16384):
        for b in BANDS:
            iv = pred.band_at(d, b)
            assert iv is not None and iv.lo <= truth[d][b] * 1.01 and truth[d][b] * 0.99 <= iv.hi, (d, b, iv)
            assert iv.value == pytest.approx(truth[d][b], rel=0.03)
        total = pred.band_at(d, "total")
        assert total is not None and total.value == pytest.approx(sum(truth[d].values()), rel=0.03)
    # where the two bands' times meet: attention's overhead + FLOPs at its rate = the FFN's time
    true_x = time_crossover(TRUE, FlopTable(cost), SCALE)
    assert true_x is not None and pred.crossover is not None
    m = predict_ms(TRUE, FlopTable(cost), round(true_x), SCALE)
    assert m["attn_core"] == pytest.approx(m["ffn_moe"], rel=1e-3)
    assert pred.crossover.lo <= true_x <= pred.crossover.hi and pred.crossover.value == pytest.approx(true_x, rel=0.05)
    # and not where FLOPs meet: attention runs at 25 GFLOP/s here, the FFN at 60
    assert pred.flop_crossover is not None and pred.crossover.value < 0.6 * pred.flop_crossover


def test_a_rate_that_grows_with_depth_is_predicted_conservatively_and_covered_by_its_trend() -> None:
    """Attention's kernels here grow 8% faster per doubling of depth past 256: a profile to 512 predicts 2048 and
    the crossover from its constant rate (too slow, too early), and its intervals reach to the trend continued."""
    cost = cost_model(hparams_of(HYBRID), 512)
    flops = FlopTable(cost)

    def speedup(d: int) -> float:
        return 1.08 ** max(0.0, math.log2(max(d, 1) / 256))

    def truth(d: int) -> dict[str, float]:
        m = predict_ms(TRUE, flops, d, SCALE)
        return {**m, "attn_core": m["attn_core"] / speedup(d)}

    rows = [
        BandProcess(process=c, depth=d, band=b, timed_ms=0.0, ms_per_token=truth(d)[b] * (1 + 0.005 * (c - 1)))
        for c in range(3)
        for d in (0, 256, 512)
        for b in BANDS
    ]
    tf = fit(rows, cost, key="trend")
    assert tf.trend["attn_core"] < 0.97 and tf.trend["ffn_moe"] == pytest.approx(1.0, abs=0.01)
    pred = predict(tf, None, [512, 2048], source="s", model="m")
    want = truth(2048)["attn_core"]
    iv = pred.band_at(2048, "attn_core")
    assert iv is not None and iv.value > want * 1.05 and iv.lo <= want <= iv.hi, (iv, want)
    inside = pred.band_at(512, "attn_core")  # inside the profile the depths drawn by the bootstrap cover it
    assert inside is not None and inside.lo <= truth(512)["attn_core"] <= inside.hi
    true_x = next(d for d in range(0, 1 << 16, 4) if truth(d)["attn_core"] >= truth(d)["ffn_moe"])
    assert pred.crossover is not None and 512 < pred.crossover.value < true_x, (pred.crossover, true_x)
    assert pred.crossover.lo <= true_x <= pred.crossover.hi, (pred.crossover, true_x)


def test_window_capped_attention_never_crosses_and_says_why() -> None:
    cost = cost_model(hparams_of(SLIDING_ONLY), 512)
    assert cost.h.count("attention") == 0 and cost.h.count("sliding") == 4
    rows = synthetic_rows(cost, [0, 256, 512, 1024])
    pred = predict(fit(rows, cost), None, [1024, 65536], source="s", model="m")
    assert pred.crossover is None and "window-capped" in pred.crossover_note
    deep, far = pred.band_at(1024, "attn_core"), pred.band_at(65536, "attn_core")
    assert deep is not None and far is not None and far.value == pytest.approx(deep.value)  # levelled off


def test_rates_applied_to_another_model_cost_its_own_flops() -> None:
    cost = cost_model(hparams_of(HYBRID), 512)  # 2 attention layers of 8
    other = cost_model(hparams_of({**HYBRID, "qwen35moe.full_attention_interval": 2}), 512)  # 4 of 8
    tf = fit(synthetic_rows(cost, [0, 512, 1024], noise=0.0), cost)
    own, moved = (predict(tf, m, [0, 4096], source="s", model="x") for m in (None, other))
    for d in (0, 4096):
        for b in BANDS:
            want = FlopTable(other).at(d)[b] / TRUE[b].flop_per_ms
            got = moved.band_at(d, b)
            assert got is not None and got.value == pytest.approx(want, rel=1e-6), (d, b)
    a, b = own.band_at(4096, "attn_core"), moved.band_at(4096, "attn_core")
    assert a is not None and b is not None and b.value == pytest.approx(2 * a.value, rel=0.01)


def test_a_single_depth_is_refused() -> None:
    cost = cost_model(hparams_of(HYBRID), 512)
    with pytest.raises(ValueError, match="at least two profiled depths"):
        fit(synthetic_rows(cost, [0, 512]), cost, max_depth=256)


def test_the_crossover_line_prints_its_number_once() -> None:
    from lab.core.schemas import Interval, ProfileSummary
    from lab.presenters.profile import prediction_lines

    s = ProfileSummary(
        max_depth=4096,
        crossover_depth=2658.0,
        crossover_note="2658",
        attn_slope_ms_per_token_per_1k=0.1,
        attn_intercept_ms_per_token=0.0,
        attn_r2=0.99,
        flat_cv={},
        timed_vs_fused_gap={},
        timed_vs_fused_gap_mean=0.0,
        crossover_ci=Interval(value=2658, lo=2567, hi=2729, n=5, processes=5),
        predicted_crossover_depth=2034.0,
        attn_flops_per_token_per_1k=2.08e6,
        time_crossover_ci=Interval(value=2600, lo=2500, hi=2700, n=3),
    )
    line = prediction_lines(s)[0]
    assert line.startswith(
        "crossover: measured 2658 [2567, 2729]; predicted in time 2600 [2500, 2700] (only 3 samples); from FLOPs 2034"
    )  # an interval from fewer than five samples says so
    assert line.count("2658") == 1
    short = s.model_copy(
        update={"crossover_depth": None, "crossover_ci": None, "crossover_note": "not reached by depth 1024"}
    )
    assert prediction_lines(short)[0].startswith("crossover: measured not reached by depth 1024; predicted in time")
