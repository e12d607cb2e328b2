"""The conversation's printers: each step in tokens (prompt, shared with the step before, new, divergence,
reply)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.table import Table

from lab.conversation.derive import StepTokens
from lab.core.console import key_columns, shown
from lab.core.schemas import (
    ConversationCauseResult,
    ConversationStepResult,
    ConversationTaskResult,
    Interval,
    cell,
)
from lab.presenters.sweep import ms_interval


def tokens_table(tasks: dict[str, list[StepTokens]]) -> Table:
    t = Table(title="a conversation in tokens: what any prefix cache could reuse (common) and what is new")
    preserve = any(s.common_unpreserved is not None for steps in tasks.values() for s in steps)
    columns = ["task", "step", "prompt", "common (L)", "new", "diverges at", "why", "images", "reply"]
    for c in [*columns, *(["--no-reasoning-preserve"] if preserve else [])]:
        t.add_column(c, justify="left" if c in ("task", "diverges at", "why") else "right")
    for task, steps in tasks.items():
        for s in steps:
            where = "-" if s.step == steps[0].step else "extends" if not s.diverged else f"message {s.at_message}"
            row = [str(s.cells), str(s.common), str(s.new), where, s.cause or "-", str(s.images), str(s.n_out)]
            t.add_row(task, str(s.step), *row, *([s.preserve_effect] if preserve else []))
    t.caption = (
        "cells: text tokens plus each image's projector grid and markers; why: the cause of the departure, read from "
        "the messages; reply: recorded completion tokens"
        + (
            "; --no-reasoning-preserve: what the step shares without it (this server keeps earlier turns' reasoning "
            "by default), where that differs"
            if preserve
            else ""
        )
    )
    return t


def _reused(s: ConversationStepResult) -> str:
    """Today's cache_n, and the policy model's prediction where it differs (`!= n`)."""
    if s.today_cache_n is None:
        return "-"
    off = s.predicted_cache_n is not None and s.predicted_cache_n != s.today_cache_n
    return f"{s.today_cache_n} != {s.predicted_cache_n}" if off else str(s.today_cache_n)


def _restores(s: ConversationStepResult) -> str:
    kinds = (("ckpt", s.checkpoint_restores), ("ram", s.ram_cache_restores), ("full", s.full_reprocesses))
    restores = ", ".join(x for x, n in kinds if n) or "-"
    return restores + (" (window)" if s.window_departure else "")  # departs beyond today's window cache


STEP_COLUMNS: tuple[tuple[str, Callable[[ConversationStepResult], str]], ...] = (  # task and step name a row
    ("task", lambda s: s.task_id),
    ("step", lambda s: str(s.step)),
    ("prompt", lambda s: str(s.prompt_cells)),
    ("L", lambda s: str(s.common)),
    ("new", lambda s: str(s.new)),
    ("diverges", lambda s: "-" if s.diverged_at is None else f"msg {s.diverged_at}: {s.cause or '?'}"),
    ("no cache", lambda s: cell(s.no_cache_ms, 1)),
    ("today", lambda s: cell(s.today_ms, 1)),
    ("optimum", lambda s: cell(s.optimum_ms, 1)),
    ("reused", _reused),
    ("restores", _restores),
    ("order", lambda s: s.order),
    ("reply", lambda s: str(s.reply_tokens)),
    ("decode ms/token", lambda s: cell(s.decode_ms_per_token, 2)),
)
TASK_COLUMNS: tuple[tuple[str, Callable[[ConversationTaskResult], str]], ...] = (
    ("task", lambda k: k.task_id),
    ("steps", lambda k: str(k.n_steps)),
    ("no cache", lambda k: cell(k.no_cache_s, 2)),
    ("today", lambda k: cell(k.today_s, 2)),
    ("optimum", lambda k: cell(k.optimum_s, 2)),
    ("realised", lambda k: cell(k.realised, share=True)),
    ("decode", lambda k: cell(k.decode_s, 2)),
    ("tool", lambda k: "-" if k.tool_s is None else f"{k.tool_s:.2f}"),
    ("opt_wall", lambda k: cell(k.opt_wall_s, 2)),
)
LEFT = ("task", "diverges", "restores", "order")
STEP_CAPTION = (
    "reused: today's server's cache_n (first rep; `!= n`: the policy model predicted n); restores: a context "
    "checkpoint (ckpt), a RAM-cache prompt (ram) or the whole prompt re-processed (full); (window): the step "
    "departs beyond what today's window cache keeps (a sliding-window model); order: optimum <= today <= no cache "
    "within the intervals"
)
ARM_COLUMNS: tuple[tuple[str, Callable[[ConversationStepResult], str]], ...] = (  # a task's steps, its title names it
    ("step", lambda s: str(s.step)),
    ("L", lambda s: str(s.common)),
    ("new", lambda s: str(s.new)),
    ("no cache", lambda s: ms_interval(s.no_cache_ms)),
    ("today", lambda s: ms_interval(s.today_ms)),
    ("optimum", lambda s: ms_interval(s.optimum_ms)),
)
CHECK_COLUMNS: tuple[tuple[str, Callable[[ConversationStepResult], str]], ...] = (
    ("step", lambda s: str(s.step)),
    ("diverges", lambda s: "-" if s.diverged_at is None else f"msg {s.diverged_at}: {s.cause or '?'}"),
    ("reused", _reused),
    ("restores", _restores),
    ("order", lambda s: s.order),
)
TASK_ANSWER: tuple[tuple[str, Callable[[ConversationTaskResult], str]], ...] = (
    ("task", lambda k: shown(k.task_id)),
    ("steps", lambda k: str(k.n_steps)),
    ("no cache", lambda k: ms_interval(k.no_cache_s)),
    ("today", lambda k: ms_interval(k.today_s)),
    ("optimum", lambda k: ms_interval(k.optimum_s)),
)
TASK_CHECKS = ("task", "realised", "decode", "tool")  # tool: the trace's recorded seconds (no interval)
REALISED_TITLE = (
    "per task: the share of the optimum's saving that today's server realises [95% interval]; beside the prefill, "
    "the replies' decode and the agent's tool seconds (a step costs prefill + decode + tool)"
)


def replay_tables(
    steps: list[ConversationStepResult],
    tasks: list[ConversationTaskResult],
    causes: list[ConversationCauseResult] | None = None,
    wide: bool = False,
) -> list[Table]:
    """Per task, each step's three arms' prompt ms [95% interval], then what today's server reused and restored
    and whether optimum <= today <= no cache holds; the three totals per task, then the share of the saving
    realised; the causes (`wide`: every column in one table each, as stored)."""
    if wide:
        return wide_replay_tables(steps, tasks, causes)
    out = []
    for task in dict.fromkeys(s.task_id for s in steps):
        mine = [s for s in steps if s.task_id == task]
        out += [
            _columns(f"{shown(task)}: prompt ms per arm [95% interval]", ARM_COLUMNS, mine, 1),
            _columns(f"{shown(task)}: today's server per step", CHECK_COLUMNS, mine, 1, STEP_CAPTION),
        ]
    head = "per task: prefill seconds per arm [95% interval]"
    out.append(_columns(head, TASK_ANSWER, tasks, 1))
    out.append(_columns(REALISED_TITLE, [c for c in TASK_COLUMNS if c[0] in TASK_CHECKS], tasks, 1))
    return [*out, *([causes_table(causes)] if causes else [])]


def _columns(
    title: str, columns: Sequence[tuple[str, Callable[[Any], str]]], rows: Sequence[Any], keys: int, caption: str = ""
) -> Table:
    t = key_columns(Table(title=title, caption=caption or None), keys)
    for c, _ in columns:
        t.add_column(c, justify="left" if c in LEFT else "right")
    for r in rows:
        t.add_row(*(f(r) for _, f in columns))
    return t


def wide_replay_tables(
    steps: list[ConversationStepResult],
    tasks: list[ConversationTaskResult],
    causes: list[ConversationCauseResult] | None = None,
) -> list[Table]:
    """Every column: per step the three arms, reuse, restores, order and the reply; per task the totals, the
    share realised, decode, tool and opt_wall."""
    t = key_columns(Table(title="a conversation step by step: prompt ms [95% interval] per arm"), 2)
    for c, _ in STEP_COLUMNS:
        t.add_column(c, justify="left" if c in LEFT else "right")
    for s in steps:
        t.add_row(*(f(s) for _, f in STEP_COLUMNS))
    t.caption = STEP_CAPTION + "; decode: the reply generated at depth L + new after the optimum's prefill"
    totals = key_columns(
        Table(
            title="per task: prefill seconds per arm [95% interval], the share of the optimum's saving that today's "
            "server realises, the replies' decode and the agent's tool seconds (a step costs prefill + decode + "
            "tool); a trace of step shapes: opt_wall = the optimum + its recorded decode and exec seconds"
        ),
        1,
    )
    for c, _ in TASK_COLUMNS:
        totals.add_column(c, justify="left" if c == "task" else "right")
    for k in tasks:
        totals.add_row(*(f(k) for _, f in TASK_COLUMNS))
    return [t, totals, *([causes_table(causes, wide=True)] if causes else [])]


def causes_table(causes: list[ConversationCauseResult], wide: bool = False) -> Table:
    """Each cause's steps and their prefill seconds per arm (`wide`: no cache too)."""
    t = Table(title="why prompts departed: each cause's steps, their prefill seconds per arm [95% interval]")
    names = ("cause", "steps", *(["no cache"] if wide else []), "today", "optimum", "today beyond the optimum")
    for name in names:
        t.add_column(name, justify="left" if name == "cause" else "right")
    for c in causes:
        arms = (*([_s(c.no_cache_s)] if wide else []), _s(c.today_s), _s(c.optimum_s), _s(c.today_extra_s))
        t.add_row(shown(c.cause), str(c.departures), *arms)
    t.caption = "today beyond the optimum: what the departures cost today's server over a perfect cache, paired by rep"
    return t


def _s(iv: Interval | None) -> str:
    return ms_interval(iv)
