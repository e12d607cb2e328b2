"""The conversation's printers: each step in tokens (prompt, shared with the step before, new, divergence,
reply)."""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table

from lab.conversation.derive import StepTokens
from lab.core.console import key_columns
from lab.core.schemas import ConversationCauseResult, ConversationStepResult, ConversationTaskResult, cell


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


def replay_tables(
    steps: list[ConversationStepResult],
    tasks: list[ConversationTaskResult],
    causes: list[ConversationCauseResult] | None = None,
) -> list[Table]:
    """Per step the three arms' prompt ms [95% interval], what today's server reused and restored, and whether
    optimum <= today <= no cache holds; per task the three totals and the share of the saving realised."""
    t = key_columns(Table(title="a conversation step by step: prompt ms [95% interval] per arm"), 2)
    for c, _ in STEP_COLUMNS:
        t.add_column(c, justify="left" if c in LEFT else "right")
    for s in steps:
        t.add_row(*(f(s) for _, f in STEP_COLUMNS))
    t.caption = (
        "reused: today's server's cache_n (first rep; `!= n`: the policy model predicted n); restores: a context "
        "checkpoint (ckpt), a RAM-cache prompt "
        "(ram) or the whole prompt re-processed (full); (window): the step departs beyond what today's window "
        "cache keeps (a sliding-window model); order: optimum <= today <= no cache within the intervals; "
        "decode: the reply generated at depth L + new after the optimum's prefill"
    )
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
    return [t, totals, *([causes_table(causes)] if causes else [])]


def causes_table(causes: list[ConversationCauseResult]) -> Table:
    t = Table(title="why prompts departed: each cause's steps, their prefill seconds per arm [95% interval]")
    for name in ("cause", "steps", "no cache", "today", "optimum", "today beyond the optimum"):
        t.add_column(name, justify="left" if name == "cause" else "right")
    for c in causes:
        arms = (cell(c.no_cache_s, 2), cell(c.today_s, 2), cell(c.optimum_s, 2), cell(c.today_extra_s, 2))
        t.add_row(c.cause, str(c.departures), *arms)
    t.caption = "today beyond the optimum: what the departures cost today's server over a perfect cache, paired by rep"
    return t
