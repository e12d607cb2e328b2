"""The one console: a table is never cut, on an 80-column terminal (stacked into parts that fit, each repeating
the key columns) or in a log (drawn at its natural width)."""

from __future__ import annotations

import io

import pytest
from rich.table import Table

from lab.core.console import LabConsole, key_columns

pytestmark = pytest.mark.fast

CELLS = ["163.4 [160.1, 170.9]", "+1.2% [-0.2%, +2.7%] agree", "1634.2 [1600.1, 1700.9]", "0.81 [0.80, 0.83]"]


def wide_table(keys: int = 2) -> Table:
    t = key_columns(Table(title="wide"), keys)
    for c in ("L", "new", *(f"col {i}" for i in range(8))):
        t.add_column(c, justify="right")
    for L in (512, 4096):
        t.add_row(str(L), "64", *(CELLS[i % len(CELLS)] for i in range(8)))
    return t


def printed(terminal: bool, width: int, table: Table) -> str:
    buf = io.StringIO()
    LabConsole(file=buf, force_terminal=terminal, width=width, color_system=None).print(table)
    return buf.getvalue()


@pytest.mark.parametrize("terminal", [True, False])
def test_a_wide_table_is_never_cut(terminal: bool) -> None:
    out = printed(terminal, 80, wide_table())
    assert "…" not in out
    for cell in CELLS:
        assert cell in out  # every number whole, on one line
    widest = max(len(line) for line in out.splitlines())
    if terminal:  # stacked: every part fits, and every part names its rows
        assert widest <= 80, out
        headers = [line for line in out.splitlines() if "col " in line]
        assert len(headers) > 1 and all(" L " in h and " new " in h for h in headers), out
    else:  # a log: one table at its natural width
        assert widest > 80 and sum("col 0" in line for line in out.splitlines()) == 1


def test_a_table_that_fits_is_drawn_as_it_is() -> None:
    t = Table()
    t.add_column("L")
    t.add_column("ms")
    t.add_row("512", "1.0")
    assert printed(True, 80, t) == printed(False, 80, t)


def test_a_string_from_a_folder_is_shown_as_text() -> None:
    """Markup in a host's name is its text, not a style (nor a MarkupError); an escape sequence is shown, not
    sent to the terminal."""
    from lab.core.console import shown

    t = Table("host")
    t.add_row(shown("nuc[/x][bold red]\x1b[2J\x07\x9b"))
    out = printed(True, 80, t)
    assert "nuc[/x][bold red]\\x1b[2J\\x07\\x9b" in out and "\x1b" not in out and "\x07" not in out


def test_a_warning_and_a_shown_string_escape_control_characters_alike(capsys: pytest.CaptureFixture[str]) -> None:
    """One escape for both: a warning is one line (its newline and tab escaped too); a shown string keeps them."""
    from lab.core.errors import plain, warn

    text = "nuc\x1b[2J\x07\x9b\nrow\tcol"
    assert plain(text) == "nuc\\x1b[2J\\x07\\x9b\nrow\tcol"
    assert plain(text, one_line=True) == "nuc\\x1b[2J\\x07\\x9b\\nrow\\tcol"
    warn(text)
    assert capsys.readouterr().err == f"warning: {plain(text, one_line=True)}\n"
