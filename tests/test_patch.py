"""The engine patch reads like llama.cpp code: added lines within 120 columns, no references to documents
the reader does not have. (That it applies to llama.cpp on both sides of the pin: test_engine_source.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

PATCH = Path(__file__).resolve().parent.parent / "patches" / "llama.cpp" / "0001-fake-prefix.patch"


def added_lines() -> list[tuple[int, str]]:
    return [(i, line[1:]) for i, line in enumerate(PATCH.read_text().splitlines(), 1)
            if line.startswith("+") and not line.startswith("+++")]  # fmt: skip


def test_added_lines_fit_120_columns() -> None:
    long = [(i, len(text)) for i, text in added_lines() if len(text) > 120]
    assert not long, f"{PATCH.name}: lines over 120 columns (line, length): {long}"


def test_no_references_to_outside_documents() -> None:
    cited = [(i, text) for i, text in added_lines() if re.search(r"seed ?0|§|DESIGN\.md", text, re.IGNORECASE)]
    assert not cited, cited


def test_one_can_split_guard_in_the_server() -> None:
    server = PATCH.read_text().split("+++ b/tools/server/server-context.cpp", 1)[1].split("diff --git", 1)[0]
    guards = [line for line in server.splitlines() if "if (!slot.can_split()" in line]
    assert len(guards) == 1, guards  # the fake-prefix refusal lives inside the existing guard, not a second one
