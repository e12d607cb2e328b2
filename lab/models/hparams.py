"""A model's hyperparameters from its GGUF metadata keys alone (no tensor is read; a file holding the keys and
no tensor data is enough): what the sequence memory (lab.models.memshape) and the cost model
(lab.measure.costmodel) are computed from.

Layer kinds: `attention` (full attention over every cached key), `sliding` (attention over a window of the
last `window` keys) and `recurrent` (a Gated-DeltaNet layer: a fixed-size state, no per-token KV).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from lab.core.errors import UsageError
from lab.core.gguf_io import read_gguf_metadata

LayerKind = Literal["attention", "sliding", "recurrent"]
# hybrids whose every `full_attention_interval`-th layer is attention and the others Gated-DeltaNet
INTERVAL_HYBRIDS = ("qwen35moe", "qwen35", "qwen3next")
GATED_Q = ("qwen35moe", "qwen35", "qwen3next")  # one Q projection that outputs the query and its output gate
SHARED_EXPERT = ("qwen35moe", "qwen3next")
GEMMA3_SWA_PATTERN = 6  # llama.cpp's default for gemma3 when the file does not say
SWA_PATTERN = {"gpt-oss": 2}  # the same default for other sliding-window archs (gpt-oss alternates)

# a table, left in rows for the formatter to skip
# llama_ftype -> (name, nominal bits per weight of its base type; mixes keep a few tensors wider)
FILE_TYPES: dict[int, tuple[str, float]] = {
    0: ("F32", 32), 1: ("F16", 16), 2: ("Q4_0", 4.5), 3: ("Q4_1", 5), 7: ("Q8_0", 8.5), 8: ("Q5_0", 5.5),
    9: ("Q5_1", 6), 10: ("Q2_K", 2.625), 11: ("Q3_K_S", 3.4375), 12: ("Q3_K_M", 3.4375), 13: ("Q3_K_L", 3.4375),
    14: ("Q4_K_S", 4.5), 15: ("Q4_K_M", 4.5), 16: ("Q5_K_S", 5.5), 17: ("Q5_K_M", 5.5), 18: ("Q6_K", 6.5625),
    32: ("BF16", 16),
}  # fmt: skip


class HparamsError(UsageError):
    pass


@dataclass(frozen=True)
class Hparams:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_k: int  # key (and query) head dim
    head_v: int
    n_vocab: int
    kinds: tuple[LayerKind, ...]
    window: int | None = None
    gated_q: bool = False
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_ff_shexp: int = 0
    n_ff: int = 0  # a dense FFN's width (no experts)
    ssm_d_conv: int = 0
    ssm_d_state: int = 0  # Gated-DeltaNet key head dim
    ssm_n_group: int = 0  # key heads
    ssm_dt_rank: int = 0  # value heads
    ssm_d_inner: int = 0  # value heads x value head dim
    mrope: bool = False
    file_type: str = "F16"
    weight_bits: float = 16.0
    n_ctx_train: int = 0  # the context the model was trained for (0: not in the GGUF)

    def count(self, kind: LayerKind) -> int:
        return self.kinds.count(kind)

    @property
    def conv_dim(self) -> int:
        """Channels of the Gated-DeltaNet convolution: Q and K of every key head, V of every value head."""
        return 2 * self.ssm_n_group * self.ssm_d_state + self.ssm_d_inner


def layer_kinds(arch: str, key: Callable[..., Any], n_layer: int) -> tuple[LayerKind, ...]:
    """Each layer's kind: every `every`-th layer full attention, the others recurrent (an interval hybrid),
    window attention (a sliding-window model) or full attention too."""
    interval = key("full_attention_interval")
    every, other = 1, "attention"
    if arch in INTERVAL_HYBRIDS and isinstance(interval, int) and interval > 0:
        every, other = interval, "recurrent"
    elif key("attention.sliding_window") is not None:
        pattern = SWA_PATTERN.get(arch, GEMMA3_SWA_PATTERN)
        every, other = int(key("attention.sliding_window_pattern", pattern)), "sliding"
    elif key("ssm.state_size") is not None:
        raise HparamsError(f"{arch}: a recurrent layout without full_attention_interval is not modelled")
    return tuple(cast(LayerKind, "attention" if (il + 1) % every == 0 else other) for il in range(n_layer))


def hparams_of(meta: dict[str, Any]) -> Hparams:
    """The hyperparameters of a decoder-only transformer (dense, MoE, or an interval hybrid); HparamsError
    names the missing key."""
    arch = str(meta.get("general.architecture", ""))
    if not arch:
        raise HparamsError("no general.architecture key: not a model GGUF")

    def key(name: str, default: Any = None, required: bool = False) -> Any:
        value = meta.get(f"{arch}.{name}", default)
        if required and value is None:
            raise HparamsError(f"{arch}: the GGUF has no {arch}.{name} key")
        return value

    def per_layer(value: Any) -> int:
        return int(max(value)) if isinstance(value, list) else int(value)

    n_layer, n_embd = int(key("block_count", required=True)), int(key("embedding_length", required=True))
    n_head = per_layer(key("attention.head_count", required=True))
    n_head_kv = per_layer(key("attention.head_count_kv", n_head))
    head_k = int(key("attention.key_length", n_embd // n_head))
    head_v = int(key("attention.value_length", head_k))
    window = key("attention.sliding_window")
    kinds = layer_kinds(arch, key, n_layer)
    tokens = meta.get("tokenizer.ggml.tokens")
    n_vocab = len(tokens) if isinstance(tokens, list) else int(key("vocab_size", 0))
    ftype = meta.get("general.file_type", 1)
    name, bits = FILE_TYPES.get(int(ftype), (f"file type {ftype}", 16.0))
    n_expert = int(key("expert_count", 0))
    return Hparams(
        arch=arch,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_k=head_k,
        head_v=head_v,
        n_vocab=n_vocab,
        kinds=kinds,
        window=int(window) if window is not None else None,
        gated_q=arch in GATED_Q,
        n_expert=n_expert,
        n_expert_used=int(key("expert_used_count", 0)),
        n_ff_exp=int(key("expert_feed_forward_length", 0)),
        n_ff_shexp=int(key("expert_shared_feed_forward_length", 0)) if arch in SHARED_EXPERT else 0,
        n_ff=0 if n_expert else per_layer(key("feed_forward_length", 0)),
        ssm_d_conv=int(key("ssm.conv_kernel", 0)),
        ssm_d_state=int(key("ssm.state_size", 0)),
        ssm_n_group=int(key("ssm.group_count", 0)),
        ssm_dt_rank=int(key("ssm.time_step_rank", 0)),
        ssm_d_inner=int(key("ssm.inner_size", 0)),
        mrope=key("rope.dimension_sections") is not None,
        file_type=name,
        weight_bits=bits,
        n_ctx_train=int(key("context_length", 0)),
    )


def model_hparams(path: Path) -> Hparams:
    try:
        meta = read_gguf_metadata(path)
    except (OSError, ValueError) as e:  # the reader's message names the file already
        raise HparamsError(str(e) if str(path) in str(e) else f"{path}: {e}") from e
    return hparams_of(meta)
