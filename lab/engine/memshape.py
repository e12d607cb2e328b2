"""The shape of a model's sequence memory, from its GGUF metadata alone (no tensor is read).

A sequence's state, as llama_state_seq_get_data_ext writes it with flags 0, is
    per cell:    its metadata (position, seq-id count, one seq id; plus the 2-D position of M-RoPE models)
                 and one K row and one V row in every attention layer (f16 cache);
    once:        every recurrent layer's conv state and recurrent state (f32), whatever the depth;
plus a few headers. So a depth-L blob is about `fixed_bytes + L * bytes_per_cell`, and a restore has to
move all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.engine.gguf_io import read_gguf_metadata

F16, F32 = 2, 4
# hybrids whose every `full_attention_interval`-th layer is attention and the others recurrent (Gated-DeltaNet)
INTERVAL_HYBRIDS = ("qwen35moe", "qwen35", "qwen3next")


@dataclass(frozen=True)
class MemoryShape:
    arch: str
    n_layer: int
    attention_layers: int
    recurrent_layers: int
    kv_bytes_per_cell: int  # K + V rows summed over the attention layers
    cell_meta_bytes: int
    recurrent_bytes: int  # conv + recurrent state of one sequence, summed over the recurrent layers

    @property
    def bytes_per_cell(self) -> int:
        return self.kv_bytes_per_cell + self.cell_meta_bytes

    def blob_bytes(self, L: int) -> int:
        """The predicted state blob of a depth-L sequence, headers aside."""
        return self.recurrent_bytes + L * self.bytes_per_cell


def memory_shape(meta: dict[str, Any]) -> MemoryShape | None:
    """The shape of a model's sequence memory; None where the layout is not modelled here (sliding-window
    attention keeps only a window of cells; pure recurrent models and others without attention keys)."""
    arch = str(meta.get("general.architecture", ""))

    def key(name: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{name}", default)

    n_layer, n_head_kv = key("block_count"), key("attention.head_count_kv")
    if not isinstance(n_layer, int) or n_head_kv is None or key("attention.sliding_window") is not None:
        return None
    heads = n_head_kv if isinstance(n_head_kv, list) else [n_head_kv] * n_layer
    n_head = key("attention.head_count", 1)
    head_dim = key("embedding_length", 0) // (n_head[0] if isinstance(n_head, list) else n_head)
    k_len, v_len = key("attention.key_length", head_dim), key("attention.value_length", head_dim)
    interval = key("full_attention_interval")
    if arch in INTERVAL_HYBRIDS and isinstance(interval, int) and interval > 0:
        attention = [(il + 1) % interval == 0 for il in range(n_layer)]
    elif key("ssm.state_size") is None:
        attention = [h > 0 for h in heads]
    else:
        return None  # a recurrent layout without the interval rule: not modelled
    kv = sum(heads[il] * (k_len + v_len) * F16 for il in range(n_layer) if attention[il])
    n_recurrent = attention.count(False)
    recurrent = 0
    if n_recurrent:
        d_conv, d_inner = key("ssm.conv_kernel", 0), key("ssm.inner_size", 0)
        d_state, n_group = key("ssm.state_size", 0), key("ssm.group_count", 0)
        conv = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
        recurrent = n_recurrent * (conv + d_state * d_inner) * F32
    mrope = key("rope.dimension_sections") is not None  # M-RoPE cells also store a 2-D position
    return MemoryShape(
        arch=arch, n_layer=n_layer, attention_layers=attention.count(True), recurrent_layers=n_recurrent,
        kv_bytes_per_cell=kv, cell_meta_bytes=12 + (8 if mrope else 0), recurrent_bytes=recurrent,
    )  # fmt: skip


def model_memory_shape(path: Path) -> MemoryShape | None:
    return memory_shape(read_gguf_metadata(path))
