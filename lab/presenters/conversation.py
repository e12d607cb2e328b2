"""The conversation's printers: each step in tokens (prompt, shared with the step before, new, divergence,
reply)."""

from __future__ import annotations

from rich.table import Table

from lab.conversation.derive import StepTokens


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
