"""One error base for everything a user can cause: a bad option or input file, a missing model, a failed
build, a crashed server, a bad row. The CLI and the fab tasks print such an error as one red line (its
details, such as a log tail, below it) and exit 1, or 2 for a bad option. Any other exception is a bug in
the lab and keeps its traceback."""

from __future__ import annotations

import re
import sys

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what would drive a terminal (newline and tab stay)
CONTROL_IN_A_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # and what would break a line


class LabError(Exception):
    """An error a user can cause and fix; `str(e)` says what went wrong and, where it can, what to do."""

    exit_code = 1

    @property
    def headline(self) -> str:
        """The first line (what the CLI prints in red)."""
        text = str(self).strip() or type(self).__name__
        return text.splitlines()[0]

    @property
    def details(self) -> str:
        """The lines after the first (a log tail, a list of offending nodes), or ''."""
        return "\n".join(str(self).strip().splitlines()[1:])


class UsageError(LabError):
    """A bad command-line option or setting (exit 2, like click's own usage errors)."""

    exit_code = 2


class RunError(LabError):
    """A run folder or one of its files that cannot be used as it is (a bad row, a folder that is no run)."""


def validation_line(e: Exception, root: str = "row", limit: int = 3) -> str:
    """What is wrong with an input, in one line: a pydantic error as `field.path: message; ...` (its first
    `limit` entries; `root` names an error of the whole input), any other error as it says."""
    from pydantic import ValidationError

    if not isinstance(e, ValidationError):
        return str(e)
    return "; ".join(f"{'.'.join(map(str, x['loc'])) or root}: {x['msg']}" for x in e.errors()[:limit])


def warn(line: str) -> None:
    """Something a user should know that stops nothing (a skipped run, an exchange not recorded): one line on
    stderr, its control characters (a newline, an escape sequence in a folder's name) written as escapes."""
    print(f"warning: {plain(line, one_line=True)}", file=sys.stderr, flush=True)


def plain(text: object, one_line: bool = False) -> str:
    """A string from a run folder, a host or a file as a terminal may show it: its control characters written as
    escapes (`\\x1b`), so an escape sequence in a host's name is shown and never sent; with `one_line` (a warning),
    its newlines and tabs too."""
    return (CONTROL_IN_A_LINE if one_line else CONTROL).sub(lambda m: repr(m.group())[1:-1], str(text))
