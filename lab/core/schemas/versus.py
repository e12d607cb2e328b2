"""An interleaved run of two configurations (lab.experiments.versus): when each side's processes ran."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class VersusSlot(BaseModel):
    """raw/slots.jsonl: one side's process in one slot of the run (a slot holds one process of each side, next
    in time, in a balanced random order)."""

    slot: int = Field(ge=0)
    side: Literal["a", "b"]
    order: int = Field(ge=0, le=1, description="0: the slot's first process, 1: its second")
    started_utc: str
    seconds: float = Field(ge=0, description="the process's wall time, start to end")
