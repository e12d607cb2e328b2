"""Rebuild cost: how much consumer work a compact (or mask) truncation saves, by DeepInfer's query-range and SWA
pair-count formulas (translated), checked against a reference that enumerates every visible query-key pair.

A chunk covers positions [start, end) of a prompt of `length`; the retained region starts at length - keep;
`valid_start` is the earliest valid local state. Modes: off (ordinary prefill), mask (every query row runs,
SWA visibility narrowed to the retained region), compact (narrowed visibility, rows before the retained
region removed, but a chunk always keeps its last row: a placeholder with no visible SWA keys).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

Mode = Literal["off", "mask", "compact"]
MODES: tuple[Mode, ...] = ("off", "mask", "compact")


@dataclass(frozen=True)
class Chunk:
    length: int  # full prompt length (data_len / full_len)
    start: int
    end: int  # exclusive (k)
    valid_start: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end <= self.length or self.valid_start < 0:
            raise ValueError(f"a chunk needs 0 <= start < end <= length and valid_start >= 0: {self}")


@dataclass(frozen=True)
class Work:
    rows: int  # consumer query rows executed
    pairs: int  # visible SWA query-key pairs


def prefix_pairs(n: int, window: int) -> int:
    """S(n) = m(m+1)/2 + (n-m)W, m = min(n, W): visible pairs of the first n queries after the source start."""
    m = min(n, window)
    return m * (m + 1) // 2 + (n - m) * window


def pairs(a: int, b: int, window: int) -> int:
    """Pairs of queries a..b-1, counted from the source start (the translated `pairs(lo, hi, 1, W)`)."""
    return prefix_pairs(b, window) - prefix_pairs(a, window) if window > 0 else 0


def consumer_work(c: Chunk, window: int, keep: int, mode: Mode) -> Work:
    """FlopsEstimator::query_ranges (Listing 9.13): the full range, then the consumer adjustment."""
    begin, swa_start = c.start, c.valid_start
    if mode != "off":
        cutoff = c.length - keep
        if mode == "compact":  # a fully clipped compact chunk still executes its last query row
            begin = min(max(cutoff, c.start), c.end - 1)
        swa_start = max(c.valid_start, cutoff)
    return Work(c.end - begin, pairs(max(0, begin - swa_start), max(0, c.end - swa_start), window))


def reference_work(c: Chunk, window: int, keep: int, mode: Mode) -> Work:
    """Enumerate: which query rows run, and for each the visible keys l_i..i (Listing 9.9's lower bound)."""
    rect_lo = max(0, c.length - keep) if mode != "off" else 0
    queries = list(range(c.start, c.end))
    if mode == "compact":
        queries = [i for i in queries if i >= rect_lo] or [c.end - 1]  # at least one row: the placeholder
    n = 0
    for i in queries:
        lo = min(max(i - window + 1, rect_lo, c.valid_start, 0), i + 1)
        n += sum(1 for _ in range(lo, i + 1))
    return Work(len(queries), n)


# The seed's five examples (W = 3, K = 4 there; any window and keep here)
EXAMPLES: dict[str, Chunk] = {
    "short": Chunk(2, 0, 2),
    "long": Chunk(12, 0, 12),
    "clipped": Chunk(12, 0, 4),
    "crossing": Chunk(12, 6, 10),
    "valid-start": Chunk(12, 10, 12, valid_start=10),
}


def grid_cases(
    windows: Sequence[int] = (1, 2, 3, 4),
    keeps: Sequence[int] = (0, 1, 2, 4, 8),
    lengths: Sequence[int] = tuple(range(1, 11)),
    valid_starts: Sequence[int] = (0, 1, 3),
) -> Iterator[tuple[Chunk, int, int, Mode]]:
    """Every chunk [start, end) of every short prompt (all chunk boundaries), with nonzero valid starts."""
    for length, window, keep, sv, mode in itertools.product(lengths, windows, keeps, valid_starts, MODES):
        for start in range(length):
            for end in range(start + 1, length + 1):
                yield Chunk(length, start, end, sv), window, keep, mode


@dataclass
class CheckResult:
    cases: int
    mismatches: list[str]


def check_formulas(cases: Iterator[tuple[Chunk, int, int, Mode]] | None = None) -> CheckResult:
    n, bad = 0, []
    for chunk, window, keep, mode in cases if cases is not None else grid_cases():
        n += 1
        got, want = consumer_work(chunk, window, keep, mode), reference_work(chunk, window, keep, mode)
        if got != want:
            bad.append(f"{chunk} W={window} K={keep} {mode}: formula {got}, reference {want}")
    return CheckResult(n, bad)


@dataclass(frozen=True)
class RowWork:
    length: int
    full: int
    compact: int

    @property
    def ratio(self) -> float:
        return self.compact / self.full


def row_work(length: int, producer: int, consumer: int, keep: int) -> RowWork:
    """Equal layer costs, one chunk: (P L + D min(L, K)) / ((P + D) L) of the layer-row work remains."""
    return RowWork(length, (producer + consumer) * length, producer * length + consumer * min(length, keep))


def chunked_consumer_rows(length: int, chunk: int, keep: int) -> list[int]:
    """Compact consumer rows per chunk when the prompt is prefilled in `chunk`-sized pieces."""
    return [
        consumer_work(Chunk(length, s, min(s + chunk, length)), 1, keep, "compact").rows
        for s in range(0, length, chunk)
    ]
