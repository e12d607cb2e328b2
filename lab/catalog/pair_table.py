"""An interleaved run's pair table (raw/pairs.jsonl, written by lab.experiments.versus): its rows read and checked,
and the process pair each side's process ran in, by which B/A pairs the two sides (lab.catalog.compare.compare_sides).

A side numbers its processes itself (the `process` its rows carry), and an interruption inside a process pair
leaves one side a process ahead of the other: process k of one side need not have run next to process k of the
other. The pair table says which did."""

from __future__ import annotations

from pathlib import Path

from lab.core.jsonl import read_jsonl
from lab.core.run_ids import SIDES
from lab.core.runs import RunError
from lab.core.schemas import VersusPair
from lab.core.schemas.raw import VERSUS_PAIRS

PairOf = dict[int, int]  # one side's processes by number: the process pair each ran in


def read_pairs(run: Path, torn_ok: bool = True) -> list[VersusPair]:
    """The run's pair rows, validated: a bad row, or a side in one pair twice, is one error naming the file and
    line. `torn_ok`: a torn last line (a run interrupted mid-write) is left out, as a reader of a run in progress
    leaves it; a resumed run sets it aside first and reads strictly."""
    path = run / "raw" / VERSUS_PAIRS.file
    if not path.exists():
        return []
    rows = read_jsonl(path, VersusPair, tolerate_torn_tail=torn_ok)
    lines = [i for i, line in enumerate(path.read_text(errors="replace").split("\n"), start=1) if line.strip()]
    seen: set[tuple[int, str]] = set()
    for line, r in zip(lines, rows, strict=False):  # read_jsonl skips the blank lines too
        if (r.pair, r.side) in seen:
            raise RunError(f"{path}:{line}: pair {r.pair} holds side {r.side} twice")
        seen.add((r.pair, r.side))
    return rows


def pairs_of(rows: list[VersusPair]) -> tuple[PairOf, PairOf] | None:
    """Sides A's and B's processes, each with the process pair it ran in (a process run again after an
    interruption: its last pair, the one its rows are from); None for a table from before the rows named their
    process, whose sides then pair by process number."""
    if any(r.process is None for r in rows):
        return None
    of: dict[str, PairOf] = {side: {} for side in SIDES}
    for r in rows:
        assert r.process is not None
        of[r.side][r.process] = r.pair
    return of["a"], of["b"]


def count_paired(rows: list[VersusPair]) -> int:
    """The process pairs that hold a process of each side."""
    per: dict[int, set[str]] = {}
    for r in rows:
        per.setdefault(r.pair, set()).add(r.side)
    return sum(1 for v in per.values() if v == set(SIDES))
