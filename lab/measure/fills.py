"""What the in-process driver's cumulative fill passes give a point: the baseline (time to reach L + new from
empty, as prefix sums of the pass's segments) and the estimate's chunk (new tokens at depth L)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from lab.core.rawtable import RawTable
from lab.core.runs import RunFolder
from lab.core.schemas import InprocFill

if TYPE_CHECKING:
    from lab.core.settings import Settings
    from lab.inproc import DriverSession


class FillValues(NamedTuple):
    """Per complete fill pass, in pass order: the time to reach L + new from empty and the chunk of `new` at
    depth L (ms), and the driver process that made the pass."""

    baseline: list[float]
    chunk: list[float]
    procs: list[int]


def fill_values(fills: Iterable[InprocFill], L: int, new: int) -> FillValues:
    """What the complete fill passes give point (L, new)."""
    fills = list(fills)
    out = FillValues([], [], [])
    for n in sorted({f.fill_pass for f in fills}):
        rows = [f for f in fills if f.fill_pass == n]
        segs = [f.ms for f in rows if f.kind == "fill" and f.L <= L]
        c = next((f for f in rows if f.kind == "chunk" and f.L == L and f.new == new and f.ok), None)
        if c is None or not any(f.kind == "fill" and f.L == L for f in rows):
            continue
        out.baseline.append(sum(segs) + c.ms)
        out.chunk.append(c.ms)
        out.procs.append(c.process)
    return out


def batch_values(fills: Iterable[InprocFill], L: int, new: int, batch: int) -> tuple[list[float], list[int]]:
    """Per complete fill pass that timed both: ms per token of the `new`-token chunk at depth L over the
    `batch`-token chunk's (the two follow each other in the pass, from the same restored state), and the pass's
    driver process."""
    values: list[float] = []
    procs: list[int] = []
    for n in sorted({f.fill_pass for f in fills}):
        chunks = {f.new: f for f in fills if f.fill_pass == n and f.kind == "chunk" and f.L == L and f.ok and f.ms > 0}
        if new in chunks and batch in chunks:
            values.append((chunks[new].ms / new) / (chunks[batch].ms / batch))
            procs.append(chunks[new].process)
    return values, procs


def complete_fills(
    run: RunFolder, table: RawTable[InprocFill], settings: Settings, news: list[int]
) -> list[InprocFill]:
    """The fill passes a run holds, whole ones only (a pass is appended at once; a torn one is dropped)."""
    need = len(settings.sweep.Ls) * (1 + len(news))
    passes = run.keep_whole(table, lambda f: f.fill_pass, lambda _n, rows: len(rows) == need)
    return [f for rows in passes.values() for f in rows]


# the keys of each kind of row the driver's `fill` command gives; two are named otherwise in InprocFill
_ROW_KEYS = {
    "fill": ("pass", "L", "from", "ms", "capture_ms", "blob_bytes"),
    "chunk": ("pass", "L", "new", "ms", "ok", "reason"),
}
_FIELD = {"pass": "fill_pass", "from": "start"}


def fills_of(rows: list[dict[str, Any]]) -> list[InprocFill]:
    """The rows of one `fill` command as InprocFill rows."""
    return [
        InprocFill(kind=r["kind"], **{_FIELD.get(k, k): r[k] for k in _ROW_KEYS[r["kind"]]})
        for r in rows
        if r.get("kind") in _ROW_KEYS
    ]


def run_fill(
    driver: DriverSession, run: RunFolder, table: RawTable[InprocFill], fills: list[InprocFill], process: int
) -> None:
    """One more cumulative fill pass in this driver process (its depth-L states, and a baseline sample), appended
    whole; `fills` grows in place."""
    n = max((f.fill_pass for f in fills), default=-1) + 1
    rows = [f.model_copy(update={"process": process}) for f in fills_of(driver.fill(n))]
    run.append(table, rows)
    fills += rows
