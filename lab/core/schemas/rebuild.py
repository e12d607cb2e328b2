"""The rebuild labs' rows: exact values are kept as fraction strings ("57/2") beside their floats."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class RebuildExactRow(BaseModel):
    """raw/rebuild_exact.jsonl: full prefill vs rebuild from the last `keep` inputs, then one decode step."""

    kv_source: Literal["shared", "per-layer"]
    window: int
    depth: int
    length: int
    keep: int
    next_input: str
    last_full: str
    last_suffix: str
    next_full: str
    next_suffix: str
    last_full_value: float
    last_suffix_value: float
    next_full_value: float
    next_suffix_value: float
    first_diff_layer: int | None = Field(None, description="1-based layer of the first differing cache entry")
    first_diff_pos: int | None = Field(None, description="its 0-based position")
    exact: bool


class RebuildSpanRow(BaseModel):
    """raw/rebuild_span.jsonl: the exhaustive 0/1 check of R = W + (D-1)(W-1) at one (window, depth)."""

    window: int
    depth: int
    span: int
    cases: int
    shared_window_exact: int
    per_layer_span_exact: int
    shorter_fails: int
    counterexample: list[int]
    ok: bool


class RebuildCostRow(BaseModel):
    """raw/rebuild_cost.jsonl: consumer rows and visible SWA pairs of one example chunk in one mode."""

    case: str
    window: int
    keep: int
    length: int
    start: int
    end: int
    valid_start: int
    mode: Literal["off", "mask", "compact"]
    rows: int
    pairs: int
    reference_rows: int
    reference_pairs: int


class RebuildRowWork(BaseModel):
    """raw/rebuild_row_work.jsonl: equal-cost layer-row work, full vs compact, one prefill chunk."""

    length: int
    producer_layers: int
    consumer_layers: int
    keep: int
    full: int
    compact: int
    ratio: float
