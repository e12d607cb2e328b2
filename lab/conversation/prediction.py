"""Today's server's prompt cache predicted for a conversation: the policy model (lab.conversation.policy) of a
model, a setting and the server's version (lab.conversation.rules), stepped through each step as today's replay
sends it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lab.conversation.cache_setting import CacheSetting, StateSizes, memory_of
from lab.conversation.derive import StepTokens
from lab.conversation.policy import PolicyModel, Request, Reuse
from lab.conversation.rules import PIN, Rules
from lab.conversation.window import WindowCache
from lab.core.errors import UsageError
from lab.models.memshape import memory_shape


def policy_for(
    meta: dict[str, Any], setting: CacheSetting, ctx: int, image_pos: dict[str, int], rules: Rules = PIN
) -> PolicyModel:
    """Today's server (of the version whose rules these are) for a model (its GGUF metadata), empty, under one
    setting; state sizes predicted from the model's shape (lab.models.memshape)."""
    shape = memory_shape(meta)
    if shape is None:
        raise UsageError(f"{meta.get('general.architecture')}: its memory layout is not modelled")
    memory = memory_of(meta)
    window = WindowCache.of(meta, setting.ubatch, ctx, setting.swa_full)

    window_cell = shape.window_kv_bytes_per_cell + shape.cell_meta_bytes
    stock = WindowCache.of(meta, setting.ubatch, ctx, False)
    extra = (ctx - stock.cells) * shape.window_kv_bytes_per_cell if window and stock and setting.swa_full else 0

    def checkpoint(w: int) -> int:
        return shape.recurrent_bytes + w * window_cell

    def whole(n: int, w: int) -> int:
        return shape.recurrent_bytes + n * shape.bytes_per_cell + w * window_cell

    return PolicyModel(
        setting,
        memory,
        StateSizes(checkpoint, whole),
        ctx,
        rules,
        n_swa=window.n_swa if window else 0,
        window_cells=window.cells if window else 0,
        window_extra=extra,
        image_pos=dict(image_pos),
    )


@dataclass(frozen=True)
class Predicted:
    """A step of today's replay as the model predicts it: its request's reuse, and what the server logs of
    its memory over the step (the RAM cache when updated, a checkpoint made) and holds after it."""

    reuse: Reuse
    ram_logged: int | None
    checkpoint_made: int | None
    held_bytes: int


def predict(steps: Sequence[StepTokens], model: PolicyModel) -> list[Predicted]:
    """A conversation's steps as today's replay sends them: each step's chat request, then its reply held in the
    slot by a raw completion of the prompt and reply (lab.conversation.today)."""
    out = []
    for st in steps:
        model.ram_updated, model.made = None, None
        reuse = model.step(Request(st.prompt, st.before_user, user_starts=st.user_starts))
        after = model.step(Request(st.held or st.prompt))
        out.append(Predicted(reuse, model.ram_updated, model.made, after.held_bytes))
    return out


def predict_conversation(
    tasks: dict[str, list[StepTokens]],
    meta: dict[str, Any],
    setting: CacheSetting,
    ctx: int,
    image_pos: dict[str, int],
    rules: Rules = PIN,
) -> dict[tuple[str, int], Predicted]:
    """Each task's steps as today's replay sends them, a fresh server per task (`ctx` cells), by (task, step)."""
    return {
        (task, st.step): p
        for task, steps in tasks.items()
        for st, p in zip(steps, predict(steps, policy_for(meta, setting, ctx, image_pos, rules)), strict=True)
    }
