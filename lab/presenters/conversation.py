"""The conversation's printers: each step in tokens (prompt, shared with the step before, new, divergence,
reply)."""

from __future__ import annotations

from rich.table import Table

from lab.conversation.derive import StepTokens
from lab.core.schemas import ConversationStepResult, ConversationTaskResult, cell


def tokens_table(tasks: dict[str, list[StepTokens]]) -> Table:
    t = Table(title="a conversation in tokens: what any prefix cache could reuse (common) and what is new")
    for c in ("task", "step", "prompt", "common (L)", "new", "diverges at", "images", "reply"):
        t.add_column(c, justify="left" if c in ("task", "diverges at") else "right")
    for task, steps in tasks.items():
        for s in steps:
            where = "-" if s.step == steps[0].step else "extends" if not s.diverged else f"message {s.at_message}"
            t.add_row(task, str(s.step), str(s.cells), str(s.common), str(s.new), where, str(s.images), str(s.n_out))
    t.caption = "cells: text tokens plus each image's projector grid and markers; reply: recorded completion tokens"
    return t


def replay_tables(steps: list[ConversationStepResult], tasks: list[ConversationTaskResult]) -> list[Table]:
    """Per step the three arms' prompt ms [95% interval], what today's server reused and restored, and whether
    optimum <= today <= no cache holds; per task the three totals and the share of the saving realised."""
    t = Table(title="a conversation step by step: prompt ms [95% interval] per arm")
    for c in (
        "task",
        "step",
        "prompt",
        "L",
        "new",
        "diverges",
        "no cache",
        "today",
        "optimum",
        "reused",
        "restores",
        "order",
        "reply",
        "decode ms/token",
    ):
        t.add_column(c, justify="left" if c in ("task", "diverges", "restores", "order") else "right")
    for s in steps:
        kinds = (("ckpt", s.checkpoint_restores), ("ram", s.ram_cache_restores), ("full", s.full_reprocesses))
        restores = ", ".join(x for x, n in kinds if n) or "-"
        if s.window_departure:  # a sliding-window model's step that departs beyond today's window cache
            restores += " (window)"
        t.add_row(
            s.task_id,
            str(s.step),
            str(s.prompt_cells),
            str(s.common),
            str(s.new),
            "-" if s.diverged_at is None else f"msg {s.diverged_at}",
            cell(s.no_cache_ms, 1),
            cell(s.today_ms, 1),
            cell(s.optimum_ms, 1),
            "-" if s.today_cache_n is None else str(s.today_cache_n),
            restores,
            s.order,
            str(s.reply_tokens),
            cell(s.decode_ms_per_token, 2),
        )
    t.caption = (
        "reused: today's server's cache_n (first rep); restores: a context checkpoint (ckpt), a RAM-cache prompt "
        "(ram) or the whole prompt re-processed (full); (window): the step departs beyond what today's window "
        "cache keeps (a sliding-window model); order: optimum <= today <= no cache within the intervals; "
        "decode: the reply generated at depth L + new after the optimum's prefill"
    )
    totals = Table(
        title="per task: prefill seconds per arm [95% interval], the share of the optimum's saving that today's "
        "server realises, the replies' decode and the agent's tool seconds (a step costs prefill + decode + tool)"
    )
    for c in ("task", "steps", "no cache", "today", "optimum", "realised", "decode", "tool"):
        totals.add_column(c, justify="left" if c == "task" else "right")
    for k in tasks:
        totals.add_row(
            k.task_id,
            str(k.n_steps),
            cell(k.no_cache_s, 2),
            cell(k.today_s, 2),
            cell(k.optimum_s, 2),
            cell(k.realised, share=True),
            cell(k.decode_s, 2),
            "-" if k.tool_s is None else f"{k.tool_s:.2f}",
        )
    return [t, totals]
