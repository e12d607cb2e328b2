"""An interleaved run of two configurations (lab.experiments.versus): when each side's processes ran."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from lab.core.schemas.base import Interval


class VersusPair(BaseModel):
    """raw/pairs.jsonl: one side's process in one process pair of the run (a process pair holds one process of
    each side, next in time, in a balanced random order)."""

    pair: int = Field(ge=0)
    side: Literal["a", "b"]
    order: int = Field(ge=0, le=1, description="0: the pair's first process, 1: its second")
    started_utc: str
    seconds: float = Field(ge=0, description="the process's wall time, start to end")
    process: int | None = Field(
        default=None,
        ge=0,
        description="the side's number of the process (the `process` its rows carry), what B/A pairs by process "
        "pair; none in a run from before it was recorded",
    )


class VersusRow(BaseModel):
    """raw/versus.jsonl: B/A of one point and metric of an interleaved run, or its geometric mean over the grid
    (`point` empty), as `lab compare RUN` prints it (lab.catalog.compare.Comparison)."""

    point: str = Field(description="the point's keys as text (`server L=512 new=64`), empty for the geomean")
    metric: str
    a: float | None = None
    b: float | None = None
    ratio: Interval | None = Field(default=None, description="B/A, its interval paired by process pair")
    called: str = Field(
        description="faster or slower (a time), lower or higher (a ratio of two arms), same or undecided"
    )
    significant: bool | None = Field(default=None, description="the interval excludes 1")
