"""The one console every command prints through.

A table never has a number cut: on a terminal rich fits it to the terminal's width (wrapping cells at spaces);
written to a log, a pipe or CI, where rich would assume 80 columns and end each squeezed number with an
ellipsis, a table is drawn at its natural width instead. Prose keeps the console's width.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


class LabConsole(Console):
    def print(self, *objects: Any, **kwargs: Any) -> None:
        tables = [o for o in objects if isinstance(o, Table)]
        if not tables or self.is_terminal:
            super().print(*objects, **kwargs)
            return
        wide = self.options.update_width(100_000)
        own = self.width  # print(width=) can only narrow: widen the console for this call
        self.width = max(own, *(self.measure(t, options=wide).maximum for t in tables))
        try:
            super().print(*objects, **kwargs)
        finally:
            self.width = own


def lab_console(*, stderr: bool = False, quiet: bool = False) -> Console:
    return LabConsole(stderr=stderr, quiet=quiet)
