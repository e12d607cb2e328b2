"""A run folder's table: its file under raw/ and its row schema (the tables themselves are declared in
lab.core.schemas.raw). Apart from the schemas, so that writing a run folder does not import them all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel

Row = TypeVar("Row", bound=BaseModel)


@dataclass(frozen=True)
class RawTable(Generic[Row]):
    """raw/<name>.jsonl, one `schema` row per line; `single`: raw/<name>.json, one document."""

    name: str
    schema: type[Row]
    single: bool = False

    @property
    def file(self) -> str:
        return f"{self.name}.json" if self.single else f"{self.name}.jsonl"
