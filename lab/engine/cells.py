"""A KV cache's cells as llama.cpp dumps them: the one reader of that dump.

With LLAMA_KV_CACHE_DEBUG=3 in its environment, every `llama_kv_cache::find_slot` logs (at debug level) the cache
it is about to place a ubatch in: a header line (`find_slot: stream[0], n = .., used = .., head = .., size = ..,
n_swa = ..`), a map of the cells' sequence ids (a character a cell, 256 a line), then the cells' positions (five
characters a cell, `.` for an empty one, 64 a line, ` *` after every 256th). The profiler's --layout pass collects
it in process (lab/native/kvlayout.h) and llama-server writes it to its log at `-lv 5`; both are read here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lab.core.errors import LabError

DEBUG_ENV = {"LLAMA_KV_CACHE_DEBUG": "3"}  # find_slot dumps every cache (2: only the sliding-window ones)
HEADER = re.compile(
    r"find_slot: stream\[(\d+)\], n = +(\d+), used = +(\d+), head = +(\d+), size = +(\d+), n_swa = +(\d+)"
)
WIDTH = 5  # characters a position: a position past 99999 runs into its neighbour, and the dump is refused


class CellDumpError(LabError):
    pass


@dataclass(frozen=True)
class CacheCells:
    """One cache just before a ubatch is placed: its size, window, head, used cells, and its cells as runs
    [cell, pos, length] of used cells whose cell and position both step by one."""

    size: int
    n_swa: int
    head: int
    used: int
    cells: tuple[tuple[int, int, int], ...]

    @property
    def kind(self) -> str:
        return "window" if self.n_swa else "full"


def parse_cell_dumps(text: str) -> list[CacheCells]:
    """Every dump in `text`, in order; CellDumpError when one is cut short or wider than five characters a cell."""
    lines = text.splitlines()
    out: list[CacheCells] = []
    i = 0
    while i < len(lines):
        m = HEADER.search(lines[i])
        i += 1
        if m is None:
            continue
        size = int(m[5])
        positions, i = _positions(lines, i, size)
        out.append(CacheCells(size, int(m[6]), int(m[4]), int(m[3]), _runs(positions)))
    return out


def _positions(lines: list[str], i: int, size: int) -> tuple[list[int], int]:
    """The `size` positions of the dump whose first line is at or after line i, and the line after them."""
    per_line = WIDTH * min(64, size)
    pos: list[int] = []
    while i < len(lines) and len(pos) < size:
        line = lines[i].removesuffix(" *")
        i += 1
        if not pos and len(line) != per_line:  # the sequence-id map, or a log line between
            continue
        if len(line) != per_line:
            raise CellDumpError(f"llama.cpp's cell dump has a line of {len(line)} characters, not {per_line}")
        for k in range(0, per_line, WIDTH):
            field = line[k : k + WIDTH].strip()
            pos.append(-1 if field == "." else int(field))
    if len(pos) != size:
        raise CellDumpError(f"llama.cpp's cell dump ended after {len(pos)} of {size} cells")
    return pos, i


def _runs(positions: list[int]) -> tuple[tuple[int, int, int], ...]:
    runs: list[list[int]] = []
    for cell, p in enumerate(positions):
        if p < 0:
            continue
        if runs and runs[-1][0] + runs[-1][2] == cell and runs[-1][1] + runs[-1][2] == p:
            runs[-1][2] += 1
        else:
            runs.append([cell, p, 1])
    return tuple((c, p, n) for c, p, n in runs)
