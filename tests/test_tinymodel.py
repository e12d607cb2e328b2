"""Tests for lab.models.tiny.model (deterministic random-weight GGUF models) and its GGUF metadata reader."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lab.core.gguf_io import read_gguf_kv, read_gguf_metadata
from lab.engine.source import PreparedSource
from lab.models.resolve import VOCAB_REL
from lab.models.tiny.archs import GEMMA3_SLIDING_WINDOW, SUPPORTED_ARCHS, TinyModelSpec
from lab.models.tiny.model import write_tiny_model
from lab.models.tiny.vocab import QWEN_ADDED_TOKENS

N_VOCAB = 151936

# Small enough to write in ~1 s, but still 2 recurrent + 2 attention layers, 4 experts (2 used).
SMALL = TinyModelSpec(
    n_embd=64, n_layer=4, full_attention_interval=2, n_expert=4, n_expert_used=2,
    n_head=4, n_head_kv=2, head_dim=16, n_ff_exp=32, n_ff_shexp=32,
)  # fmt: skip

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def vocab(source: PreparedSource) -> Path:
    """The real Qwen tokenizer GGUF vendored in the engine source."""
    return source.path / VOCAB_REL


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _kv(path: Path) -> dict[str, Any]:
    return {key: value for key, _vt, _it, value in read_gguf_kv(path)}


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory, vocab: Path) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "small.gguf", vocab, SMALL)


@pytest.fixture(scope="module")
def reader(small_model: Path) -> Any:
    import gguf

    return gguf.GGUFReader(str(small_model))  # slow (~15 s) on a 151,936-token vocab: read once


def test_deterministic(tmp_path: Path, vocab: Path) -> None:
    a = write_tiny_model(tmp_path / "a.gguf", vocab, SMALL)
    b = write_tiny_model(tmp_path / "sub" / "b.gguf", vocab, SMALL)
    assert _sha256(a) == _sha256(b)
    c = write_tiny_model(tmp_path / "c.gguf", vocab, TinyModelSpec(**{**SMALL.__dict__, "seed": 1}))
    assert _sha256(c) != _sha256(a)
    # atomic write leaves no temp files behind; overwriting in place is fine
    write_tiny_model(a, vocab, SMALL)
    assert _sha256(a) == _sha256(b)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "c.gguf", "sub"]


def test_reads_back_with_gguf_reader(reader: Any) -> None:
    import gguf

    assert reader.fields["general.architecture"].contents() == "qwen35moe"
    assert len(reader.fields["tokenizer.ggml.tokens"].contents()) == N_VOCAB
    assert reader.fields["tokenizer.ggml.pre"].contents() == "qwen35"
    assert reader.fields["qwen35moe.expert_count"].contents() == SMALL.n_expert
    assert reader.fields["qwen35moe.expert_used_count"].contents() == SMALL.n_expert_used
    tensors = {t.name: t for t in reader.tensors}
    emb = tensors["token_embd.weight"]
    assert emb.tensor_type == gguf.GGMLQuantizationType.F16
    assert list(emb.shape) == [SMALL.n_embd, N_VOCAB]  # ggml ne order
    assert list(tensors["blk.0.ffn_gate_exps.weight"].shape) == [SMALL.n_embd, SMALL.n_ff_exp, SMALL.n_expert]
    assert list(tensors["blk.0.ffn_down_exps.weight"].shape) == [SMALL.n_ff_exp, SMALL.n_embd, SMALL.n_expert]
    assert tensors["blk.0.ssm_conv1d.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    for t in reader.tensors:
        data = np.asarray(t.data, dtype=np.float32)
        assert np.isfinite(data).all(), t.name
        assert float(np.abs(data).max()) < 20.0, t.name


def test_tokenizer_copied(small_model: Path, vocab: Path) -> None:
    """Verbatim, except that the Qwen added tokens fill their [PAD] entries at their real ids."""
    src = {k: v for k, v in _kv(vocab).items() if k.startswith("tokenizer.")}
    out = _kv(small_model)
    tokens, types = list(src["tokenizer.ggml.tokens"]), list(src["tokenizer.ggml.token_type"])
    for tid, (text, ttype) in QWEN_ADDED_TOKENS.items():
        assert tokens[tid] == f"[PAD{tid}]".encode(), "the vendored vocab lacks them"
        tokens[tid], types[tid] = text, ttype
    src.update({"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types})
    assert {k: v for k, v in out.items() if k.startswith("tokenizer.")} == src
    assert out["tokenizer.ggml.tokens"][151652:151654] == [b"<|vision_start|>", b"<|vision_end|>"]
    assert out["tokenizer.ggml.token_type"][151652:151654] == [3, 3]  # CONTROL, as the converter writes them
    for key in (
        "tokenizer.ggml.model",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.padding_token_id",
    ):
        assert key in out, key
    assert len(out["tokenizer.ggml.tokens"]) == len(out["tokenizer.ggml.token_type"]) == N_VOCAB
    # nothing of the vocab file's own (qwen2) architecture leaks through
    assert not any(k.startswith("qwen2.") for k in out)
    assert out["general.architecture"] == b"qwen35moe"


def test_hybrid_layer_kinds(reader: Any) -> None:
    names = {t.name for t in reader.tensors}
    kv = {k: f.contents() for k, f in reader.fields.items() if k.startswith("qwen35moe.")}
    interval = kv["qwen35moe.full_attention_interval"]
    assert interval == SMALL.full_attention_interval
    attn = [il for il in range(SMALL.n_layer) if (il + 1) % interval == 0]
    recr = [il for il in range(SMALL.n_layer) if (il + 1) % interval != 0]
    assert attn and recr  # both code paths present
    for il in attn:
        assert {f"blk.{il}.attn_q.weight", f"blk.{il}.attn_k.weight", f"blk.{il}.attn_q_norm.weight"} <= names
        assert f"blk.{il}.ssm_a" not in names
    for il in recr:
        assert {f"blk.{il}.attn_qkv.weight", f"blk.{il}.attn_gate.weight", f"blk.{il}.ssm_a"} <= names
        assert {f"blk.{il}.ssm_conv1d.weight", f"blk.{il}.ssm_dt.bias", f"blk.{il}.ssm_out.weight"} <= names
        assert f"blk.{il}.attn_q.weight" not in names
    for il in range(SMALL.n_layer):
        assert {f"blk.{il}.ffn_gate_inp.weight", f"blk.{il}.ffn_up_shexp.weight"} <= names
    # loader constraints (llama.cpp qwen35moe)
    assert len(kv["qwen35moe.rope.dimension_sections"]) == 4
    assert kv["qwen35moe.ssm.state_size"] * kv["qwen35moe.ssm.time_step_rank"] == kv["qwen35moe.ssm.inner_size"]
    assert kv["qwen35moe.attention.key_length"] == kv["qwen35moe.attention.value_length"]
    shapes = {t.name: list(t.shape) for t in reader.tensors}
    il = attn[0]
    assert shapes[f"blk.{il}.attn_q.weight"] == [SMALL.n_embd, 2 * SMALL.head_dim * SMALL.n_head]


@pytest.mark.parametrize("arch", [a for a in SUPPORTED_ARCHS if a != "qwen35moe"])
def test_other_archs(tmp_path: Path, arch: str, vocab: Path) -> None:
    spec = TinyModelSpec(**{**SMALL.__dict__, "arch": arch})
    path = write_tiny_model(tmp_path / f"{arch}.gguf", vocab, spec)
    kv = _kv(path)
    assert kv["general.architecture"] == arch.encode()
    assert len(kv["tokenizer.ggml.tokens"]) == N_VOCAB
    assert not any(k.startswith(f"{arch}.ssm.") for k in kv)
    if arch == "gemma3":
        assert kv["gemma3.attention.sliding_window"] == GEMMA3_SLIDING_WINDOW
        assert kv["gemma3.attention.sliding_window_pattern"] == spec.full_attention_interval
    else:
        assert kv[f"{arch}.expert_count"] == spec.n_expert
    assert _sha256(path) == _sha256(write_tiny_model(tmp_path / "again.gguf", vocab, spec))


def test_invalid_spec_rejected(tmp_path: Path, vocab: Path) -> None:
    with pytest.raises(ValueError, match="unsupported arch"):
        write_tiny_model(tmp_path / "x.gguf", vocab, TinyModelSpec(arch="llama"))
    with pytest.raises(ValueError, match="n_head"):
        write_tiny_model(tmp_path / "x.gguf", vocab, TinyModelSpec(n_head=3, n_head_kv=2))
    assert not list(tmp_path.iterdir())


def test_emit_channel(reader: Any, small_model: Path) -> None:
    """Embedding dim 0 is +A for tokens the model may emit, -A for special/EOG/partial-UTF-8 ones."""
    tok = _kv(small_model)["tokenizer.ggml.tokens"]
    ids = {t: i for i, t in enumerate(tok)}
    emb = {t.name: t for t in reader.tensors}["token_embd.weight"]
    col0 = np.asarray(emb.data[:, 0], dtype=np.float32)
    for text in (b"<|endoftext|>", b"<|im_end|>", b"</s>"):
        assert col0[ids[text]] < 0, text
    for text in (b"Hello", b"\xc4\xa0world", b"."):  # "\u0120world" = " world" in byte-level BPE
        assert col0[ids[text]] > 0, text
    assert 0.95 < float((col0 > 0).mean()) < 1.0


def test_read_gguf_metadata_without_tensors(tmp_path: Path) -> None:
    """A metadata-only GGUF (zero tensors), as a cost model reading an architecture's hyperparameters gets."""
    import gguf

    path = tmp_path / "meta.gguf"
    vt = gguf.GGUFValueType
    w = gguf.GGUFWriter(str(path), "qwen35moe")
    w.add_uint32("qwen35moe.block_count", 40)
    w.add_uint64("qwen35moe.context_length", 262144)
    w.add_float32("qwen35moe.rope.freq_base", 1e7)
    w.add_bool("qwen35moe.flag", True)
    w.add_string("general.name", "na\u00efve")
    w.add_key_value("general.raw", b"\xff\xfe", vt.STRING)  # not UTF-8: stays bytes
    w.add_array("qwen35moe.rope.dimension_sections", [11, 11, 10, 0])
    w.add_array("general.tags", ["moe", "hybrid"])
    w.add_key_value("tokenizer.ggml.tokens", [b"a", b"\xc4"], vt.ARRAY, sub_type=vt.STRING)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert len(gguf.GGUFReader(str(path)).tensors) == 0
    assert read_gguf_metadata(path) == {
        "general.architecture": "qwen35moe",
        "qwen35moe.block_count": 40,
        "qwen35moe.context_length": 262144,
        "qwen35moe.rope.freq_base": 1e7,
        "qwen35moe.flag": True,
        "general.name": "na\u00efve",
        "general.raw": b"\xff\xfe",
        "qwen35moe.rope.dimension_sections": [11, 11, 10, 0],
        "general.tags": ["moe", "hybrid"],
        "tokenizer.ggml.tokens": [b"a", b"\xc4"],
    }


def test_read_gguf_metadata_rejects_bad_files(tmp_path: Path, small_model: Path) -> None:
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match="not a GGUF"):
        read_gguf_metadata(tmp_path / "empty.gguf")
    with small_model.open("rb") as f:
        (tmp_path / "cut.gguf").write_bytes(f.read(100_000))  # cut inside the token list
    with pytest.raises(ValueError, match="truncated"):
        read_gguf_metadata(tmp_path / "cut.gguf")


def test_read_gguf_metadata_tiny_model(small_model: Path, reader: Any) -> None:
    meta = read_gguf_metadata(small_model)
    assert meta["general.architecture"] == "qwen35moe"
    assert meta["qwen35moe.block_count"] == SMALL.n_layer
    assert meta["tokenizer.ggml.model"] == "gpt2"
    tokens = meta["tokenizer.ggml.tokens"]
    assert len(tokens) == N_VOCAB and all(isinstance(t, bytes) for t in tokens)
    # every other value as gguf's own (slow) reader decodes it
    for key, field in reader.fields.items():
        if key.startswith(("GGUF.", "tokenizer.ggml.tokens", "tokenizer.ggml.merges")):
            continue
        assert meta[key] == field.contents(), key


def test_the_cost_model_reads_the_keys_alone(tmp_path: Path, tiny_model: Path) -> None:
    """`lab model cost` of the tiny model and of a copy holding only its metadata (no tensor) agree."""
    import gguf

    vt = gguf.GGUFValueType
    copy = tmp_path / "keys-only.gguf"
    w = gguf.GGUFWriter(str(copy), "qwen35moe")
    for key, vtype, itype, value in read_gguf_kv(tiny_model):
        if key != "general.architecture":
            w.add_key_value(key, value, vt(vtype), sub_type=vt(itype) if itype is not None else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert len(gguf.GGUFReader(str(copy)).tensors) == 0 and copy.stat().st_size < tiny_model.stat().st_size / 10
    lab = str(Path(sys.executable).parent / "lab")
    full, keys = (subprocess.run([lab, "model", "cost", str(p), "--json"], capture_output=True, text=True, timeout=120)
                  for p in (tiny_model, copy))  # fmt: skip
    assert full.returncode == 0 and keys.returncode == 0, full.stderr + keys.stderr
    a, b = json.loads(full.stdout), json.loads(keys.stdout)
    # the FLOPs need the keys alone; the bytes use the tensor types where the file has tensors
    assert b["band_weight_bits"] == {} and set(a["band_weight_bits"]) == {"ffn_moe", "proj", "gdn", "other"}
    flops = {d: {band: c["flops_per_token"] for band, c in v.items()} for d, v in a["bands"].items()}
    assert flops == {d: {band: c["flops_per_token"] for band, c in v.items()} for d, v in b["bands"].items()}
    assert [t["flops"] for t in a["terms"]] == [t["flops"] for t in b["terms"]]
    assert a["predicted_crossover_depth"] == b["predicted_crossover_depth"]
    assert b["layers"] == {"attention": 2, "recurrent": 6}
