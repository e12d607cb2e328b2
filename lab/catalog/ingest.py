"""Ingest run folders into the catalog: validate every row against its schema, flatten, write one Parquet
table per spec. A run folder with a malformed row is left out, named with its file and line in one warning, and
stops no other. The tables are built in a scratch directory and swapped in whole at the end: a failure while
writing them leaves the previous catalog untouched."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.catalog.arrivals import age_utc
from lab.catalog.folders import Folder, IngestError, run_folders, warn_skipped
from lab.catalog.metrics import compute_metrics
from lab.catalog.tables import (
    METRICS_FILE,
    RUNS,
    SPEC_BY_NAME,
    SPECS,
    TABLES_DIR,
    RunRecord,
    TableSpec,
    columns,
    flatten,
)
from lab.core.jsonl import read_document, read_jsonl
from lab.core.runs import Manifest, RunError


@dataclass
class IngestResult:
    runs: int = 0
    in_figures: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    tables_dir: Path | None = None


# the fields of a run's record that its manifest holds as they are
AS_IN_MANIFEST = {"run_id", "experiment", "host", "status", "reason", "started_utc", "finished_utc"}


def run_record(run_dir: Path, m: Manifest, name: str | None = None, arrived_utc: str = "") -> RunRecord:
    """A run's record in the catalog from its manifest (whose shapes current_manifest checked). `name`: the run's
    path under the runs folder (a side of an interleaved run: `<run>/a`); `arrived_utc`: when it arrived here
    (lab.catalog.arrivals)."""
    name = name or run_dir.name
    shape, host = m.shape(), m.host_summary
    source, results = shape.engine.source, shape.results
    nodes = run_dir / "raw" / "profile_nodes.parquet"
    return RunRecord(
        **m.model_dump(include=AS_IN_MANIFEST),
        age_utc=age_utc(m.started_utc, arrived_utc),
        resumed=len(m.resumed_utc),
        in_figures=m.status == "complete",
        cpu_model=host.get("Model name", ""),
        cpus=host.get("CPU(s)", ""),
        kernel=host.get("uname", ""),
        engine_commit=source.commit,
        engine_origin=source.origin,
        engine_pinned=source.pinned,
        patch_sha256=shape.engine.patch_sha256,
        model_path=shape.model.path,
        model_sha256=shape.model.sha256,
        lab_commit=shape.lab.commit,
        lab_dirty=shape.lab.dirty,
        noise_warnings="; ".join([*results.host_state.warnings, *results.host_noise.warnings]),
        params_json=json.dumps(m.params, sort_keys=True),
        path=name,
        nodes_path=f"{name}/raw/{nodes.name}" if nodes.exists() else "",
    )


def read_spec(run_dir: Path, spec: TableSpec, run_id: str | None = None) -> list[dict[str, Any]]:
    path = run_dir / "raw" / spec.source.file
    if not path.exists():
        if spec.required:
            raise IngestError(f"{path}: missing, but the run says it is complete")
        return []
    schema = spec.source.schema
    try:
        rows: list[Any] = [read_document(path, schema)] if spec.source.single else read_jsonl(path, schema)
    except RunError as e:  # it names the file and line
        raise IngestError(str(e)) from None
    return [{"run_id": run_id or run_dir.name, **flatten(r)} for r in rows]


def run_rows(run_dir: Path, experiment: str, name: str) -> list[dict[str, Any]]:
    """One run's rows of catalog table `name`, from every source its experiment writes them to."""
    return [r for s in SPECS if s.name == name and experiment in s.experiments for r in read_spec(run_dir, s)]


def folder_rows(f: Folder) -> dict[str, list[dict[str, Any]]]:
    """A complete run folder's rows of every catalog table its experiment writes to; IngestError naming the file
    (and line) of a bad one."""
    tables: dict[str, list[dict[str, Any]]] = {}
    for spec in SPECS:
        if f.manifest.experiment in spec.experiments:
            tables.setdefault(spec.name, []).extend(read_spec(f.path, spec, f.name))
    return tables


def collect(runs_dir: Path) -> tuple[list[RunRecord], dict[str, list[dict[str, Any]]]]:
    """Every run folder's record, and the rows of the complete ones; a folder that fails a check, or a complete
    one with a bad row or raw file, is skipped in one line naming it and the file (and line): it stops no other."""
    records: list[RunRecord] = []
    tables: dict[str, list[dict[str, Any]]] = {name: [] for name in SPEC_BY_NAME}
    for f in run_folders(runs_dir, sides=True):  # an interleaved run's configurations: runs of their own, `<run>/a`
        rec = run_record(f.path, f.manifest, f.name, f.arrived_utc)
        try:
            rows = folder_rows(f) if rec.in_figures else {}
        except IngestError as e:
            warn_skipped(f.path, e)
            continue
        records.append(rec)
        for name, got in rows.items():
            tables[name].extend(got)
    return records, tables


def ingest(runs_dir: Path, catalog_dir: Path) -> IngestResult:
    import pandas as pd

    records, tables = collect(runs_dir)  # every folder read before anything is written
    catalog_dir.mkdir(parents=True, exist_ok=True)
    final = catalog_dir / TABLES_DIR
    scratch = catalog_dir / f".{TABLES_DIR}-tmp-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    try:
        frames = {RUNS: pd.DataFrame([r.model_dump() for r in records], columns=list(RunRecord.model_fields))}
        frames.update({n: pd.DataFrame(tables[n], columns=columns(s.schema)) for n, s in SPEC_BY_NAME.items()})
        for name, df in frames.items():
            df.to_parquet(scratch / f"{name}.parquet", index=False, compression="zstd")
        metrics = compute_metrics(frames)
        old = catalog_dir / f".{TABLES_DIR}-old-{os.getpid()}"
        if final.exists():
            final.rename(old)
        scratch.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    tmp = catalog_dir / f".{METRICS_FILE}.tmp"
    tmp.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    tmp.replace(catalog_dir / METRICS_FILE)
    return IngestResult(
        runs=len(records),
        in_figures=sum(r.in_figures for r in records),
        rows={name: len(rows) for name, rows in tables.items()},
        tables_dir=final,
    )
