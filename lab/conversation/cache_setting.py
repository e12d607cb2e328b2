"""The llama-server flags a prompt cache depends on (the setting `lab trace tune` weighs), and what a model's
saved states hold: a checkpoint keeps what cannot be cut back (a hybrid's recurrent state, a sliding-window
model's window cells), a whole sequence its cells as well."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from lab.core.settings_server import ConversationSettings, ServerSettings
from lab.engine.serverflags import ServerDefaults
from lab.models.hparams import hparams_of

PRESERVE = {True: "--reasoning-preserve", False: "--no-reasoning-preserve"}
Memory = Literal["hybrid", "window", "plain"]  # what the model's sequence memory can cut back


@dataclass(frozen=True)
class CacheSetting:
    """The llama-server flags the prompt cache depends on (llama-server's defaults)."""

    checkpoints: int = 32  # --ctx-checkpoints
    checkpoint_min_step: int = 256  # --checkpoint-min-step
    cache_ram_mib: int = 8192  # --cache-ram (-1 no limit, 0 off)
    cache_reuse: int = 0  # --cache-reuse
    swa_full: bool = False  # --swa-full
    ubatch: int = 512  # --ubatch-size
    batch: int = 2048  # --batch-size
    reasoning_preserve: bool | None = None  # --reasoning-preserve (None: a server without the flag)

    def flags(self) -> list[str]:
        """The flags to paste into a llama-server command."""
        out = [
            "--ctx-checkpoints",
            str(self.checkpoints),
            "--checkpoint-min-step",
            str(self.checkpoint_min_step),
            "--cache-ram",
            str(self.cache_ram_mib),
        ]
        out += ["--cache-reuse", str(self.cache_reuse)] if self.cache_reuse else []
        out += ["--swa-full"] if self.swa_full else []
        out += ["--ubatch-size", str(self.ubatch)] if self.ubatch != 512 else []
        out += [] if self.reasoning_preserve is None else [PRESERVE[self.reasoning_preserve]]
        return out


def todays_setting(
    conversation: ConversationSettings, server: ServerSettings, defaults: ServerDefaults
) -> CacheSetting:
    """Today's server's cache flags: conversation.* where set, else that server's own defaults, over the lab
    server's batch sizes (`--swa-full` and `--[no-]reasoning-preserve` as conversation.* or among either's extra
    flags, the last one said)."""
    c = conversation
    extra = [*server.extra_args, *c.extra_args]
    said = [a == PRESERVE[True] for a in extra if a in PRESERVE.values()]
    preserve = c.reasoning_preserve if c.reasoning_preserve is not None else said[-1] if said else None
    if defaults.reasoning_preserve is None or preserve is None:  # no such flag, or the server's own default
        preserve = defaults.reasoning_preserve
    return CacheSetting(
        checkpoints=defaults.checkpoints if c.checkpoints is None else c.checkpoints,
        checkpoint_min_step=defaults.checkpoint_min_step if c.checkpoint_min_step is None else c.checkpoint_min_step,
        cache_ram_mib=defaults.cache_ram_mib if c.cache_ram_mib is None else c.cache_ram_mib,
        cache_reuse=c.cache_reuse,
        swa_full=c.swa_full or "--swa-full" in extra,
        ubatch=server.ubatch_size,
        batch=server.batch_size,
        reasoning_preserve=preserve,
    )


@dataclass(frozen=True)
class StateSizes:
    """Bytes of a model's saved states (headers aside): a checkpoint holding w window cells, and a whole sequence
    of n cells with w window cells (a saved window keeps only the cells its last position still reaches)."""

    checkpoint: Callable[[int], int]  # w -> bytes
    whole: Callable[[int, int], int]  # n, w -> bytes


def memory_of(meta: dict[str, Any]) -> Memory:
    """What a model's sequence memory cannot cut back: a recurrent state, a sliding window, or nothing."""
    h = hparams_of(meta)
    return "hybrid" if h.count("recurrent") else "window" if h.count("sliding") and h.window else "plain"
