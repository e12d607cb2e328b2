"""What today's server keeps of a sliding-window model's window, and when a step departs beyond it.

llama.cpp gives a model's sliding-window layers a cache of their own, `GGML_PAD(n_swa + n_ubatch, 256)` cells
(the whole context with `--swa-full`), and overwrites its oldest cells as new tokens arrive. Before it reuses a
cached prefix, llama-server (at the pin) re-processes the whole prompt unless the window cache still holds a
position before `common - n_swa` (the first one the next token's window would not need); a cache whose oldest
position is 0 counts as lacking it too; it then restores a context checkpoint from before the departure if it
has one. `--swa-full` sets the server's own n_swa to 0: any cached prefix is reused. So a step needs a
checkpoint, or re-processes in full, when it departs from the previous step's prompt and reply further back
than the window cache reaches, and also whenever the shared prefix is not longer than the window.
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

    def departs(self, common: int, previous_end: int) -> bool:
        """Whether a step that shares `common` tokens with a cache whose last step ended at `previous_end`
        (prompt and reply) departs beyond what the stock server's window cache keeps (it then needs a context
        checkpoint, or re-processes the whole prompt)."""
        if self.full:
            return common == 0
        oldest = max(0, previous_end - self.cells)
        return oldest >= common - self.n_swa
