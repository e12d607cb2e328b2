"""How many tokens and positions a screenshot becomes, from the loaded projector's own hyperparameters.

Qwen2-VL, Qwen2.5-VL and Qwen3-VL projectors (mtmd's `calc_size_preserved_ratio`, transformers'
smart_resize): each side is rounded to a multiple of `align = patch_size * merge` (at least one), then the
image is rescaled into the token budget [min_tokens, max_tokens] if needed; one token per merged block.
mtmd wraps the image in <|vision_start|> ... <|vision_end|> (one token each), and M-RoPE advances the
positions by max(nx, ny), not by the token count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from lab.core.errors import LabError
from lab.core.gguf_io import read_gguf_metadata

IMAGE_MARKERS = 2  # <|vision_start|>, <|vision_end|>
# clip.cpp's token budget for these projector types (set_limit_image_tokens(8, 4096)) and its default merge
QWEN_VL = {"qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger"}


class ProjectorError(LabError):
    pass


def _cpp_round(x: float) -> int:
    """std::round: halves away from zero (Python's round() rounds halves to even)."""
    return math.floor(x + 0.5)


@dataclass(frozen=True)
class ImageGeometry:
    patch_size: int = 16
    merge: int = 2
    min_tokens: int = 8
    max_tokens: int = 4096

    @classmethod
    def of_projector(cls, path: Path) -> ImageGeometry:
        """The geometry the server will use with this projector (`--mmproj`), read from its GGUF metadata."""
        try:
            md = read_gguf_metadata(path)
        except (OSError, ValueError) as e:
            raise ProjectorError(f"vision projector {path}: {e}") from e
        kind = md.get("clip.projector_type")
        if kind not in QWEN_VL:
            raise ProjectorError(
                f"vision projector {path}: image steps know the {', '.join(sorted(QWEN_VL))} geometry, not {kind!r}"
            )
        return cls(patch_size=int(md["clip.vision.patch_size"]), merge=int(md.get("clip.vision.spatial_merge_size", 2)))

    def grid(self, width: int, height: int) -> tuple[int, int]:
        """(nx, ny) image tokens of a width x height image."""
        align = self.patch_size * self.merge
        min_pixels, max_pixels = self.min_tokens * align * align, self.max_tokens * align * align
        h_bar = max(align, _cpp_round(height / align) * align)
        w_bar = max(align, _cpp_round(width / align) * align)
        if h_bar * w_bar > max_pixels:
            beta = math.sqrt(height * width / max_pixels)
            h_bar = max(align, math.floor(height / beta / align) * align)
            w_bar = max(align, math.floor(width / beta / align) * align)
        elif h_bar * w_bar < min_pixels:
            beta = math.sqrt(min_pixels / (height * width))
            h_bar = math.ceil(height * beta / align) * align
            w_bar = math.ceil(width * beta / align) * align
        return w_bar // align, h_bar // align

    def tokens(self, width: int, height: int) -> tuple[int, int]:
        """(prompt tokens, positions) an image adds: nx*ny + the two markers, and max(nx, ny) positions."""
        nx, ny = self.grid(width, height)
        return nx * ny + IMAGE_MARKERS, max(nx, ny)


#: The tiny projector's geometry (Qwen3-VL's defaults): for synthetic traces, written before any projector loads.
TINY_GEOMETRY = ImageGeometry()
