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

from lab.core.rawtable import RawTable
from lab.core.schemas import ArmStats, Interval
from lab.core.schemas.raw import (
    ARMS_SUMMARY,
    CONVERSATION_CAUSES,
    CONVERSATION_SAMPLES,
    CONVERSATION_STEPS,
    CONVERSATION_TASKS,
    DECODE_DEPTHS,
    PREFILL_TPS,
    PROFILE_BAND_PROCESSES,
    PROFILE_BANDS,
    PROFILE_PREDICTED,
    PROFILE_SUMMARY,
    PROFILE_WALLS,
    REBUILD_COST,
    REBUILD_EXACT,
    REBUILD_ROW_WORK,
    REBUILD_SPAN,
    SERVER_SHARE,
    SWEEP_FILLS,
    SWEEP_POINTS,
    SWEEP_SAMPLES,
    TUNE_SETTINGS,
    VERSUS_ROWS,
)

Row = TypeVar("Row", bound=BaseModel)

TABLES_DIR = "tables"
METRICS_FILE = "metrics.json"
RUNS = "runs"


@dataclass(frozen=True)
class TableSpec:
    name: str  # catalog/tables/<name>.parquet
    experiments: tuple[str, ...]
    source: RawTable[Any]  # the run folder's table (lab.core.schemas.raw) its rows come from
    required: bool = True  # a complete run of these experiments must have it

    @property
    def schema(self) -> type[BaseModel]:
        return self.source.schema


SPECS: tuple[TableSpec, ...] = (
    # one family for the sweep in both places (a `where` column)
    TableSpec("sweep_points", ("sweep",), SWEEP_POINTS),
    TableSpec("sweep_samples", ("sweep",), SWEEP_SAMPLES),
    TableSpec("prefill_tps", ("sweep", "profile"), PREFILL_TPS, required=False),
    TableSpec("sweep_fills", ("sweep",), SWEEP_FILLS, required=False),
    TableSpec("arms_summary", ("sweep",), ARMS_SUMMARY, required=False),
    TableSpec("server_share", ("sweep",), SERVER_SHARE, required=False),
    # a tune is a conversation replay too (its defaults' steps and tasks), with the settings it weighed
    TableSpec("conversation_samples", ("conversation", "tune"), CONVERSATION_SAMPLES),
    TableSpec("conversation_steps", ("conversation", "tune"), CONVERSATION_STEPS),
    TableSpec("conversation_tasks", ("conversation", "tune"), CONVERSATION_TASKS),
    TableSpec("conversation_causes", ("conversation", "tune"), CONVERSATION_CAUSES, required=False),
    TableSpec("tune_settings", ("tune",), TUNE_SETTINGS),
    TableSpec("decode_depths", ("decode",), DECODE_DEPTHS),
    TableSpec("profile_walls", ("profile",), PROFILE_WALLS),
    TableSpec("profile_bands", ("profile",), PROFILE_BANDS),
    TableSpec("profile_band_processes", ("profile",), PROFILE_BAND_PROCESSES, required=False),
    TableSpec("profile_summary", ("profile",), PROFILE_SUMMARY),
    TableSpec("profile_predicted", ("profile",), PROFILE_PREDICTED, required=False),
    TableSpec("rebuild_exact", ("rebuild_exact",), REBUILD_EXACT),
    TableSpec("rebuild_span", ("rebuild_span",), REBUILD_SPAN),
    TableSpec("rebuild_cost", ("rebuild_cost",), REBUILD_COST),
    TableSpec("rebuild_row_work", ("rebuild_cost",), REBUILD_ROW_WORK),
    # an interleaved run of two configurations: B/A per point (its sides' own rows stay in its folder)
    TableSpec("versus_rows", ("sweep_vs", "profile_vs", "decode_vs"), VERSUS_ROWS),
)
SPEC_BY_NAME = {s.name: s for s in SPECS}


class RunRecord(BaseModel):
    """catalog/tables/runs.parquet: one row per run folder, with the provenance a reader needs."""

    run_id: str
    experiment: str
    host: str
    status: str
    reason: str = ""
    started_utc: str
    finished_utc: str | None = None
    age_utc: str = Field(
        default="",
        description="what orders it among runs: its start, or when its folder arrived here where that is earlier "
        "(lab.catalog.arrivals)",
    )
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


def derived(model: type[BaseModel]) -> tuple[str, ...]:
    """A nested model's properties the catalog keeps beside its fields (an interval's `thin`)."""
    return ("thin",) if model in (Interval, ArmStats) else ()


def flatten(row: BaseModel) -> dict[str, Any]:
    """One catalog row: nested models flattened with `_` (all None when an optional one is absent),
    data-keyed dicts as JSON text."""
    out: dict[str, Any] = {}
    for key, value in row.model_dump(mode="json").items():
        model = nested_model(type(row).model_fields[key].annotation)
        if model is not None:
            for k in model.model_fields:
                out[f"{key}_{k}"] = value.get(k) if isinstance(value, dict) else None
            nested = getattr(row, key)
            for k in derived(model):
                out[f"{key}_{k}"] = getattr(nested, k) if nested is not None else None
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
        cols += [f"{key}_{k}" for k in [*model.model_fields, *derived(model)]] if model is not None else [key]
    return cols


def rows_at(frame: Any, where: str) -> Any:
    """The rows of a sweep table measured in one place (its `where`: server, inproc)."""
    if frame.empty:
        return frame
    return frame[frame["where"] == where].reset_index(drop=True)


def table_path(catalog_dir: Path, name: str) -> Path:
    return catalog_dir / TABLES_DIR / f"{name}.parquet"


def load_table(catalog_dir: Path, name: str) -> Any:
    """A catalog table as a pandas DataFrame (empty, with no columns, when no run has produced it)."""
    import pandas as pd

    path = table_path(catalog_dir, name)
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()
