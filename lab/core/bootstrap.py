"""Bootstrap resamples drawn a block at a time (lab.core.stats's intervals come from them).

Drawing all of an interval's resamples at once held resamples x n indices: 4000 x a million samples is 29.8
GiB, so a large or hostile raw file ended ingest in a MemoryError. Here a block holds about BLOCK cells, so an
interval holds a few blocks (a few tens of MiB), or a few arrays of n when one resample is larger than a block.

The blocks draw the same random numbers in the same order as one whole draw did (numpy's generators give the
same stream cut into any blocks), so every interval is what it was. The two-stage bootstrap draws every
resample's processes before any of their samples; two generators keep that order, one drawing the processes
and one starting where their draws end. Processes of very unequal sizes (a padded resample over PADDED cells,
whose whole draw would have held 32 GiB an array) are resampled alike with other random numbers.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

BLOCK = 1 << 19  # cells a block holds: 4 MiB a float array
PADDED = 1 << 20  # cells of the largest two-stage resample drawn padded (processes x the largest one)


def blocks(rows: int, width: int) -> Iterator[int]:
    """The sizes of consecutive blocks of `rows` rows of `width` cells: about BLOCK cells each, one row at least."""
    step = max(1, BLOCK // max(1, width))
    for start in range(0, rows, step):
        yield min(step, rows - start)


def index_blocks(n: int, rng: np.random.Generator, count: int, cells: int = 1) -> Iterator[npt.NDArray[np.int64]]:
    """`count` resamples of the indices 0..n-1 (rows of n indices), a block of rows at a time; `cells`: what one
    index stands for (a rep's steps), so that a block holds about BLOCK of them."""
    for b in blocks(count, n * cells):
        yield rng.integers(0, n, size=(b, n))


def one_stage_medians(xs: npt.NDArray[np.float64], rng: np.random.Generator, count: int) -> npt.NDArray[np.float64]:
    """`count` bootstrap medians of xs."""
    return np.concatenate([np.median(xs[idx], axis=1) for idx in index_blocks(len(xs), rng, count)])


def two_stage_medians(
    flats: Sequence[npt.NDArray[np.float64]], sizes: npt.NDArray[np.int64], rng: np.random.Generator, count: int
) -> list[npt.NDArray[np.float64]]:
    """`count` two-stage bootstrap medians of each of `flats`, values laid out unit after unit (`sizes[u]` of
    unit u, the same layout in each): draw the units with replacement, then each drawn unit's values with
    replacement, the same draws for every one of `flats`."""
    units, width = len(sizes), int(sizes.max())
    if units * width > PADDED:
        return _unpadded(flats, sizes, rng, count)
    tables = [np.full((units, width), np.nan) for _ in flats]  # one row per unit, padded
    rows, cols = np.repeat(np.arange(units), sizes), np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    for table, flat in zip(tables, flats, strict=True):
        table[rows, cols] = flat
    picks, values = _split(rng, count, units) if units > 1 else (None, rng)
    out: list[list[npt.NDArray[np.float64]]] = [[] for _ in flats]
    for b in blocks(count, units * width):
        pick = picks.integers(0, units, size=(b, units)) if picks else np.zeros((b, 1), np.int64)
        n = sizes[pick][..., None]  # (b, units, 1): how many values each drawn unit has
        idx = (values.random((b, units, width)) * n).astype(np.int64)
        mask = np.arange(width) < n
        for medians, table in zip(out, tables, strict=True):
            medians.append(row_nanmedians(np.where(mask, table[pick[..., None], idx], np.nan).reshape(b, -1)))
    return [np.concatenate(m) for m in out]


def _split(rng: np.random.Generator, count: int, units: int) -> tuple[np.random.Generator, np.random.Generator]:
    """A generator for `count` x `units` unit draws, and `rng` moved to where those draws end (by drawing them),
    for the values: the order of one whole draw, a block of each at a time."""
    picks = copy.deepcopy(rng)
    for b in blocks(count, units):
        rng.integers(0, units, size=(b, units))
    return picks, rng


def _unpadded(
    flats: Sequence[npt.NDArray[np.float64]], sizes: npt.NDArray[np.int64], rng: np.random.Generator, count: int
) -> list[npt.NDArray[np.float64]]:
    """The two-stage draws one resample at a time, holding only the values it drew (n on average), where a
    padded resample (units x the largest unit) would hold over PADDED cells. The same resampling with other
    random numbers (one per value drawn, none for padding): only inputs whose whole draw would have held over
    4000 x PADDED cells come here."""
    starts = np.cumsum(sizes) - sizes
    picks, values = _split(rng, count, len(sizes))
    out = [np.empty(count) for _ in flats]
    r = 0
    for b in blocks(count, len(sizes)):
        for pick in picks.integers(0, len(sizes), size=(b, len(sizes))):
            unit = np.repeat(pick, sizes[pick])
            cell = starts[unit] + (values.random(len(unit)) * sizes[unit]).astype(np.int64)
            for medians, flat in zip(out, flats, strict=True):
                medians[r] = np.median(flat[cell])
            r += 1
    return out


def row_nanmedians(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """np.nanmedian(values, axis=1), without numpy's masked-array path (several times slower at these shapes:
    the sweep's adaptive stop takes a bootstrap after every rep). Every row has at least one value."""
    ordered = np.sort(values, axis=1)  # NaNs sort last
    n = np.sum(~np.isnan(values), axis=1)
    lo = np.take_along_axis(ordered, ((n - 1) // 2)[:, None], axis=1)[:, 0]
    hi = np.take_along_axis(ordered, (n // 2)[:, None], axis=1)[:, 0]
    out: npt.NDArray[np.float64] = (lo + hi) / 2
    return out
