"""The shape of a model's sequence memory, from its GGUF metadata alone (no tensor is read).

A sequence's state, as llama_state_seq_get_data_ext writes it with flags 0, is
    per cell:    its metadata (position, seq-id count, one seq id; plus the 2-D position of M-RoPE models)
                 and one K row and one V row in every attention layer (f16 cache);
    once:        every recurrent layer's conv state and recurrent state (f32), whatever the depth;
plus a few headers. So a depth-L blob is about `fixed_bytes + L * bytes_per_cell`, and a restore has to
move all of it. A sliding-window model saves its window layers apart: only the cells the window still reaches
from the last position (the last `window` of them), whatever the depth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.models.hparams import HparamsError, hparams_of

F16, F32 = 2, 4


@dataclass(frozen=True)
class MemoryShape:
    arch: str
    n_layer: int
    attention_layers: int
    recurrent_layers: int
    kv_bytes_per_cell: int  # K + V rows summed over the attention layers
    cell_meta_bytes: int
    recurrent_bytes: int  # conv + recurrent state of one sequence, summed over the recurrent layers
    window: int = 0  # the sliding window's tokens (0: no sliding-window layers)
    window_kv_bytes_per_cell: int = 0  # K + V rows summed over the sliding-window layers

    @property
    def bytes_per_cell(self) -> int:
        return self.kv_bytes_per_cell + self.cell_meta_bytes

    def blob_bytes(self, L: int) -> int:
        """The predicted state blob of a depth-L sequence, headers aside."""
        windowed = min(L, self.window) * (self.window_kv_bytes_per_cell + self.cell_meta_bytes) if self.window else 0
        return self.recurrent_bytes + L * self.bytes_per_cell + windowed


def memory_shape(meta: dict[str, Any]) -> MemoryShape | None:
    """The shape of a model's sequence memory; None where the layout is not modelled here (layouts
    lab.models.hparams does not read)."""
    try:
        h = hparams_of(meta)
    except HparamsError:
        return None
    kv_row = h.n_head_kv * (h.head_k + h.head_v) * F16
    n_recurrent = h.count("recurrent")
    conv = max(h.ssm_d_conv - 1, 0) * h.conv_dim
    return MemoryShape(
        arch=h.arch,
        n_layer=h.n_layer,
        attention_layers=h.count("attention"),
        recurrent_layers=n_recurrent,
        kv_bytes_per_cell=h.count("attention") * kv_row,
        cell_meta_bytes=12 + (8 if h.mrope else 0),  # M-RoPE cells also store a 2-D position
        recurrent_bytes=n_recurrent * (conv + h.ssm_d_state * h.ssm_d_inner) * F32,
        window=(h.window or 0) if h.count("sliding") else 0,
        window_kv_bytes_per_cell=h.count("sliding") * kv_row,
    )
