"""What the catalog holds: one spec per table, naming the run tables it is built from and their schema.

A catalog table is its row schema, flattened (nested models become `parent_child` columns, dicts keyed by
data such as per-depth maps become JSON strings), plus `run_id`. Readers get them with `load_table`.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field

from lab.catalog.legacy import InprocPoint, InprocSample
from lab.core.schemas import (
    ArmsSummary,
    BandAt,
    BandCycle,
    BandDepth,
    ConversationSample,
    ConversationStepResult,
    ConversationTaskResult,
    DecodeDepth,
    InprocFill,
    PrefillTps,
    ProfileSummary,
    ProfileWall,
    ReplayCostRow,
    ReplayExactRow,
    ReplayRowWork,
    ReplaySpanRow,
    SweepPoint,
    SweepSample,
    TraceStepResult,
    TraceTaskResult,
)

Row = TypeVar("Row", bound=BaseModel)

TABLES_DIR = "tables"
METRICS_FILE = "metrics.json"
RUNS = "runs"


@dataclass(frozen=True)
class TableSpec:
    name: str  # catalog/tables/<name>.parquet
    experiments: tuple[str, ...]
    source: str  # raw/<source>.jsonl (or raw/<source>.json: one row) in the run folder
    schema: type[BaseModel]
    single: bool = False  # source is one JSON document, not JSON lines
    required: bool = True  # a complete run of these experiments must have it
    legacy: type[BaseModel] | None = None  # an older run's row schema, read and turned into `schema` (current())


SPECS: tuple[TableSpec, ...] = (
    # one family for the sweep in both places (a `where` column), older `lab arms` runs included
    TableSpec("sweep_points", ("sweep",), "points", SweepPoint),
    TableSpec("sweep_points", ("arms",), "inproc_points", SweepPoint, legacy=InprocPoint),
    TableSpec("sweep_samples", ("sweep",), "samples", SweepSample),
    TableSpec("sweep_samples", ("arms",), "inproc_samples", SweepSample, legacy=InprocSample),
    TableSpec("sweep_samples", ("arms",), "server_samples", SweepSample, required=False),
    TableSpec("prefill_tps", ("sweep", "profile"), "prefill_tps", PrefillTps, required=False),
    TableSpec("sweep_fills", ("sweep",), "fills", InprocFill, required=False),
    TableSpec("sweep_fills", ("arms",), "inproc_fills", InprocFill, required=False),
    TableSpec("arms_summary", ("sweep", "arms"), "arms_summary", ArmsSummary, single=True, required=False),
    TableSpec("trace_steps", ("trace_replay",), "steps", TraceStepResult),
    TableSpec("conversation_samples", ("conversation",), "conversation_samples", ConversationSample),
    TableSpec("conversation_steps", ("conversation",), "conversation_steps", ConversationStepResult),
    TableSpec("conversation_tasks", ("conversation",), "conversation_tasks", ConversationTaskResult),
    TableSpec("decode_depths", ("decode",), "decode_depths", DecodeDepth),
    TableSpec("trace_tasks", ("trace_replay",), "tasks", TraceTaskResult),
    TableSpec("profile_walls", ("profile",), "profile_walls", ProfileWall),
    TableSpec("profile_bands", ("profile",), "profile_bands", BandDepth),
    TableSpec("profile_band_cycles", ("profile",), "profile_band_cycles", BandCycle, required=False),
    TableSpec("profile_summary", ("profile",), "profile_summary", ProfileSummary, single=True),
    TableSpec("profile_predicted", ("profile",), "profile_predicted", BandAt, required=False),
    TableSpec("replay_exact", ("replay_exact",), "replay_exact", ReplayExactRow),
    TableSpec("replay_span", ("replay_span",), "replay_span", ReplaySpanRow),
    TableSpec("replay_cost", ("replay_cost",), "replay_cost", ReplayCostRow),
    TableSpec("replay_row_work", ("replay_cost",), "replay_row_work", ReplayRowWork),
)
SPEC_BY_NAME = {s.name: next(t for t in SPECS if t.name == s.name) for s in SPECS}  # a table's first spec


class RunRecord(BaseModel):
    """catalog/tables/runs.parquet: one row per run folder, with the provenance a reader needs."""

    run_id: str
    experiment: str
    host: str
    status: str
    reason: str = ""
    started_utc: str
    finished_utc: str | None = None
    resumed: int = 0
    in_figures: bool = Field(description="complete runs only; incomplete and failed runs are listed, not drawn")
    cpu_model: str = ""
    cpus: str = ""
    kernel: str = ""
    engine_commit: str = ""
    engine_origin: str = ""
    engine_pinned: bool | None = None
    patch_sha256: str = ""
    model_path: str = ""
    model_sha256: str = ""
    lab_commit: str = ""
    lab_dirty: bool | None = None
    noise_warnings: str = Field(default="", description="the host-noise guard's warnings, before and over the run")
    params_json: str = "{}"
    path: str = Field(description="the run folder, relative to the runs directory")
    nodes_path: str = Field(default="", description="profile runs: the per-node Parquet dump, relative path")


def nested_model(ann: Any) -> type[BaseModel] | None:
    """The model of a field typed `Model` or `Model | None` (flattened into columns), else None (a dict of
    models, keyed by data, stays one JSON column)."""
    optional = typing.get_origin(ann) in (typing.Union, types.UnionType)
    for t in (ann, *(typing.get_args(ann) if optional else ())):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


def flatten(row: BaseModel) -> dict[str, Any]:
    """One catalog row: nested models flattened with `_` (all None when an optional one is absent),
    data-keyed dicts as JSON text."""
    out: dict[str, Any] = {}
    for key, value in row.model_dump(mode="json").items():
        model = nested_model(type(row).model_fields[key].annotation)
        if model is not None:
            for k in model.model_fields:
                out[f"{key}_{k}"] = value.get(k) if isinstance(value, dict) else None
        elif isinstance(value, dict):
            out[key] = json.dumps(value, sort_keys=True)
        else:
            out[key] = value
    return out


def unflatten(row: dict[str, Any], schema: type[Row]) -> Row:
    """The inverse of `flatten`: a catalog row (a missing value is NaN or None) back into its schema."""

    def clean(v: Any) -> Any:
        return None if v is None or (isinstance(v, float) and v != v) else v

    data: dict[str, Any] = {}
    for key, f in schema.model_fields.items():
        model = nested_model(f.annotation)
        if model is not None:
            sub = {k: clean(row.get(f"{key}_{k}")) for k in model.model_fields}
            if any(v is not None for v in sub.values()):
                data[key] = {k: v for k, v in sub.items() if v is not None}
        elif (v := clean(row.get(key))) is not None:
            is_json = isinstance(v, str) and typing.get_origin(f.annotation) is dict
            data[key] = json.loads(v) if is_json else v.tolist() if hasattr(v, "tolist") else v
    return schema.model_validate(data)


def columns(schema: type[BaseModel]) -> list[str]:
    """The catalog columns of a row schema (what `flatten` produces), so an empty table still has them."""
    cols = ["run_id"]
    for key, f in schema.model_fields.items():
        model = nested_model(f.annotation)
        cols += [f"{key}_{k}" for k in model.model_fields] if model is not None else [key]
    return cols


def rows_at(frame: Any, where: str) -> Any:
    """The rows of a sweep table measured in one place (rows from before the sweep had two: the server)."""
    if frame.empty:
        return frame
    places = frame["where"].fillna("server") if "where" in frame.columns else "server"
    return frame[places == where].reset_index(drop=True)


def table_path(catalog_dir: Path, name: str) -> Path:
    return catalog_dir / TABLES_DIR / f"{name}.parquet"


def load_table(catalog_dir: Path, name: str) -> Any:
    """A catalog table as a pandas DataFrame (empty, with no columns, when no run has produced it)."""
    import pandas as pd

    path = table_path(catalog_dir, name)
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()
