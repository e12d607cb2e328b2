"""The one console every command prints through.

A table never has a number cut. Written to a log, a pipe or CI, where rich would assume 80 columns and end each
squeezed number with an ellipsis, a table is drawn at its natural width. On a terminal too narrow for it, a
table is stacked: drawn as several tables of consecutive columns that each fit, every part repeating the row's
key columns (`key_columns`, the first two by default: L and new, task and step). Prose keeps the console's width.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from lab.core.errors import plain

KEY_COLUMNS = 2


def shown(text: object) -> str:
    """Such a string in rich output (a table cell, a printed line): `plain`, and its brackets escaped, so that
    `[/x]` in a host's name is its text, not markup (nor a MarkupError)."""
    return escape(plain(text))


def key_columns(table: Table, n: int) -> Table:
    """Mark how many leading columns name a row (repeated in every part of a stacked table)."""
    table.key_columns = n  # type: ignore[attr-defined]
    return table


class LabConsole(Console):
    def print(self, *objects: Any, **kwargs: Any) -> None:
        tables = [o for o in objects if isinstance(o, Table)]
        if not tables:
            super().print(*objects, **kwargs)
            return
        if self.is_terminal:
            super().print(
                *(part for o in objects for part in (self.stacked(o) if isinstance(o, Table) else [o])), **kwargs
            )
            return
        wide = self.options.update_width(100_000)
        own = self.width  # print(width=) can only narrow: widen the console for this call
        self.width = max(own, *(self.measure(t, options=wide).maximum for t in tables))
        try:
            super().print(*objects, **kwargs)
        finally:
            self.width = own

    def natural_width(self, table: Table) -> int:
        return self.measure(table, options=self.options.update_width(100_000)).maximum

    def stacked(self, table: Table) -> list[Table]:
        """`table` as parts of consecutive columns that each fit the console (itself when it fits)."""
        if self.natural_width(table) <= self.width or len(table.columns) < 3:
            return [table]
        keys = min(getattr(table, "key_columns", KEY_COLUMNS), len(table.columns) - 1)
        rest = list(range(keys, len(table.columns)))
        groups: list[list[int]] = []
        for i in rest:
            trial = [*groups[-1], i] if groups else [i]
            if groups and self.natural_width(part_of(table, list(range(keys)) + trial)) <= self.width:
                groups[-1] = trial
            else:
                groups.append([i])
        parts = [part_of(table, list(range(keys)) + g) for g in groups]
        parts[0].title, parts[-1].caption = table.title, table.caption
        return parts


def part_of(table: Table, columns: list[int]) -> Table:
    """A table of some of `table`'s columns, its rows' cells as they are."""
    part = Table(show_lines=table.show_lines, box=table.box, header_style=table.header_style)
    for i in columns:
        col = table.columns[i]
        part.add_column(col.header, justify=col.justify, style=col.style, no_wrap=col.no_wrap)
    cells = [list(table.columns[i].cells) for i in columns]
    for row in zip(*cells, strict=True):
        part.add_row(*row)
    return part


def lab_console(*, stderr: bool = False, quiet: bool = False) -> Console:
    return LabConsole(stderr=stderr, quiet=quiet)


def progress_bar(console: Console) -> Progress:
    """A run's progress: what it measures now, a bar, done of all, and the time so far."""
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )
