"""Write-once run folders: catalog/runs/<UTC date>_<host>_<experiment>_<id>/

    manifest.json   resolved params, engine source/patch/flags, model, server config, status, times
    host/           uname, lscpu, free, df, nproc, governor, boost (lab.core.snapshot)
    git/            the lab checkout's commit, status, git_diff.patch; engine.patch (the applied patch)
    logs/           server and tool logs
    raw/            rows appended as JSONL while running, one schema per table (lab.core.schemas)
    .ready          written last: the run is complete

A folder is never overwritten (creation is an exclusive mkdir). An interrupted run (Ctrl-C, SIGTERM, a
crashed server) stays `status: incomplete` with the reason, and can be resumed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import signal
from collections.abc import Callable, Hashable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal, overload

from pydantic import BaseModel, Field, ValidationError

from lab.core.errors import LabError, validation_line
from lab.core.errors import RunError as RunError  # raised by every reader of a run, imported from here
from lab.core.jsonl import (
    MAX_MANIFEST_BYTES,
    RAW_LIMIT,
    RawLimit,
    Row,
    atomic_write,
    read_bounded,
    read_document,
    read_jsonl,
    set_aside_torn_tail,
)
from lab.core.locks import open_lock
from lab.core.rawtable import RawTable
from lab.core.run_ids import SIDES, match_run_id, matching, side_name

if TYPE_CHECKING:
    from lab.core.schemas.manifest import ManifestShape

Status = Literal["running", "incomplete", "complete"]


class RunInterrupted(LabError):
    """Raised inside a guarded run when SIGTERM/SIGINT arrives."""


class Manifest(BaseModel):
    run_id: str
    experiment: str
    host: str
    status: Status = "running"
    reason: str = ""
    started_utc: str
    finished_utc: str | None = None
    resumed_utc: list[str] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict, description="the inputs: fixed when the run starts")
    results: dict[str, Any] = Field(default_factory=dict, description="what the run found or did (outputs)")
    engine: dict[str, Any] = Field(default_factory=dict)
    model: dict[str, Any] = Field(default_factory=dict)
    server_config: dict[str, Any] = Field(default_factory=dict)
    host_summary: dict[str, str] = Field(default_factory=dict)
    lab: dict[str, Any] = Field(default_factory=dict)

    def shape(self) -> ManifestShape:
        """The fields readers take from the free-form sections, checked (a ValidationError naming the field)."""
        # imported here: the engine's Docker layer copies this module, and not every schema (a new one would
        # rebuild the engine)
        from lab.core.schemas.manifest import ManifestShape

        return ManifestShape.model_validate(self.model_dump())


def load_manifest(path: Path) -> Manifest:
    """A run's manifest.json, its shapes checked (lab.core.schemas.manifest); a bad one (not a file, not JSON, a
    field of the wrong shape) is one RunError naming the file and the field."""
    try:
        m = Manifest.model_validate_json(read_bounded(path, MAX_MANIFEST_BYTES))
        m.shape()
    except ValidationError as e:
        raise RunError(f"{path}:1: invalid manifest: {validation_line(e, root='manifest')}") from None
    return m


def utc_now(ms: bool = False) -> str:
    """The time in UTC, ISO 8601 (to the millisecond with `ms`)."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" if ms else now.strftime("%Y-%m-%dT%H:%M:%SZ")


# what a fetch from a host adds to a run's local copy (lab.remote.session.Deployment.record: the bundle's git state,
# or the image and the checkout it was pushed from): a run that holds one was measured on a host
LOCAL_FILES = ("git/bundle/", "git/image.json", "git/pushed-from/")


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9-]+", "-", s).strip("-") or "host"


class RunFolder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.interrupted = ""  # the signal a guarded run received (see guard)

    # --- creation and opening -----------------------------------------------------------------------

    @classmethod
    def create(cls, root: Path, experiment: str, host: str, params: dict[str, Any]) -> RunFolder:
        root.mkdir(parents=True, exist_ok=True)
        date = datetime.now(UTC).strftime("%Y-%m-%d")
        for _ in range(20):
            run_id = f"{date}_{_slug(host)}_{experiment}_{secrets.token_hex(3)}"
            path = root / run_id
            try:
                path.mkdir()  # exclusive: an existing folder is never reused
            except FileExistsError:
                continue
            run = cls(path)
            for sub in ("host", "git", "logs", "raw"):
                (path / sub).mkdir()
            run.write_manifest(
                Manifest(run_id=run_id, experiment=experiment, host=host, started_utc=utc_now(), params=params)
            )
            return run
        raise RunError(f"could not create a new run folder under {root}")

    @classmethod
    def create_side(cls, parent: RunFolder, side: str, experiment: str, params: dict[str, Any]) -> RunFolder:
        """The run folder of one configuration of an interleaved run, inside that run's folder (its id the
        run's, a slash and the side: `<run id>/a`)."""
        if side not in SIDES:
            raise RunError(f"a side of an interleaved run is one of {', '.join(SIDES)}, not {side!r}")
        path = parent.path / side
        try:
            path.mkdir()  # exclusive, as a run folder is
        except FileExistsError:
            raise RunError(f"{parent.path.name} already has a side {side}") from None
        run = cls(path)
        for sub in ("host", "git", "logs", "raw"):
            (path / sub).mkdir()
        m = parent.manifest()
        run.write_manifest(
            Manifest(
                run_id=f"{m.run_id}/{side}", experiment=experiment, host=m.host, started_utc=utc_now(), params=params
            )
        )
        return run

    @classmethod
    def open(cls, path: Path) -> RunFolder:
        run = cls(path)
        if not (path / "manifest.json").exists():
            raise RunError(f"{path} is not a run folder (no manifest.json)")
        return run

    # --- manifest ---------------------------------------------------------------------------------------

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    def manifest(self) -> Manifest:
        return load_manifest(self.manifest_path)

    def write_manifest(self, m: Manifest) -> None:
        atomic_write(self.manifest_path, m.model_dump_json(indent=2) + "\n")

    def update(self, **fields: Any) -> Manifest:
        if "params" in fields:
            raise RunError(f"{self.path.name}: a run's params are its inputs and never change after it starts")
        m = self.manifest().model_copy(update=fields)
        self.write_manifest(m)
        return m

    def add_results(self, **results: Any) -> Manifest:
        """Merge outputs into the manifest's `results` (never into its `params`)."""
        return self.update(results={**self.manifest().results, **results})

    @property
    def ready(self) -> bool:
        return (self.path / ".ready").exists()

    def complete(self) -> None:
        self.update(status="complete", reason="", finished_utc=utc_now())
        (self.path / ".ready").write_text(utc_now() + "\n")  # last

    def fail(self, reason: str) -> None:
        self.update(status="incomplete", reason=reason, finished_utc=utc_now())

    @contextlib.contextmanager
    def writer(self) -> Iterator[None]:
        """Hold the run's one writer lock while it is measured: a second process resuming or appending to the
        same run is refused, in one line naming the process that holds it. The kernel drops the lock when its
        holder dies, however it dies. The lock file lives in this machine's temp directory, named after the run
        folder's real path (every process and clone here finds the same one; the run folder stays as measured)."""
        key = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:16]
        fd = open_lock(f"{self.path.name}-{key}.lock")
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
                raise RunError(
                    f"{self.path.name} is being written by process {holder}; wait for it or stop it"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock

    def resumable(self, experiment: str) -> Manifest:
        """The manifest of a run that `experiment` may resume: its own, and not complete (one line if not)."""
        m = self.manifest()
        if m.experiment != experiment:
            raise RunError(f"{self.path.name} is a {m.experiment} run, not {experiment}")
        if self.ready or m.status == "complete":
            raise RunError(f"{self.path.name} is complete; a complete run is never changed")
        return m

    def resumed_alone(self) -> None:
        """Refuse, in one line naming the run to resume, to resume a side of an interleaved run on its own (a
        folder `a` or `b` in a run's folder, or a copy whose manifest calls it `<run id>/<side>`): each of its
        processes makes a process pair with one of the other side's, and only its run measures both
        (lab.experiments.versus)."""
        run_id, slash, side = (side_name(self.path) or self.manifest().run_id).rpartition("/")
        if not slash:
            return
        raise RunError(
            f"{run_id}/{side} is side {side} of the interleaved run {run_id}: resume the run, --resume {run_id}"
        )

    def begin_resume(self, experiment: str) -> Manifest:
        """Reopen an interrupted run for writing: its tables' torn last lines set aside first (each with a
        warning), so that what reads them whole before appending reads what the run wrote whole."""
        m = self.resumable(experiment)
        for table in sorted((self.path / "raw").glob("*.jsonl")):
            set_aside_torn_tail(table)
        return self.update(status="running", reason="", resumed_utc=[*m.resumed_utc, utc_now()])

    # --- raw tables ---------------------------------------------------------------------------------

    def table_path(self, table: RawTable[Any] | str) -> Path:
        """A table's file; a bare name is the JSON lines another tool writes (the profiler's dump)."""
        return self.path / "raw" / (table.file if isinstance(table, RawTable) else f"{table}.jsonl")

    def append(self, table: RawTable[Row], rows: Iterable[Row]) -> None:
        """Append rows and flush them to disk before returning (a crash after this loses nothing); a torn last
        line a crash left is set aside first, never glued to the next row."""
        self.check_interrupted()
        lines = "".join(_checked(table, r).model_dump_json() + "\n" for r in rows)
        if not lines:
            return
        set_aside_torn_tail(self.table_path(table))
        with self.table_path(table).open("a") as fh:
            fh.write(lines)
            fh.flush()
            os.fsync(fh.fileno())

    def read(self, table: RawTable[Row], tolerate_torn_tail: bool = False) -> list[Row]:
        """Rows of a table, validated. A bad row is an error naming file and line; a torn last line (a
        crash mid-write) is dropped only when asked to (when resuming)."""
        path = self.table_path(table)
        if not path.exists():
            return []
        if table.single:
            return [read_document(path, table.schema)]
        return read_jsonl(path, table.schema, tolerate_torn_tail)

    def rewrite(self, table: RawTable[Row], rows: Iterable[Row]) -> None:
        """The table's rows, replaced whole (atomically); a one-document table takes exactly one row."""
        rows = [_checked(table, r) for r in rows]
        if table.single:
            if len(rows) != 1:
                raise TypeError(f"{table.file} holds one document, not {len(rows)}")
            atomic_write(self.table_path(table), rows[0].model_dump_json(indent=2))
            return
        atomic_write(self.table_path(table), "".join(r.model_dump_json() + "\n" for r in rows))

    def write_raw(self, name: str, data: str | bytes) -> Path:
        """A file of what measured (a tool's source, its build record, a copy of the input), written whole."""
        path = self.path / "raw" / name
        atomic_write(path, data)
        return path

    @overload
    def keep_whole(
        self,
        table: RawTable[Row],
        unit: Callable[[Row], Hashable],
        whole: Callable[[Hashable, list[Row]], bool] = ...,
        limit: RawLimit = ...,
    ) -> dict[Hashable, list[Row]]: ...
    @overload
    def keep_whole(
        self,
        table: str,
        unit: Callable[[dict[str, Any]], Hashable],
        whole: Callable[[Hashable, list[dict[str, Any]]], bool] = ...,
        limit: RawLimit = ...,
    ) -> dict[Hashable, list[dict[str, Any]]]: ...

    def keep_whole(
        self,
        table: RawTable[Any] | str,
        unit: Callable[[Any], Hashable],
        whole: Callable[[Hashable, list[Any]], bool] = lambda _unit, _rows: True,
        limit: RawLimit = RAW_LIMIT,
    ) -> dict[Hashable, list[Any]]:
        """The one resume path: a table's rows (a torn last line dropped), grouped into units of work by `unit`
        (a sweep point, a trace step, a fill pass, a profile cycle); the units `whole` accepts are kept, the
        table is rewritten atomically with only their rows, and they are returned. What an interrupted run
        wrote of an unfinished unit is gone, so a resumed run neither measures a unit twice nor loses one. A
        bare name is another tool's JSON lines, kept as they were written; `limit`: what the table may hold."""
        path = self.table_path(table)
        schema = table.schema if isinstance(table, RawTable) else None
        units: dict[Hashable, list[Any]] = {}
        for r in read_jsonl(path, schema, tolerate_torn_tail=True, limit=limit) if path.exists() else []:
            units.setdefault(unit(r), []).append(r)
        kept = {k: rows for k, rows in units.items() if whole(k, rows)}
        atomic_write(path, "".join(_line(r) + "\n" for rows in kept.values() for r in rows))
        return kept

    # --- interruption -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """SIGTERM/SIGINT/SIGHUP become RunInterrupted (SIGHUP: the ssh session of a remote run dropped);
        any failure leaves the run incomplete with its reason."""

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.interrupted = f"interrupted by {signal.Signals(signum).name}"
            raise RunInterrupted(self.interrupted)

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            yield
            self.check_interrupted()
        except BaseException as e:
            reason = str(e) or type(e).__name__
            self.fail(reason if isinstance(e, RunInterrupted) else f"{type(e).__name__}: {reason}")
            raise
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def check_interrupted(self) -> None:
        """Raise the interruption a signal asked for, if its exception was swallowed where it landed (Python
        ignores an exception raised inside an at-fork hook, such as logging's after a server process starts):
        the next write, or the end of the run, stops it."""
        if self.interrupted:
            raise RunInterrupted(self.interrupted)


def _checked(table: RawTable[Row], row: Row) -> Row:
    if not isinstance(row, table.schema):  # a lab bug: a row written to another table than its own
        raise TypeError(f"{table.file} takes {table.schema.__name__} rows, not {type(row).__name__}")
    return row


def _line(row: BaseModel | dict[str, Any]) -> str:
    return row.model_dump_json() if isinstance(row, BaseModel) else json.dumps(row, separators=(",", ":"))


def resolve_run(ref: str | Path, root: Path) -> RunFolder:
    """A run by path, by its id, or by a unique prefix of its id under root; a side of an interleaved run by its
    run's id (or prefix) and the side, `<id>/a`. Only run folders count: a DVC-tracked run's `<id>.dvc` file
    beside it is not a second match."""
    p = Path(ref)
    if p.is_dir():
        return RunFolder.open(p)
    name = str(ref).rstrip("/")
    parent, _, side = name.rpartition("/")
    if side in SIDES and parent and not Path(parent).is_dir():
        return RunFolder.open(resolve_run(parent, root).path / side)
    if name.endswith(".dvc"):  # the tracked run's .dvc file names the run too
        name = name[: -len(".dvc")]
    folders = [d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")] if root.is_dir() else []
    if root.is_dir() and not matching(Path(name).name, folders):
        tracked = sorted(f.name[: -len(".dvc")] for f in root.glob(f"{Path(name).name}*.dvc"))
        if len(tracked) == 1:
            raise RunError(f"run {tracked[0]} is tracked by DVC but not here yet: dvc pull {root / tracked[0]}.dvc")
    return RunFolder.open(root / match_run_id(str(ref), folders, f"under {root}", Path(name).name))
