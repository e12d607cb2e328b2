"""The engine patch of every series reads like llama.cpp code: added lines within 120 columns, no references to
documents the reader does not have. (That each applies to its llama.cpp: test_engine_source.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

PATCHES = sorted((Path(__file__).resolve().parent.parent / "patches" / "llama.cpp").glob("*/*.patch"))
EACH = pytest.mark.parametrize("patch", PATCHES, ids=[f"{p.parent.name}/{p.name}" for p in PATCHES])


def added_lines(patch: Path) -> list[tuple[int, str]]:
    return [(i, line[1:]) for i, line in enumerate(patch.read_text().splitlines(), 1)
            if line.startswith("+") and not line.startswith("+++")]  # fmt: skip


def test_one_series_per_supported_release() -> None:
    assert {p.parent.name for p in PATCHES} == {"465b1f0e7", "0c1e57098"}


@EACH
def test_added_lines_fit_120_columns(patch: Path) -> None:
    long = [(i, len(text)) for i, text in added_lines(patch) if len(text) > 120]
    assert not long, f"{patch}: lines over 120 columns (line, length): {long}"


@EACH
def test_no_references_to_outside_documents(patch: Path) -> None:
    cited = [(i, t) for i, t in added_lines(patch) if re.search(r"seed ?0|§|DESIGN\.md", t, re.IGNORECASE)]
    assert not cited, cited


@EACH
def test_one_can_split_guard_in_the_server(patch: Path) -> None:
    server = patch.read_text().split("+++ b/tools/server/server-context.cpp", 1)[1].split("diff --git", 1)[0]
    guards = [line for line in server.splitlines() if "if (!slot.can_split()" in line]
    assert len(guards) == 1, guards  # the fake-prefix refusal lives inside the existing guard, not a second one
