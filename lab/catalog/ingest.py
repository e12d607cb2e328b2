"""Ingest run folders into the catalog: validate every row against its schema, flatten, write one Parquet
table per spec. All or nothing: tables are built in a scratch directory and swapped in at the end, so a
malformed row (reported with its file and line) leaves the previous catalog untouched."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

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
from lab.core.errors import LabError, validation_line, warn
from lab.core.runs import SIDES, Manifest, RunError, read_document, read_jsonl


class IngestError(LabError):
    pass


@dataclass
class IngestResult:
    runs: int = 0
    in_figures: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    tables_dir: Path | None = None


def run_dirs(runs_dir: Path) -> list[Path]:
    """Run folders under runs_dir (DVC's .dvc files and .gitignore sit beside them and are skipped)."""
    if not runs_dir.exists():
        return []
    return sorted(p for p in runs_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def read_manifest(run_dir: Path) -> Manifest:
    path = run_dir / "manifest.json"
    if not path.exists():
        raise IngestError(f"{run_dir}: not a run folder (no manifest.json); pulled only partly? try `dvc pull`")
    try:
        return Manifest.model_validate_json(path.read_text())
    except ValidationError as e:
        raise IngestError(f"{path}:1: invalid manifest: {validation_line(e, root='manifest')}") from e


# the experiments whose run folders the catalog reads: those its tables come from
EXPERIMENTS = frozenset(e for s in SPECS for e in s.experiments)


class UnknownFormat(IngestError):
    """A run folder of an experiment the lab no longer reads (an older format): named and skipped, never read as
    something else."""


def current_manifest(run_dir: Path) -> Manifest:
    """A run folder's manifest, refused (UnknownFormat, one line naming the folder) when its experiment is not
    one the catalog reads."""
    m = read_manifest(run_dir)
    if m.experiment not in EXPERIMENTS:
        known = ", ".join(sorted(EXPERIMENTS))
        raise UnknownFormat(f"{run_dir}: a {m.experiment!r} run, a format this lab does not read (it reads {known})")
    return m


# the fields of a run's record that its manifest holds as they are
AS_IN_MANIFEST = {"run_id", "experiment", "host", "status", "reason", "started_utc", "finished_utc"}


def run_record(run_dir: Path, m: Manifest, name: str | None = None) -> RunRecord:
    """`name`: the run's path under the runs folder (a side of an interleaved run: `<run>/a`)."""
    name = name or run_dir.name
    eng, host = m.engine, m.host_summary
    source = eng.get("source", {})
    nodes = run_dir / "raw" / "profile_nodes.parquet"
    return RunRecord(
        **m.model_dump(include=AS_IN_MANIFEST),
        resumed=len(m.resumed_utc),
        in_figures=m.status == "complete",
        cpu_model=host.get("Model name", ""),
        cpus=host.get("CPU(s)", ""),
        kernel=host.get("uname", ""),
        engine_commit=source.get("commit", ""),
        engine_origin=source.get("origin", ""),
        engine_pinned=source.get("pinned"),
        patch_sha256=eng.get("patch_sha256", ""),
        model_path=m.model.get("path", ""),
        model_sha256=m.model.get("sha256", ""),
        lab_commit=m.lab.get("commit", ""),
        lab_dirty=m.lab.get("dirty"),
        noise_warnings="; ".join(
            [*m.results.get("host_state", {}).get("warnings", []), *m.results.get("host_noise", {}).get("warnings", [])]
        ),
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
    except ValidationError as e:
        raise IngestError(f"{path}:1: bad {schema.__name__}: {validation_line(e)}") from e
    except RunError as e:  # read_jsonl names the file and line
        raise IngestError(str(e)) from e
    return [{"run_id": run_id or run_dir.name, **flatten(r)} for r in rows]


def run_rows(run_dir: Path, experiment: str, name: str) -> list[dict[str, Any]]:
    """One run's rows of catalog table `name`, from every source its experiment writes them to."""
    return [r for s in SPECS if s.name == name and experiment in s.experiments for r in read_spec(run_dir, s)]


def collect(runs_dir: Path) -> tuple[list[RunRecord], dict[str, list[dict[str, Any]]]]:
    records: list[RunRecord] = []
    tables: dict[str, list[dict[str, Any]]] = {name: [] for name in SPEC_BY_NAME}
    for run_dir in run_dirs(runs_dir):
        if not (run_dir / "manifest.json").exists():  # a crash between its mkdir and its first write
            warn(f"{run_dir}: skipped, no manifest.json (a run that never started, or pulled only partly: dvc pull)")
            continue
        if not _collect_run(run_dir, run_dir.name, records, tables):
            continue
        for side in SIDES:  # an interleaved run: each configuration is a run of its own, `<run>/a`, `<run>/b`
            if (run_dir / side / "manifest.json").exists():
                _collect_run(run_dir / side, f"{run_dir.name}/{side}", records, tables)
    return records, tables


def _collect_run(run_dir: Path, run_id: str, records: list[RunRecord], tables: dict[str, list[dict[str, Any]]]) -> bool:
    """One run's record and rows; False (with a warning) for a folder of a format the lab does not read."""
    try:
        m = current_manifest(run_dir)
    except UnknownFormat as e:
        warn(f"{e}; skipped")
        return False
    if m.run_id != run_id:
        raise IngestError(f"{run_dir / 'manifest.json'}:1: run_id {m.run_id!r} does not match its folder ({run_id})")
    rec = run_record(run_dir, m, run_id)
    records.append(rec)
    if rec.in_figures:
        for spec in SPECS:
            if m.experiment in spec.experiments:
                tables[spec.name].extend(read_spec(run_dir, spec, run_id))
    return True


def ingest(runs_dir: Path, catalog_dir: Path) -> IngestResult:
    import pandas as pd

    records, tables = collect(runs_dir)  # raises before anything is written
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
