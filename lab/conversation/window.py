"""A sliding-window model's window cache under today's server settings.

llama.cpp gives a model's sliding-window layers a cache of their own, `GGML_PAD(n_swa + n_ubatch, 256)` cells
(the whole context with `--swa-full`), and overwrites its oldest cells as new tokens arrive; what that means for
a step's reuse is the policy model's (lab.conversation.policy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.models.hparams import HparamsError, hparams_of

SWA_PAD = 256  # llama.cpp pads the window cache to 256 cells


@dataclass(frozen=True)
class WindowCache:
    n_swa: int  # the model's window (tokens)
    cells: int  # the window cache's size (cells)
    full: bool  # --swa-full: the window cache is the whole context, and the server's reuse check ignores n_swa

    @classmethod
    def of(cls, meta: dict[str, Any], ubatch: int, ctx: int, full: bool) -> WindowCache | None:
        """The window cache of a model (its GGUF metadata) under these server settings; None without one."""
        try:
            h = hparams_of(meta)
        except HparamsError:
            return None
        if not h.count("sliding") or not h.window:
            return None
        pad = -(-min(ctx, h.window + ubatch) // SWA_PAD) * SWA_PAD
        return cls(h.window, ctx if full else pad, full)
