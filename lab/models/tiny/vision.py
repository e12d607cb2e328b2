"""A deterministic random-weight vision projector (mmproj GGUF) for the tiny text model.

:func:`write_tiny_projector` writes a ``clip.projector_type = qwen3vl_merger`` projector, the type
Qwen3.5 uses at the pinned llama.cpp: the keys and tensors are exactly those the converter writes
(``conversion/qwen3vl.py`` ``Qwen3VLVisionModel`` + ``MmprojModel`` in ``conversion/base.py``), the
graph is ``tools/mtmd/models/qwen3vl.cpp``.  llama-server loads it with ``--mmproj`` next to the tiny
text model, so image steps run the real mtmd path (preprocess, ViT encode, M-RoPE image positions).

What the loader and graph need (llama.cpp 465b1f0e7):

- ``spatial_merge_size`` 2: the graph hard-codes a 2x2 merge (``n_embd * 4`` rows into ``mm.0``);
- no deepstack layers: they widen the projector output to ``n_embd_text * (1 + n_deepstack)``,
  which only a text model that declares deepstack layers (qwen3vl) accepts, not qwen35moe;
- ``v.position_embd.weight`` F32: with F16 the server aborts at startup in ``ggml_interpolate``
  (the table is interpolated to every image's patch grid, warmup included);
- ``mm.2`` output width = the text model's ``n_embd`` (mtmd refuses a mismatch at load).

Image tokens: the server resizes an image to multiples of ``patch_size * 2`` (see
:class:`lab.engine.imagegrid.ImageGeometry`), one token per 2x2 patch block; M-RoPE advances positions by
``max(nx, ny)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lab.core.gguf_io import atomic_gguf, import_gguf
from lab.models.tiny.archs import F32, Tensors, require_positive

PROJECTOR_TYPE = "qwen3vl_merger"
#: The only merge the qwen3vl graph supports (it reshapes by ``n_embd * 4``).
SPATIAL_MERGE = 2

_LN_EPS = 1e-6  # the converter writes the text config's rms_norm_eps (Qwen3.5: 1e-6)
_IMAGE_MEAN = (0.5, 0.5, 0.5)  # Qwen3-VL preprocessor_config.json
_IMAGE_STD = (0.5, 0.5, 0.5)


@dataclass(frozen=True)
class TinyVisionSpec:
    """Shape of the tiny projector.  ``n_embd_text`` must be the text model's ``n_embd``."""

    n_embd_text: int = 256
    n_embd: int = 64
    n_head: int = 2
    n_layer: int = 2
    n_ff: int = 128
    patch_size: int = 16
    image_size: int = 256  # learned position table: (image_size / patch_size)^2 entries, interpolated per image
    seed: int = 0

    def validate(self) -> None:
        require_positive(self, "n_embd_text", "n_embd", "n_head", "n_layer", "n_ff", "patch_size", "image_size")
        if self.n_embd % self.n_head or (self.n_embd // self.n_head) % 4:
            # M-RoPE splits each head into 4 sections of d_head / 4 (qwen3vl.cpp)
            raise ValueError(f"n_embd / n_head must be a multiple of 4, got {self.n_embd}/{self.n_head}")
        if self.image_size % (self.patch_size * SPATIAL_MERGE):
            raise ValueError(f"image_size must be a multiple of {self.patch_size * SPATIAL_MERGE}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")


def _tensors(spec: TinyVisionSpec) -> Tensors:
    """The converter's tensors (numpy shapes; ggml ne is reversed).  Dtypes as the converter's F16 output:
    matrices and the patch convolutions F16; 1-D tensors and the position table F32."""
    e, p, m = spec.n_embd, spec.patch_size, spec.n_embd * SPATIAL_MERGE**2
    t = Tensors(spec.seed)
    # Conv3D (temporal patch 2) split into two Conv2D kernels, summed for a still image
    t.mat("v.patch_embd.weight", (e, 3, p, p))
    t.mat("v.patch_embd.weight.1", (e, 3, p, p))
    t.mat("v.patch_embd.bias", (e,), F32)
    t.mat("v.position_embd.weight", ((spec.image_size // p) ** 2, e), F32)
    for il in range(spec.n_layer):
        b = f"v.blk.{il}."
        t.norm(b + "ln1.weight", e)
        t.mat(b + "ln1.bias", (e,), F32)
        t.mat(b + "attn_qkv.weight", (3 * e, e))
        t.mat(b + "attn_qkv.bias", (3 * e,), F32)
        t.mat(b + "attn_out.weight", (e, e))
        t.mat(b + "attn_out.bias", (e,), F32)
        t.norm(b + "ln2.weight", e)
        t.mat(b + "ln2.bias", (e,), F32)
        t.mat(b + "ffn_up.weight", (spec.n_ff, e))
        t.mat(b + "ffn_up.bias", (spec.n_ff,), F32)
        t.mat(b + "ffn_down.weight", (e, spec.n_ff))
        t.mat(b + "ffn_down.bias", (e,), F32)
    # merger: LayerNorm over n_embd, then 2x2 patches -> (4 n_embd) -> GELU MLP -> n_embd_text
    t.norm("v.post_ln.weight", e)
    t.mat("v.post_ln.bias", (e,), F32)
    t.mat("mm.0.weight", (m, m))
    t.mat("mm.0.bias", (m,), F32)
    t.mat("mm.2.weight", (spec.n_embd_text, m))
    t.mat("mm.2.bias", (spec.n_embd_text,), F32)
    return t


def _write_keys(gguf: Any, w: Any, spec: TinyVisionSpec) -> None:
    w.add_type(gguf.GGUFType.MMPROJ)
    w.add_name("lab-tiny-qwen3vl-mmproj")
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    # MmprojModel.set_gguf_parameters
    w.add_clip_has_vision_encoder(True)
    w.add_vision_projection_dim(spec.n_embd_text)
    w.add_vision_image_size(spec.image_size)
    w.add_vision_patch_size(spec.patch_size)
    w.add_vision_embedding_length(spec.n_embd)
    w.add_vision_feed_forward_length(spec.n_ff)
    w.add_vision_block_count(spec.n_layer)
    w.add_vision_head_count(spec.n_head)
    w.add_vision_image_mean(list(_IMAGE_MEAN))
    w.add_vision_image_std(list(_IMAGE_STD))
    # Qwen3VLVisionModel.set_gguf_parameters
    w.add_clip_projector_type(PROJECTOR_TYPE)
    w.add_vision_use_gelu(True)
    w.add_vision_spatial_merge_size(SPATIAL_MERGE)
    w.add_vision_attention_layernorm_eps(_LN_EPS)
    w.add_vision_is_deepstack_layers([False] * spec.n_layer)


def write_tiny_projector(
    out_path: Path, spec: TinyVisionSpec = TinyVisionSpec(), gguf_py_dir: Path | None = None
) -> Path:
    """Write the projector atomically to ``out_path`` (same spec, same bytes).  Returns ``out_path``."""
    spec.validate()
    out_path = Path(out_path)
    gguf = import_gguf(gguf_py_dir)
    with atomic_gguf(gguf, out_path, "clip") as writer:  # general.architecture = clip (MODEL_ARCH.MMPROJ)
        _write_keys(gguf, writer, spec)
        for name, data in _tensors(spec).items.items():
            writer.add_tensor(name, np.ascontiguousarray(data))
    return out_path
