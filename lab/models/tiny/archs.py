"""Shapes, hyperparameters and random tensors of the tiny models, per architecture.

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
``"gpt-oss"``
    gpt-oss: sliding-window and full attention alternating (every
    ``full_attention_interval``-th layer full, 2 as in the real model; a window
    of :data:`GPT_OSS_SLIDING_WINDOW` tokens), an attention sink per head,
    biased q/k/v/o projections and a biased softmax-routed MoE FFN (no shared
    expert).  Memory type ``llama_kv_cache_iswa``.  Its output projection is
    a tensor of its own (llama.cpp requires one for gpt-oss).

Output embedding is tied to the token embedding (no ``output.weight``) for every
arch but gpt-oss, which keeps the file small (the F16 embedding dominates its size).

Weights are N(0, 0.02) (norms 1 + N(0, 0.02)); :mod:`lab.models.tiny.emit` then overwrites a
few of them deterministically.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

SUPPORTED_ARCHS: tuple[str, ...] = ("qwen35moe", "qwen3moe", "gemma3", "gpt-oss")

#: Sliding-window size (tokens) of the SWA layers of the ``gemma3`` tiny model.
GEMMA3_SLIDING_WINDOW = 128

#: Sliding-window size (tokens) of the ``gpt-oss`` tiny model (the real model's).
GPT_OSS_SLIDING_WINDOW = 128

#: Linear-attention (Gated-DeltaNet) causal conv kernel size, as in Qwen3.5.
SSM_CONV_KERNEL = 4

_WEIGHT_STD = 0.02
_NORM_STD = 0.02  # norm weights are 1.0 + N(0, _NORM_STD)
_RMS_EPS = 1e-6


def require_positive(spec: object, *names: str) -> None:
    """Raise ValueError naming the first of these fields of `spec` that is not > 0."""
    for name in names:
        if (value := getattr(spec, name)) <= 0:
            raise ValueError(f"{name} must be > 0, got {value}")


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
        require_positive(self, "n_embd", "n_layer", "full_attention_interval", "n_head", "n_head_kv", "head_dim")
        require_positive(self, "n_ff_exp", "n_ctx_train", "n_expert_used")
        if self.n_ff_exp < 2 or self.n_embd < 2:
            raise ValueError("n_ff_exp and n_embd must be >= 2 (every FFN uses 2 units and embedding dim 0)")
        if self.n_head % self.n_head_kv != 0:
            raise ValueError(f"n_head ({self.n_head}) must be a multiple of n_head_kv ({self.n_head_kv})")
        moe = self.arch in ("qwen35moe", "qwen3moe", "gpt-oss")
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


#: Shape defaults that differ by architecture (gpt-oss alternates window and full attention).
ARCH_DEFAULTS: dict[str, dict[str, int]] = {"gpt-oss": {"full_attention_interval": 2}}


def tiny_spec(arch: str, **kw: Any) -> TinyModelSpec:
    """The tiny model of `arch`, with that architecture's own defaults under `kw`."""
    return TinyModelSpec(arch=arch, **{**ARCH_DEFAULTS.get(arch, {}), **kw})


Array = npt.NDArray[Any]
F16 = np.float16
F32 = np.float32


class Tensors:
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

    def mat(self, name: str, shape: tuple[int, ...], dtype: type[np.floating[Any]] = F16) -> None:
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


def _moe_ffn(t: Tensors, p: str, spec: TinyModelSpec) -> None:
    """The routed experts of a MoE FFN: the router, then the stacked gate, up and down projections."""
    e = spec.n_embd
    t.mat(p + "ffn_gate_inp.weight", (spec.n_expert, e), F32)
    t.mat(p + "ffn_gate_exps.weight", (spec.n_expert, spec.n_ff_exp, e))
    t.mat(p + "ffn_up_exps.weight", (spec.n_expert, spec.n_ff_exp, e))
    t.mat(p + "ffn_down_exps.weight", (spec.n_expert, e, spec.n_ff_exp))


def _layer_qwen35moe(t: Tensors, p: str, spec: TinyModelSpec, il: int) -> None:
    e, hd = spec.n_embd, spec.head_dim
    n_v_heads, n_k_heads = spec.n_head, spec.n_head_kv  # linear-attention heads
    key_dim, value_dim = hd * n_k_heads, hd * n_v_heads
    conv_dim = 2 * key_dim + value_dim
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
        t.mat(p + "ssm_conv1d.weight", (conv_dim, SSM_CONV_KERNEL), F32)
        # dt_bias = inverse-softplus(dt) for dt in ~[1e-3, 1e-1]; ssm_a = -exp(A_log) = -A, A ~ U(1, 16)
        t.uniform(p + "ssm_dt.bias", n_v_heads, -6.9, -2.3)
        t.uniform(p + "ssm_a", n_v_heads, -16.0, -1.0)
        t.mat(p + "ssm_beta.weight", (n_v_heads, e))
        t.mat(p + "ssm_alpha.weight", (n_v_heads, e))
        t.norm(p + "ssm_norm.weight", hd)
        t.mat(p + "ssm_out.weight", (e, value_dim))
    _moe_ffn(t, p, spec)
    t.mat(p + "ffn_gate_inp_shexp.weight", (e,), F32)
    t.mat(p + "ffn_gate_shexp.weight", (spec.n_ff_shexp, e))
    t.mat(p + "ffn_up_shexp.weight", (spec.n_ff_shexp, e))
    t.mat(p + "ffn_down_shexp.weight", (e, spec.n_ff_shexp))


def _plain_attention(t: Tensors, p: str, spec: TinyModelSpec) -> None:
    """Pre-norm and separate q/k/v/o projections of a plain (ungated) attention layer."""
    e, hd = spec.n_embd, spec.head_dim
    t.norm(p + "attn_norm.weight", e)
    t.mat(p + "attn_q.weight", (hd * spec.n_head, e))
    t.mat(p + "attn_k.weight", (hd * spec.n_head_kv, e))
    t.mat(p + "attn_v.weight", (hd * spec.n_head_kv, e))
    t.mat(p + "attn_output.weight", (e, hd * spec.n_head))


def _layer_qwen3moe(t: Tensors, p: str, spec: TinyModelSpec, il: int) -> None:
    _plain_attention(t, p, spec)
    t.norm(p + "attn_q_norm.weight", spec.head_dim)
    t.norm(p + "attn_k_norm.weight", spec.head_dim)
    t.norm(p + "ffn_norm.weight", spec.n_embd)
    _moe_ffn(t, p, spec)


def _gemma3_n_ff(spec: TinyModelSpec) -> int:
    return spec.n_ff_exp * spec.n_expert_used


def _layer_gemma3(t: Tensors, p: str, spec: TinyModelSpec, il: int) -> None:
    e, hd, n_ff = spec.n_embd, spec.head_dim, _gemma3_n_ff(spec)
    _plain_attention(t, p, spec)
    t.norm(p + "post_attention_norm.weight", e)
    t.norm(p + "attn_k_norm.weight", hd)
    t.norm(p + "attn_q_norm.weight", hd)
    t.norm(p + "ffn_norm.weight", e)
    t.mat(p + "ffn_gate.weight", (n_ff, e))
    t.mat(p + "ffn_up.weight", (n_ff, e))
    t.mat(p + "ffn_down.weight", (e, n_ff))
    t.norm(p + "post_ffw_norm.weight", e)


def _layer_gpt_oss(t: Tensors, p: str, spec: TinyModelSpec, il: int) -> None:
    e, hd = spec.n_embd, spec.head_dim
    _plain_attention(t, p, spec)
    t.mat(p + "attn_q.bias", (hd * spec.n_head,), F32)
    t.mat(p + "attn_k.bias", (hd * spec.n_head_kv,), F32)
    t.mat(p + "attn_v.bias", (hd * spec.n_head_kv,), F32)
    t.mat(p + "attn_output.bias", (e,), F32)
    t.mat(p + "attn_sinks.weight", (spec.n_head,), F32)  # one learned sink logit per head
    t.norm(p + "post_attention_norm.weight", e)
    _moe_ffn(t, p, spec)
    t.mat(p + "ffn_gate_inp.bias", (spec.n_expert,), F32)
    t.mat(p + "ffn_gate_exps.bias", (spec.n_expert, spec.n_ff_exp), F32)
    t.mat(p + "ffn_up_exps.bias", (spec.n_expert, spec.n_ff_exp), F32)
    t.mat(p + "ffn_down_exps.bias", (spec.n_expert, e), F32)


# the tensors of layer `il` of each arch, named with the prefix `p` ("blk.<il>.")
_LAYERS: dict[str, Callable[[Tensors, str, TinyModelSpec, int], None]] = {
    "qwen35moe": _layer_qwen35moe,
    "qwen3moe": _layer_qwen3moe,
    "gemma3": _layer_gemma3,
    "gpt-oss": _layer_gpt_oss,
}


def build_tensors(spec: TinyModelSpec, n_vocab: int) -> Tensors:
    """All tensors of a ``spec.arch`` model with an ``n_vocab``-token embedding (tied but for gpt-oss), in
    file order."""
    t = Tensors(spec.seed)
    t.mat("token_embd.weight", (n_vocab, spec.n_embd))
    t.norm("output_norm.weight", spec.n_embd)
    if spec.arch == "gpt-oss":
        t.mat("output.weight", (n_vocab, spec.n_embd))
    for il in range(spec.n_layer):
        _LAYERS[spec.arch](t, f"blk.{il}.", spec, il)
    return t


def _imrope_sections(n_rot: int) -> list[int]:
    """Split n_rot/2 rotary pairs like Qwen3.5's mrope_section [11, 11, 10] (+ a 4th, unused, 0)."""
    half = n_rot // 2
    t = (half * 11 + 16) // 32
    return [t, t, half - 2 * t, 0]


def hparams(spec: TinyModelSpec) -> list[tuple[str, Any, str]]:
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
    experts: list[tuple[str, Any, str]] = [
        ("expert_count", spec.n_expert, "UINT32"),
        ("expert_used_count", spec.n_expert_used, "UINT32"),
        ("expert_feed_forward_length", spec.n_ff_exp, "UINT32"),
    ]
    if spec.arch == "qwen35moe":
        n_rot = spec.head_dim // 4  # partial_rotary_factor 0.25
        kv += [
            ("rope.freq_base", 10_000_000.0, "FLOAT32"),
            ("rope.dimension_count", n_rot, "UINT32"),
            ("rope.dimension_sections", _imrope_sections(n_rot), "ARRAY:INT32"),
            *experts,
            ("expert_shared_feed_forward_length", spec.n_ff_shexp, "UINT32"),
            ("ssm.conv_kernel", SSM_CONV_KERNEL, "UINT32"),
            ("ssm.state_size", spec.head_dim, "UINT32"),
            ("ssm.group_count", spec.n_head_kv, "UINT32"),
            ("ssm.time_step_rank", spec.n_head, "UINT32"),
            ("ssm.inner_size", spec.head_dim * spec.n_head, "UINT32"),
            ("full_attention_interval", spec.full_attention_interval, "UINT32"),
        ]
    elif spec.arch == "qwen3moe":
        kv += [("rope.freq_base", 1_000_000.0, "FLOAT32"), *experts]
    elif spec.arch == "gpt-oss":
        kv += [
            ("rope.freq_base", 150_000.0, "FLOAT32"),
            *experts,
            ("attention.sliding_window", GPT_OSS_SLIDING_WINDOW, "UINT32"),
            ("attention.sliding_window_pattern", spec.full_attention_interval, "UINT32"),
        ]
    else:  # gemma3
        kv += [
            ("rope.freq_base", 1_000_000.0, "FLOAT32"),
            ("rope.freq_base_swa", 10_000.0, "FLOAT32"),
            ("attention.sliding_window", GEMMA3_SLIDING_WINDOW, "UINT32"),
            ("attention.sliding_window_pattern", spec.full_attention_interval, "UINT32"),
        ]
    return kv
