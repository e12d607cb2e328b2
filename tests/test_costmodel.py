"""The cost model: every term of a small config computed by hand, `lab model cost` on a metadata-only GGUF,
an unknown architecture, and the printed table."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from labcli import lab

from lab.measure.costmodel import attended_keys, cost_model
from lab.models.hparams import hparams_of

pytestmark = pytest.mark.fast

LAB = str(Path(sys.executable).parent / "lab")

# qwen35moe, 4 layers (every 2nd attends: layers 1 and 3), E = 8, 2 query heads of 4, 1 KV head, 4 experts
# (2 used) of width 6, a shared expert of width 5, Gated-DeltaNet with 1 key head and 2 value heads of 4
SMALL = {
    "general.architecture": "qwen35moe", "general.file_type": 1, "qwen35moe.block_count": 4,
    "qwen35moe.embedding_length": 8, "qwen35moe.attention.head_count": 2, "qwen35moe.attention.head_count_kv": 1,
    "qwen35moe.attention.key_length": 4, "qwen35moe.attention.value_length": 4,
    "qwen35moe.full_attention_interval": 2, "qwen35moe.expert_count": 4, "qwen35moe.expert_used_count": 2,
    "qwen35moe.expert_feed_forward_length": 6, "qwen35moe.expert_shared_feed_forward_length": 5,
    "qwen35moe.ssm.conv_kernel": 3, "qwen35moe.ssm.state_size": 4, "qwen35moe.ssm.group_count": 1,
    "qwen35moe.ssm.time_step_rank": 2, "qwen35moe.ssm.inner_size": 8,
    "qwen35moe.rope.dimension_sections": [1, 1, 0, 0], "tokenizer.ggml.tokens": [b"t%d" % i for i in range(10)],
}  # fmt: skip


def test_every_term_of_a_small_config_by_hand() -> None:
    m = cost_model(hparams_of(SMALL), chunk=3)
    terms = {(t.band, t.name): (t.flops, t.bytes, t.layers) for t in m.terms(5)}
    # a chunk of c = 3 tokens at depth L = 5; F16 weights (2 bytes), f32 routers and norms
    assert terms[("proj", "Q + gate, K, V, O projections")] == (2 * 2 * 3 * 256, 2 * 256 * 2, 2)  # 8 (16+4+4) + 64
    assert terms[("proj", "attention RMS norm")] == (2 * 4 * 3 * 8, 2 * 32, 2)
    # keys = 3 * 5 + 3 * 4 / 2 = 21; per score 2 h (dk + dv) + 4 h = 40; KV rows 1 head x 8 x f16
    assert terms[("attn_core", "QK^T, softmax, AV")] == (2 * 40 * 21, 2 * 21 * 8 * 2, 2)
    # conv_dim = 2 x 1 x 4 + 8 = 16; in/out projections 8 (16 + 8 + 2 x 2) + 8 x 8 = 288 weights
    assert terms[("gdn", "QKV, gate, beta, alpha, output projections")] == (2 * 2 * 3 * 288, 2 * 288 * 2, 2)
    assert terms[("gdn", "causal convolution")] == (2 * 2 * 3 * 16 * 3, 2 * 16 * 3 * 4, 2)
    # state: 2 value heads x 4 x 4 = 32 elements, 7 FLOPs each per token; conv state (3 - 1) x 16, both f32, r + w
    assert terms[("gdn", "delta-rule state update")] == (2 * 7 * 3 * 32, 2 * 2 * (32 + 32) * 4, 2)
    assert terms[("ffn_moe", "router")] == (4 * 2 * 3 * 8 * 4, 4 * 8 * 4 * 4, 4)
    # 3 tokens x 2 of 4 experts touch 4 (1 - 0.5^3) = 3.5 experts on average
    assert terms[("ffn_moe", "routed experts (gate, up, down)")] == (4 * 2 * 3 * 2 * 3 * 8 * 6, 4 * 3.5 * 144 * 2, 4)
    assert terms[("ffn_moe", "shared expert and its gate")] == (4 * 2 * 3 * (120 + 8), 4 * (240 + 32), 4)
    assert terms[("ffn_moe", "post-attention RMS norm")] == (4 * 4 * 3 * 8, 4 * 32, 4)
    assert terms[("other", "residual adds")] == (4 * 2 * 3 * 8, 0, 4)
    assert terms[("other", "LM head (last token)")] == (2 * 8 * 10, 8 * 10 * 2, 1)
    assert terms[("other", "embedding rows")] == (0, 3 * 8 * 2, 1)
    assert len(terms) == 14
    bands = m.bands(5)
    assert {b: c.flops for b, c in bands.items()} == {
        "ffn_moe": 768 + 6912 + 3072 + 384, "attn_core": 1680, "proj": 3072 + 192, "gdn": 3456 + 576 + 1344 + 192,
        "other": 192 + 160,
    }  # fmt: skip
    # attn_core = 2 layers x 40 x (3 L + 6) = 240 L + 480 meets ffn_moe's 11,136 at L = 44.4
    assert m.crossover() == pytest.approx((11136 - 480) / 240)
    assert m.attn_flops_per_token_per_1k() == pytest.approx(240 * 1000 / 3)


def test_sliding_layers_read_at_most_their_window() -> None:
    assert attended_keys(5, 3) == 21
    assert attended_keys(5, 3, window=7) == 6 + 7 + 7
    gemma = {"general.architecture": "gemma3", "gemma3.block_count": 6, "gemma3.embedding_length": 8,
             "gemma3.attention.head_count": 2, "gemma3.attention.head_count_kv": 1, "gemma3.attention.key_length": 4,
             "gemma3.feed_forward_length": 12, "gemma3.attention.sliding_window": 16,
             "gemma3.attention.sliding_window_pattern": 3}  # fmt: skip
    h = hparams_of(gemma)
    assert h.kinds == ("sliding", "sliding", "attention") * 2 and h.n_ff == 12
    m = cost_model(h, chunk=4)
    kinds = {t.kind for t in m.terms(100) if t.band == "attn_core"}
    assert kinds == {"sliding", "attention"}
    assert any(t.name == "dense FFN (gate, up, down)" for t in m.terms(0))


def test_gpt_oss_alternates_window_and_full_attention() -> None:
    """gpt-oss without a pattern key alternates (llama.cpp's default for it, not gemma3's 6); its window layers
    stop growing at the window, its full ones do not, so attention still meets the MoE FFN at some depth."""
    oss = {"general.architecture": "gpt-oss", "gpt-oss.block_count": 4, "gpt-oss.embedding_length": 8,
           "gpt-oss.attention.head_count": 2, "gpt-oss.attention.head_count_kv": 1,
           "gpt-oss.attention.key_length": 4, "gpt-oss.attention.sliding_window": 16, "gpt-oss.expert_count": 4,
           "gpt-oss.expert_used_count": 2, "gpt-oss.expert_feed_forward_length": 8}  # fmt: skip
    h = hparams_of(oss)
    assert h.kinds == ("sliding", "attention") * 2 and h.window == 16 and h.n_expert == 4
    m = cost_model(h, chunk=4)
    window = {L: sum(t.flops for t in m.terms(L) if t.band == "attn_core" and t.kind == "sliding") for L in (100, 900)}
    full = {L: sum(t.flops for t in m.terms(L) if t.band == "attn_core" and t.kind == "attention") for L in (100, 900)}
    assert window[100] == window[900] and full[900] > full[100]
    crossing = m.crossover()
    assert crossing is not None and crossing > 0


def write_gguf(path: Path, meta: dict[str, Any]) -> Path:
    """A GGUF holding these keys and no tensor at all."""
    import gguf

    vt = gguf.GGUFValueType
    w = gguf.GGUFWriter(str(path), str(meta["general.architecture"]))
    for key, value in meta.items():
        if key == "general.architecture":
            continue
        if isinstance(value, list) and value and isinstance(value[0], bytes):
            w.add_key_value(key, value, vt.ARRAY, sub_type=vt.STRING)
        elif isinstance(value, list):
            w.add_array(key, value)
        else:
            w.add_uint32(key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_lab_model_cost_on_a_metadata_only_gguf(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "meta.gguf", SMALL)
    r = lab("model", "cost", str(path), "--chunk", "3", "--depths", "5,50")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "qwen35moe: 4 layers (2 attention, 2 recurrent)" in out and "the terms of a chunk at depth 5" in out
    assert "delta-rule state update" in out and "7 c n_v dk dv" in out
    assert "predicted crossover (attn_core FLOPs = ffn_moe FLOPs): depth 44;" in out
    j = lab("model", "cost", str(path), "--chunk", "3", "--depths", "5,50", "--json")
    assert j.returncode == 0, j.stderr
    record = json.loads(j.stdout)
    assert record["bands"]["5"]["attn_core"]["flops_per_token"] == pytest.approx(1680 / 3)
    assert record["predicted_crossover_depth"] == pytest.approx(44.4)
    assert record["layers"] == {"attention": 2, "recurrent": 2}


def test_unknown_architecture_and_bad_files_are_one_line(tmp_path: Path) -> None:
    llama = {"general.architecture": "llama", "llama.block_count": 2, "llama.embedding_length": 8,
             "llama.attention.head_count": 2}  # fmt: skip
    r = lab("model", "cost", str(write_gguf(tmp_path / "llama.gguf", llama)))
    assert r.returncode == 2 and r.stderr.strip().splitlines()[0] == (
        "the cost model does not know the architecture 'llama' (it knows qwen35moe, qwen3moe, gemma3, gpt-oss)"
    ), r.stderr
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf at all")
    r = lab("model", "cost", str(tmp_path / "junk.gguf"))
    assert r.returncode == 2 and "not a GGUF" in r.stderr.splitlines()[0], r.stderr
    missing = {k: v for k, v in SMALL.items() if k != "qwen35moe.embedding_length"}
    r = lab("model", "cost", str(write_gguf(tmp_path / "partial.gguf", missing)))
    assert r.returncode == 2 and "qwen35moe.embedding_length" in r.stderr.splitlines()[0], r.stderr
