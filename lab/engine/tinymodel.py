"""Deterministic random-weight GGUF models for exercising llama.cpp code paths.

:func:`write_tiny_model` writes a small model with random weights but the *real*
tokenizer, copied (every ``tokenizer.*`` key) from a vocab-only GGUF such as
``<llama.cpp>/models/ggml-vocab-qwen35.gguf``.  The output is byte-for-byte
reproducible: the same :class:`TinyModelSpec` and vocab file always give the same
sha256.

One change to the copy: the vendored Qwen vocab has ``[PAD<id>]`` placeholders where the
real Qwen2.5/Qwen3 tokenizers have their added tokens (151646 ``<|object_ref_start|>`` ..
151668 ``</think>``); :data:`QWEN_ADDED_TOKENS` fills them in at their real ids and with the
converter's token types, so mtmd's image markers ``<|vision_start|>``/``<|vision_end|>``
(and ``<tool_call>``, ``<think>``, ...) are one token each, as in the real model.

Supported architectures (``TinyModelSpec.arch``):

``"qwen35moe"`` (default)
    Qwen3.5 MoE hybrid.  Memory type ``llama_memory_hybrid`` (recurrent state +
    KV cache).  Every ``full_attention_interval``-th layer is full (gated,
    IMRoPE) attention, the others are Gated-DeltaNet linear attention; every
    layer has a routed MoE FFN (softmax top-k) plus a sigmoid-gated shared
    expert.  The linear-attention geometry is derived from the attention spec:
    ``n_head`` value heads and ``n_head_kv`` key heads of ``head_dim`` each
    (so, as in the real model, key heads < value heads), conv kernel 4.
    RoPE is partial like the real model: ``head_dim // 4`` rotary dims.
``"qwen3moe"``
    Plain full-attention MoE (no shared expert, no recurrent layers).  Memory
    type ``llama_kv_cache`` (unified KV cache).
``"gemma3"``
    Dense gemma3 with interleaved sliding-window attention: every
    ``full_attention_interval``-th layer is global, the others use a window of
    :data:`GEMMA3_SLIDING_WINDOW` tokens.  Memory type ``llama_kv_cache_iswa``.
    Dense FFN width is ``n_ff_exp * n_expert_used`` (the active width of the
    MoE spec); ``n_expert`` and ``n_ff_shexp`` are ignored.

Output embedding is tied to the token embedding (no ``output.weight``) for all
archs, which keeps the file small (the F16 embedding dominates its size).

Weights are N(0, 0.02) (norms 1 + N(0, 0.02)), except for a small deterministic
"emit channel" (see ``_add_emit_channel``) that keeps the model from ever emitting
tokens that are not valid UTF-8 on their own, special tokens or EOG tokens: without
it llama-server answers ~40% of sampled 128-token completions with HTTP 500 (its
output parser rejects malformed UTF-8) and generations can stop early.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import struct
import sys
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

SUPPORTED_ARCHS: tuple[str, ...] = ("qwen35moe", "qwen3moe", "gemma3")

#: Sliding-window size (tokens) of the SWA layers of the ``gemma3`` tiny model.
GEMMA3_SLIDING_WINDOW = 128

#: Linear-attention (Gated-DeltaNet) causal conv kernel size, as in Qwen3.5.
SSM_CONV_KERNEL = 4

_WEIGHT_STD = 0.02
_NORM_STD = 0.02  # norm weights are 1.0 + N(0, _NORM_STD)
_RMS_EPS = 1e-6


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the tiny model.  See the module docstring for per-arch meaning."""

    arch: str = "qwen35moe"
    n_embd: int = 256
    n_layer: int = 8
    full_attention_interval: int = 4
    n_expert: int = 8
    n_expert_used: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_ff_exp: int = 128
    n_ff_shexp: int = 128
    n_ctx_train: int = 262144
    seed: int = 0

    def validate(self) -> None:
        """Raise ValueError if llama.cpp could not load a model of this shape."""
        if self.arch not in SUPPORTED_ARCHS:
            raise ValueError(f"unsupported arch {self.arch!r}; supported: {', '.join(SUPPORTED_ARCHS)}")
        positive = {
            "n_embd": self.n_embd,
            "n_layer": self.n_layer,
            "full_attention_interval": self.full_attention_interval,
            "n_head": self.n_head,
            "n_head_kv": self.n_head_kv,
            "head_dim": self.head_dim,
            "n_ff_exp": self.n_ff_exp,
            "n_ctx_train": self.n_ctx_train,
            "n_expert_used": self.n_expert_used,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if self.n_ff_exp < 2 or self.n_embd < 2:
            raise ValueError("n_ff_exp and n_embd must be >= 2 (every FFN uses 2 units and embedding dim 0)")
        if self.n_head % self.n_head_kv != 0:
            raise ValueError(f"n_head ({self.n_head}) must be a multiple of n_head_kv ({self.n_head_kv})")
        moe = self.arch in ("qwen35moe", "qwen3moe")
        if moe and not (0 < self.n_expert_used <= self.n_expert <= 512):
            raise ValueError(f"need 0 < n_expert_used <= n_expert <= 512, got {self.n_expert_used}/{self.n_expert}")
        if self.arch == "qwen35moe":
            if self.n_ff_shexp <= 0:
                raise ValueError(f"n_ff_shexp must be > 0, got {self.n_ff_shexp}")
            if self.head_dim % 8 != 0:
                raise ValueError(f"head_dim must be a multiple of 8 for partial IMRoPE, got {self.head_dim}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")

    def is_full_attention(self, il: int) -> bool:
        """Whether layer ``il`` is full attention (qwen35moe) / global attention (gemma3)."""
        return (il + 1) % self.full_attention_interval == 0


def _import_gguf(gguf_py_dir: Path | None) -> Any:
    """Import ``gguf``, from ``gguf_py_dir`` (a llama.cpp ``gguf-py`` dir) if given.

    With ``gguf_py_dir`` a differently-located, already-imported ``gguf`` is evicted from
    ``sys.modules`` first.  Without it, whatever ``gguf`` is importable (or already imported,
    possibly a pinned one from an earlier call) is used; the bytes written are the same for
    gguf-py 0.19.0 installed and the pinned tree's copy.
    """
    if gguf_py_dir is None:
        return importlib.import_module("gguf")
    pkg_dir = (Path(gguf_py_dir) / "gguf").resolve()
    if not (pkg_dir / "__init__.py").is_file():
        raise FileNotFoundError(f"no gguf package under {gguf_py_dir}")
    loaded: ModuleType | None = sys.modules.get("gguf")
    loaded_file = getattr(loaded, "__file__", None) if loaded is not None else None
    if loaded_file is not None and Path(loaded_file).resolve().parent == pkg_dir:
        return loaded
    # A different gguf (e.g. the installed one) is cached: drop it so the pinned one is imported.
    for name in [m for m in sys.modules if m == "gguf" or m.startswith("gguf.")]:
        del sys.modules[name]
    src = str(Path(gguf_py_dir).resolve())
    if src in sys.path:
        sys.path.remove(src)
    sys.path.insert(0, src)
    return importlib.import_module("gguf")


Array = npt.NDArray[Any]
_F16 = np.float16
_F32 = np.float32


class _Tensors:
    """Ordered list of named tensors with deterministic random data.

    Each tensor gets its own random stream seeded with ``(seed, crc32(name))``, so its
    values depend only on the seed, its name and its shape (not on the order of creation).
    Numpy shapes are the reverse of llama.cpp's ggml ``ne`` (GGUFWriter reverses them back).
    F32 follows the converter's rule (1-D tensors, norms, routers, conv kernels); all
    other matrices are F16.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.items: dict[str, Array] = {}

    def _rng(self, name: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(name.encode("utf-8"))])

    def _add(self, name: str, data: Array) -> None:
        if name in self.items:
            raise ValueError(f"duplicate tensor {name}")
        self.items[name] = np.ascontiguousarray(data)

    def mat(self, name: str, shape: tuple[int, ...], dtype: type[np.floating[Any]] = _F16) -> None:
        """N(0, 0.02) weights."""
        data = self._rng(name).standard_normal(shape, dtype=np.float32) * np.float32(_WEIGHT_STD)
        self._add(name, data.astype(dtype))

    def norm(self, name: str, n: int) -> None:
        """RMS-norm weights ~1.0 (1 + N(0, 0.02)), F32."""
        noise = self._rng(name).standard_normal((n,), dtype=np.float32) * np.float32(_NORM_STD)
        self._add(name, np.float32(1.0) + noise)

    def uniform(self, name: str, n: int, low: float, high: float) -> None:
        """U(low, high) vector, F32."""
        self._add(name, self._rng(name).uniform(low, high, size=(n,)).astype(np.float32))


def _tensors_qwen35moe(spec: TinyModelSpec, n_vocab: int) -> _Tensors:
    e, hd = spec.n_embd, spec.head_dim
    n_v_heads, n_k_heads = spec.n_head, spec.n_head_kv  # linear-attention heads
    key_dim, value_dim = hd * n_k_heads, hd * n_v_heads
    conv_dim = 2 * key_dim + value_dim

    t = _Tensors(spec.seed)
    t.mat("token_embd.weight", (n_vocab, e))
    t.norm("output_norm.weight", e)
    for il in range(spec.n_layer):
        p = f"blk.{il}."
        t.norm(p + "attn_norm.weight", e)
        t.norm(p + "post_attention_norm.weight", e)
        if spec.is_full_attention(il):
            t.mat(p + "attn_q.weight", (2 * hd * spec.n_head, e))  # query + output gate, interleaved per head
            t.mat(p + "attn_k.weight", (hd * spec.n_head_kv, e))
            t.mat(p + "attn_v.weight", (hd * spec.n_head_kv, e))
            t.mat(p + "attn_output.weight", (e, hd * spec.n_head))
            t.norm(p + "attn_q_norm.weight", hd)
            t.norm(p + "attn_k_norm.weight", hd)
        else:
            t.mat(p + "attn_qkv.weight", (conv_dim, e))
            t.mat(p + "attn_gate.weight", (value_dim, e))
            t.mat(p + "ssm_conv1d.weight", (conv_dim, SSM_CONV_KERNEL), _F32)
            # dt_bias = inverse-softplus(dt) for dt in ~[1e-3, 1e-1]; ssm_a = -exp(A_log) = -A, A ~ U(1, 16)
            t.uniform(p + "ssm_dt.bias", n_v_heads, -6.9, -2.3)
            t.uniform(p + "ssm_a", n_v_heads, -16.0, -1.0)
            t.mat(p + "ssm_beta.weight", (n_v_heads, e))
            t.mat(p + "ssm_alpha.weight", (n_v_heads, e))
            t.norm(p + "ssm_norm.weight", hd)
            t.mat(p + "ssm_out.weight", (e, value_dim))
        t.mat(p + "ffn_gate_inp.weight", (spec.n_expert, e), _F32)
        t.mat(p + "ffn_gate_exps.weight", (spec.n_expert, spec.n_ff_exp, e))
        t.mat(p + "ffn_up_exps.weight", (spec.n_expert, spec.n_ff_exp, e))
        t.mat(p + "ffn_down_exps.weight", (spec.n_expert, e, spec.n_ff_exp))
        t.mat(p + "ffn_gate_inp_shexp.weight", (e,), _F32)
        t.mat(p + "ffn_gate_shexp.weight", (spec.n_ff_shexp, e))
        t.mat(p + "ffn_up_shexp.weight", (spec.n_ff_shexp, e))
        t.mat(p + "ffn_down_shexp.weight", (e, spec.n_ff_shexp))
    return t


def _plain_attention(t: _Tensors, p: str, spec: TinyModelSpec) -> None:
    """Pre-norm and separate q/k/v/o projections of a plain (ungated) attention layer."""
    e, hd = spec.n_embd, spec.head_dim
    t.norm(p + "attn_norm.weight", e)
    t.mat(p + "attn_q.weight", (hd * spec.n_head, e))
    t.mat(p + "attn_k.weight", (hd * spec.n_head_kv, e))
    t.mat(p + "attn_v.weight", (hd * spec.n_head_kv, e))
    t.mat(p + "attn_output.weight", (e, hd * spec.n_head))


def _tensors_qwen3moe(spec: TinyModelSpec, n_vocab: int) -> _Tensors:
    e, hd = spec.n_embd, spec.head_dim
    t = _Tensors(spec.seed)
    t.mat("token_embd.weight", (n_vocab, e))
    t.norm("output_norm.weight", e)
    for il in range(spec.n_layer):
        p = f"blk.{il}."
        _plain_attention(t, p, spec)
        t.norm(p + "attn_q_norm.weight", hd)
        t.norm(p + "attn_k_norm.weight", hd)
        t.norm(p + "ffn_norm.weight", e)
        t.mat(p + "ffn_gate_inp.weight", (spec.n_expert, e), _F32)
        t.mat(p + "ffn_gate_exps.weight", (spec.n_expert, spec.n_ff_exp, e))
        t.mat(p + "ffn_up_exps.weight", (spec.n_expert, spec.n_ff_exp, e))
        t.mat(p + "ffn_down_exps.weight", (spec.n_expert, e, spec.n_ff_exp))
    return t


def _gemma3_n_ff(spec: TinyModelSpec) -> int:
    return spec.n_ff_exp * spec.n_expert_used


def _tensors_gemma3(spec: TinyModelSpec, n_vocab: int) -> _Tensors:
    e, hd, n_ff = spec.n_embd, spec.head_dim, _gemma3_n_ff(spec)
    t = _Tensors(spec.seed)
    t.mat("token_embd.weight", (n_vocab, e))
    t.norm("output_norm.weight", e)
    for il in range(spec.n_layer):
        p = f"blk.{il}."
        _plain_attention(t, p, spec)
        t.norm(p + "post_attention_norm.weight", e)
        t.norm(p + "attn_k_norm.weight", hd)
        t.norm(p + "attn_q_norm.weight", hd)
        t.norm(p + "ffn_norm.weight", e)
        t.mat(p + "ffn_gate.weight", (n_ff, e))
        t.mat(p + "ffn_up.weight", (n_ff, e))
        t.mat(p + "ffn_down.weight", (e, n_ff))
        t.norm(p + "post_ffw_norm.weight", e)
    return t


def _imrope_sections(n_rot: int) -> list[int]:
    """Split n_rot/2 rotary pairs like Qwen3.5's mrope_section [11, 11, 10] (+ a 4th, unused, 0)."""
    half = n_rot // 2
    t = (half * 11 + 16) // 32
    return [t, t, half - 2 * t, 0]


def _hparams(spec: TinyModelSpec) -> list[tuple[str, Any, str]]:
    """(key suffix, value, gguf value type name) triples; keys are prefixed with ``<arch>.``."""
    kv: list[tuple[str, Any, str]] = [
        ("context_length", spec.n_ctx_train, "UINT32"),
        ("embedding_length", spec.n_embd, "UINT32"),
        ("block_count", spec.n_layer, "UINT32"),
    ]
    if spec.arch == "gemma3":
        kv.append(("feed_forward_length", _gemma3_n_ff(spec), "UINT32"))
    kv += [
        ("attention.head_count", spec.n_head, "UINT32"),
        ("attention.head_count_kv", spec.n_head_kv, "UINT32"),
        ("attention.key_length", spec.head_dim, "UINT32"),
        ("attention.value_length", spec.head_dim, "UINT32"),
        ("attention.layer_norm_rms_epsilon", _RMS_EPS, "FLOAT32"),
    ]
    if spec.arch == "qwen35moe":
        n_rot = spec.head_dim // 4  # partial_rotary_factor 0.25
        kv += [
            ("rope.freq_base", 10_000_000.0, "FLOAT32"),
            ("rope.dimension_count", n_rot, "UINT32"),
            ("rope.dimension_sections", _imrope_sections(n_rot), "ARRAY:INT32"),
            ("expert_count", spec.n_expert, "UINT32"),
            ("expert_used_count", spec.n_expert_used, "UINT32"),
            ("expert_feed_forward_length", spec.n_ff_exp, "UINT32"),
            ("expert_shared_feed_forward_length", spec.n_ff_shexp, "UINT32"),
            ("ssm.conv_kernel", SSM_CONV_KERNEL, "UINT32"),
            ("ssm.state_size", spec.head_dim, "UINT32"),
            ("ssm.group_count", spec.n_head_kv, "UINT32"),
            ("ssm.time_step_rank", spec.n_head, "UINT32"),
            ("ssm.inner_size", spec.head_dim * spec.n_head, "UINT32"),
            ("full_attention_interval", spec.full_attention_interval, "UINT32"),
        ]
    elif spec.arch == "qwen3moe":
        kv += [
            ("rope.freq_base", 1_000_000.0, "FLOAT32"),
            ("expert_count", spec.n_expert, "UINT32"),
            ("expert_used_count", spec.n_expert_used, "UINT32"),
            ("expert_feed_forward_length", spec.n_ff_exp, "UINT32"),
        ]
    else:  # gemma3
        kv += [
            ("rope.freq_base", 1_000_000.0, "FLOAT32"),
            ("rope.freq_base_swa", 10_000.0, "FLOAT32"),
            ("attention.sliding_window", GEMMA3_SLIDING_WINDOW, "UINT32"),
            ("attention.sliding_window_pattern", spec.full_attention_interval, "UINT32"),
        ]
    return kv


# GGUF value type codes (gguf spec) -> struct format of one scalar item.
_GGUF_SCALAR_FMT: dict[int, str] = {
    0: "B",  # UINT8
    1: "b",  # INT8
    2: "H",  # UINT16
    3: "h",  # INT16
    4: "I",  # UINT32
    5: "i",  # INT32
    6: "f",  # FLOAT32
    7: "?",  # BOOL
    10: "Q",  # UINT64
    11: "q",  # INT64
    12: "d",  # FLOAT64
}
_GGUF_STRING = 8
_GGUF_ARRAY = 9


def _read_gguf_kv(path: Path) -> list[tuple[str, int, int | None, Any]]:
    """Parse the metadata (KV) section of a little-endian GGUF file.

    Returns ``(key, value_type, array_item_type | None, value)`` tuples in file order.
    Strings are returned as raw ``bytes`` (GGUFWriter accepts bytes for STRING values),
    so values round-trip exactly.  This is much faster than ``gguf.GGUFReader``, which
    takes ~15 s on a 151,936-token vocab because it builds a memmap view per item.
    """
    buf = path.read_bytes()
    if buf[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    version, _n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    if version not in (2, 3):
        raise ValueError(f"{path}: unsupported GGUF version {version}")
    off = 24

    def read_str() -> bytes:
        nonlocal off
        (n,) = struct.unpack_from("<Q", buf, off)
        off += 8
        s = buf[off : off + n]
        off += n
        return s

    def read_scalar(vtype: int) -> Any:
        nonlocal off
        fmt = _GGUF_SCALAR_FMT[vtype]
        (v,) = struct.unpack_from("<" + fmt, buf, off)
        off += struct.calcsize(fmt)
        return v

    out: list[tuple[str, int, int | None, Any]] = []
    for _ in range(n_kv):
        key = read_str().decode("utf-8")
        (vtype,) = struct.unpack_from("<I", buf, off)
        off += 4
        if vtype == _GGUF_STRING:
            out.append((key, vtype, None, read_str()))
        elif vtype == _GGUF_ARRAY:
            itype, count = struct.unpack_from("<IQ", buf, off)
            off += 12
            if itype == _GGUF_STRING:
                items: list[Any] = [read_str() for _ in range(count)]
            elif itype in _GGUF_SCALAR_FMT:
                fmt = f"<{count}{_GGUF_SCALAR_FMT[itype]}"
                items = list(struct.unpack_from(fmt, buf, off))
                off += struct.calcsize(fmt)
            else:
                raise ValueError(f"{path}: key {key}: unsupported array item type {itype}")
            out.append((key, vtype, itype, items))
        elif vtype in _GGUF_SCALAR_FMT:
            out.append((key, vtype, None, read_scalar(vtype)))
        else:
            raise ValueError(f"{path}: key {key}: unsupported value type {vtype}")
    return out


_TOKEN_TYPE_CONTROL = 3
_TOKEN_TYPE_USER_DEFINED = 4

#: Qwen2.5/Qwen3 added tokens beyond <|im_end|> (tokenizer_config.json ``added_tokens_decoder``), with the
#: type the converter gives them (conversion/base.py get_vocab_base): ``special`` or ``<|...|>``-looking
#: -> CONTROL, the others -> USER_DEFINED (matched in text even without parse_special).
QWEN_ADDED_TOKENS: dict[int, tuple[bytes, int]] = {
    151646: (b"<|object_ref_start|>", _TOKEN_TYPE_CONTROL),
    151647: (b"<|object_ref_end|>", _TOKEN_TYPE_CONTROL),
    151648: (b"<|box_start|>", _TOKEN_TYPE_CONTROL),
    151649: (b"<|box_end|>", _TOKEN_TYPE_CONTROL),
    151650: (b"<|quad_start|>", _TOKEN_TYPE_CONTROL),
    151651: (b"<|quad_end|>", _TOKEN_TYPE_CONTROL),
    151652: (b"<|vision_start|>", _TOKEN_TYPE_CONTROL),
    151653: (b"<|vision_end|>", _TOKEN_TYPE_CONTROL),
    151654: (b"<|vision_pad|>", _TOKEN_TYPE_CONTROL),
    151655: (b"<|image_pad|>", _TOKEN_TYPE_CONTROL),
    151656: (b"<|video_pad|>", _TOKEN_TYPE_CONTROL),
    151657: (b"<tool_call>", _TOKEN_TYPE_USER_DEFINED),
    151658: (b"</tool_call>", _TOKEN_TYPE_USER_DEFINED),
    151659: (b"<|fim_prefix|>", _TOKEN_TYPE_CONTROL),
    151660: (b"<|fim_middle|>", _TOKEN_TYPE_CONTROL),
    151661: (b"<|fim_suffix|>", _TOKEN_TYPE_CONTROL),
    151662: (b"<|fim_pad|>", _TOKEN_TYPE_CONTROL),
    151663: (b"<|repo_name|>", _TOKEN_TYPE_CONTROL),
    151664: (b"<|file_sep|>", _TOKEN_TYPE_CONTROL),
    151665: (b"<tool_response>", _TOKEN_TYPE_USER_DEFINED),
    151666: (b"</tool_response>", _TOKEN_TYPE_USER_DEFINED),
    151667: (b"<think>", _TOKEN_TYPE_USER_DEFINED),
    151668: (b"</think>", _TOKEN_TYPE_USER_DEFINED),
}
_QWEN_EOT_ID = 151643  # <|endoftext|>: marks a Qwen2-family vocab


def _fill_qwen_added_tokens(tok: dict[str, Any]) -> None:
    """Put :data:`QWEN_ADDED_TOKENS` into a Qwen vocab's ``[PAD<id>]`` slots (other vocabs: unchanged)."""
    tokens: list[bytes] = tok["tokenizer.ggml.tokens"]
    types: list[int] | None = tok.get("tokenizer.ggml.token_type")
    if types is None or len(tokens) <= max(QWEN_ADDED_TOKENS) or tokens[_QWEN_EOT_ID] != b"<|endoftext|>":
        return
    tokens, types = list(tokens), list(types)
    for tid, (text, ttype) in QWEN_ADDED_TOKENS.items():
        if tokens[tid] == text:
            continue  # the vocab already has it: keep its type
        if tokens[tid] != f"[PAD{tid}]".encode():
            raise ValueError(f"vocab has {tokens[tid]!r} at id {tid}, expected {text!r} or a [PAD] placeholder")
        tokens[tid], types[tid] = text, ttype
    tok["tokenizer.ggml.tokens"], tok["tokenizer.ggml.token_type"] = tokens, types


def _copy_tokenizer(gguf: Any, writer: Any, vocab_gguf: Path) -> dict[str, Any]:
    """Copy every ``tokenizer.*`` key of ``vocab_gguf`` into ``writer`` (Qwen added tokens filled in);
    return them as a dict."""
    vt = gguf.GGUFValueType
    kv = [item for item in _read_gguf_kv(vocab_gguf) if item[0].startswith("tokenizer.")]
    tok: dict[str, Any] = {key: value for key, _vtype, _itype, value in kv}
    if not tok.get("tokenizer.ggml.tokens"):
        raise ValueError(f"{vocab_gguf}: no tokenizer.ggml.tokens")
    _fill_qwen_added_tokens(tok)
    for key, vtype, itype, _value in kv:
        writer.add_key_value(key, tok[key], vt(vtype), sub_type=None if itype is None else vt(itype))
    return tok


# --- the "emit channel" -------------------------------------------------------------------
#
# With purely random weights the model samples any of the vocab's tokens, including the
# ~1.4k byte-level BPE tokens that are not valid UTF-8 on their own and the EOG/special
# tokens.  llama-server's output parser then fails on the malformed UTF-8 (HTTP 500
# "Failed to parse input at pos 0", seen on ~40% of 128-token sampled completions) and an
# EOG token ends a generation early.  So embedding dim 0 is a private channel: +A for
# tokens the model may emit, -A for the others.  Every layer's FFN (each routed expert, or
# the dense FFN) gets two hidden units that compute |x0| (silu/gelu(+-x0) * +-x0) and write
# a large positive value into dim 0, so every position's final hidden state is dominated by
# a positive dim 0 whatever the input (all layers, not just the first, because gemma3's
# post-norms add O(1) noise to every dim of the residual per layer).  Through the tied
# output embedding, emittable tokens then get logits ~+16A and the others ~-16A (e^-8
# relative probability).  Routers ignore dim 0, so expert routing still varies per token.
# Everything else stays random.

_EMIT_A = 0.25  # embedding dim-0 magnitude
_EMIT_G = 1.0  # gate/up weight of the two |x0| units
_EMIT_D = 0.1  # down weight of the two |x0| units

# Token texts llama.cpp treats as end-of-generation (src/llama-vocab.cpp), even if NORMAL type.
_EOG_TEXTS = frozenset(
    s.encode("utf-8")
    for s in (
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",
    )
)  # fmt: skip
_TOKEN_TYPE_NORMAL = 1


def _gpt2_byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode(): printable stand-in char -> byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def _emittable_tokens(tok: dict[str, Any]) -> npt.NDArray[np.bool_]:
    """Tokens that are NORMAL, not EOG-looking, and (byte-level BPE) valid UTF-8 on their own."""
    tokens: list[bytes] = tok["tokenizer.ggml.tokens"]
    types: list[int] = tok.get("tokenizer.ggml.token_type") or [_TOKEN_TYPE_NORMAL] * len(tokens)
    byte_level = tok.get("tokenizer.ggml.model") == b"gpt2"
    decoder = _gpt2_byte_decoder()
    ok = np.zeros(len(tokens), dtype=np.bool_)
    for i, (text, ttype) in enumerate(zip(tokens, types, strict=True)):
        if ttype != _TOKEN_TYPE_NORMAL or text in _EOG_TEXTS:
            continue
        try:
            chars = text.decode("utf-8")
            if byte_level:
                bytes(decoder[c] for c in chars).decode("utf-8")
        except (UnicodeDecodeError, KeyError):
            continue
        ok[i] = True
    if not ok.any():
        raise ValueError("vocab has no emittable tokens")
    return ok


def _add_emit_channel(t: _Tensors, spec: TinyModelSpec, emittable: npt.NDArray[np.bool_]) -> None:
    emb = t.items["token_embd.weight"]
    emb[:, 0] = np.where(emittable, _EMIT_A, -_EMIT_A).astype(emb.dtype)
    sfx = "" if spec.arch == "gemma3" else "_exps"  # dense FFN (gemma3) or every routed expert (MoE)
    for il in range(spec.n_layer):
        p = f"blk.{il}."
        router = t.items.get(p + "ffn_gate_inp.weight")
        if router is not None:
            router[:, 0] = 0.0
        gate, up, down = (t.items[f"{p}ffn_{k}{sfx}.weight"] for k in ("gate", "up", "down"))
        for w in (gate, up):  # shape (..., n_ff, n_embd)
            w[..., 0:2, :] = 0.0
            w[..., 0, 0] = _EMIT_G
            w[..., 1, 0] = -_EMIT_G
        down[..., 0, :] = 0.0  # shape (..., n_embd, n_ff)
        down[..., 0, 0:2] = _EMIT_D


@contextlib.contextmanager
def atomic_gguf(gguf: Any, out_path: Path, arch: str) -> Iterator[Any]:
    """A GGUFWriter on a temporary file next to out_path; on success the file is written, synced and renamed
    into place, on any error removed (a reader never sees a partial model)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=out_path.parent, prefix=f".{out_path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        writer = gguf.GGUFWriter(str(tmp), arch)
        yield writer
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_tiny_model(
    out_path: Path,
    vocab_gguf: Path,
    spec: TinyModelSpec = TinyModelSpec(),
    gguf_py_dir: Path | None = None,
) -> Path:
    """Write a deterministic random-weight model of ``spec.arch`` with ``vocab_gguf``'s tokenizer.

    The file is written to a temporary file next to ``out_path`` and atomically renamed
    into place.  Returns ``out_path``.
    """
    spec.validate()
    out_path = Path(out_path)
    vocab_gguf = Path(vocab_gguf)
    gguf = _import_gguf(gguf_py_dir)
    vt = gguf.GGUFValueType

    with atomic_gguf(gguf, out_path, spec.arch) as writer:  # also writes general.architecture
        writer.add_key_value("general.type", "model", vt.STRING)
        writer.add_key_value("general.name", f"lab-tiny-{spec.arch}", vt.STRING)
        writer.add_key_value("general.file_type", int(gguf.LlamaFileType.MOSTLY_F16), vt.UINT32)
        for suffix, value, tname in _hparams(spec):
            key = f"{spec.arch}.{suffix}"
            if tname.startswith("ARRAY:"):
                writer.add_key_value(key, value, vt.ARRAY, sub_type=vt[tname.split(":", 1)[1]])
            else:
                writer.add_key_value(key, value, vt[tname])
        tok = _copy_tokenizer(gguf, writer, vocab_gguf)
        emittable = _emittable_tokens(tok)

        builders = {"qwen35moe": _tensors_qwen35moe, "qwen3moe": _tensors_qwen3moe, "gemma3": _tensors_gemma3}
        tensors = builders[spec.arch](spec, len(emittable))
        _add_emit_channel(tensors, spec, emittable)
        for name, data in tensors.items.items():
            writer.add_tensor(name, data)
    return out_path
