"""`lab trace tune`'s grid: every cache setting weighed, each through the policy model of the server's version (its
reuse, the memory its caches hold, the prefill seconds the host's rates give), the front, and the candidates."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

from lab.conversation.cache_setting import CacheSetting
from lab.conversation.derive import StepTokens
from lab.conversation.prediction import predict_conversation
from lab.conversation.rules import Rules
from lab.measure.plan import Rates

CHECKPOINTS = (0, 8, 32, 128)
MIN_STEPS = (0, 64, 256, 1024)


def setting_key(s: CacheSetting) -> str:
    key = f"ckpt{s.checkpoints}-step{s.checkpoint_min_step}-ram{s.cache_ram_mib}"
    return key + ("-swafull" if s.swa_full else "") + ("-nopreserve" if s.reasoning_preserve is False else "")


def grid(base: CacheSetting, window: bool, preserve: bool = False) -> list[CacheSetting]:
    """Every setting weighed: the defaults, and checkpoints x spacing (the defaults' among them) x RAM cache (off,
    or the defaults' size) x --swa-full for a sliding-window model x --reasoning-preserve on or off where it
    changes the conversation's prompts (`preserve`)."""
    rams = sorted({0, base.cache_ram_mib if base.cache_ram_mib else 8192})
    steps = sorted({*MIN_STEPS, base.checkpoint_min_step})
    fulls = (False, True) if window else (base.swa_full,)
    keeps = (True, False) if preserve and base.reasoning_preserve is not None else (base.reasoning_preserve,)
    out = [base]
    for ck, step, ram, full, keep in itertools.product(CHECKPOINTS, steps, rams, fulls, keeps):
        s = replace(
            base, checkpoints=ck, checkpoint_min_step=step, cache_ram_mib=ram, swa_full=full, reasoning_preserve=keep
        )
        if s not in out:
            out.append(s)
    return out


def renders_differently(a: dict[str, list[StepTokens]], b: dict[str, list[StepTokens]] | None) -> bool:
    """Whether some step's prompt differs between two renderings of the conversation."""
    return b is not None and any(x.prompt != y.prompt for k in a for x, y in zip(a[k], b[k], strict=True))


@dataclass
class Option:
    """A setting as the policy model predicts it for the conversation."""

    setting: CacheSetting
    prefill_s: float
    peak_bytes: int
    reused: int
    cache_n: dict[tuple[str, int], int]
    tasks: dict[str, list[StepTokens]] = field(repr=False, default_factory=dict)  # as its server renders them

    @property
    def key(self) -> str:
        return setting_key(self.setting)


def predict_option(
    tasks: dict[str, list[StepTokens]],
    meta: dict[str, Any],
    setting: CacheSetting,
    ctx: int,
    image_pos: dict[str, int],
    rates: Rates,
    rules: Rules,
) -> Option:
    """One setting over the conversation: its prefill seconds from the rates (each step prefills from its reuse to
    its end), the most memory its caches hold, and each step's reuse."""
    predicted = predict_conversation(tasks, meta, setting, ctx, image_pos, rules)
    cells_of = {(st.task_id, st.step): st.cells for steps in tasks.values() for st in steps}
    return Option(
        setting,
        sum(rates.ms(p.reuse.cache_n, cells_of[k]) for k, p in predicted.items()) / 1e3,
        max((max(p.held_bytes, p.reuse.held_bytes) for p in predicted.values()), default=0),
        sum(p.reuse.cache_n for p in predicted.values()),
        {k: p.reuse.cache_n for k, p in predicted.items()},
        tasks,
    )


def front(options: list[Option]) -> list[Option]:
    """The settings no other beats in both predicted seconds and peak memory; of those predicting the same
    outcome, the first (the grid puts the defaults first)."""
    out: list[Option] = []
    for o in options:
        beaten = any(
            (p.prefill_s <= o.prefill_s and p.peak_bytes <= o.peak_bytes)
            and (p.prefill_s < o.prefill_s or p.peak_bytes < o.peak_bytes)
            for p in options
        )
        same = any(p.cache_n == o.cache_n and p.peak_bytes == o.peak_bytes for p in out)
        if not beaten and not same:
            out.append(o)
    return sorted(out, key=lambda o: o.prefill_s)


def pick(on_front: list[Option], defaults: Option, k: int) -> list[Option]:
    """The k fastest settings on the front (where the recommendation will be), none that predicts what the
    defaults do with as much memory (one that reuses the same holding less may be recommended as the same)."""
    return [o for o in on_front if o.cache_n != defaults.cache_n or o.peak_bytes < defaults.peak_bytes][:k]
