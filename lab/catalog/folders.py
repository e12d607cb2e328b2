"""The run folders as every reader sees them (ingest, `lab catalog ls` and `show`, compare, the newest run a sweep
plans from and its headline): a folder is checked before anything is read from it (its name a run id, a folder
and not a link, its manifest's shapes, its run id its name, its experiment one the catalog reads, its `.ready` a
file), and one that fails is skipped in one line naming it and what is wrong: a folder from a host, a
colleague's push or a hand edit stops no other."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lab.catalog.arrivals import arrived_utc
from lab.catalog.tables import SPECS
from lab.core.errors import LabError, warn
from lab.core.run_ids import RUN_ID, SIDES, side_name
from lab.core.runs import Manifest, RunError, load_manifest


class IngestError(LabError):
    pass


class NoManifest(IngestError):
    """A folder without its manifest.json: a run that never started, or one pulled only partly."""


class UnknownFormat(IngestError):
    """A run folder of an experiment the lab no longer reads (an older format): named and skipped, never read as
    something else."""


# the experiments whose run folders the catalog reads: those its tables come from
EXPERIMENTS = frozenset(e for s in SPECS for e in s.experiments)


def run_dirs(runs_dir: Path) -> list[Path]:
    """The folders under runs_dir (DVC's .dvc files and .gitignore sit beside them and are skipped, as is what is
    hidden: the lab's own records, a fetch under way)."""
    if not runs_dir.exists():
        return []
    return sorted(p for p in runs_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def folder_name(run_dir: Path) -> str:
    """A run folder's name under the runs folder: its run id, or `<run id>/<side>` for a side of an interleaved
    run (a folder `a` or `b` inside a run folder)."""
    return side_name(run_dir) or run_dir.name


def read_manifest(run_dir: Path) -> Manifest:
    """A folder's manifest, its shapes checked (lab.core.runs.load_manifest); IngestError naming it if not."""
    path = run_dir / "manifest.json"
    if not path.exists() and not path.is_symlink():
        raise NoManifest(
            f"{run_dir}: skipped, no manifest.json (a run that never started, or pulled only partly: dvc pull)"
        )
    try:
        return load_manifest(path)
    except RunError as e:
        raise IngestError(str(e)) from None


def current_manifest(run_dir: Path) -> Manifest:
    """A run folder's manifest once every check holds (see the module's docstring); else IngestError naming the
    folder and what is wrong (UnknownFormat for a run of an experiment the catalog does not read)."""
    name = folder_name(run_dir)
    run_id, _, side = name.partition("/")
    if not RUN_ID.match(run_id) or side not in ("", *SIDES):
        raise IngestError(f"{run_dir.parent}: {run_dir.name!r} is not a run id (like 2026-12-02_host_sweep_1a2b3c)")
    if run_dir.is_symlink():
        raise IngestError(f"{run_dir}: a link, not a run folder (a run folder is never read through one)")
    m = read_manifest(run_dir)
    if m.run_id != name:
        raise IngestError(f"{run_dir / 'manifest.json'}:1: its run_id {m.run_id!r} is not its folder's ({name})")
    ready = run_dir / ".ready"
    if ready.is_symlink() or (ready.exists() and not ready.is_file()):
        raise IngestError(f"{ready}: not a file (a run folder's .ready is the file its run writes last)")
    if m.experiment not in EXPERIMENTS:
        known = ", ".join(sorted(EXPERIMENTS))
        raise UnknownFormat(f"{run_dir}: a {m.experiment!r} run, a format this lab does not read (it reads {known})")
    return m


@dataclass(frozen=True)
class Folder:
    """A run folder every check passed: its path, its name under the runs folder, its manifest, and when it
    arrived here (lab.catalog.arrivals; a side: its run's)."""

    path: Path
    name: str
    manifest: Manifest
    arrived_utc: str


def skipped_line(e: IngestError) -> str:
    """What a reader says of a folder it skips: one line naming it and what is wrong."""
    return str(e) if isinstance(e, NoManifest) else f"{e}; skipped"


def warn_skipped(run_dir: Path, e: IngestError) -> None:
    warn(skipped_line(e))


Skipped = Callable[[Path, IngestError], None]


def run_folders(runs_dir: Path, sides: bool = False, skipped: Skipped = warn_skipped) -> Iterator[Folder]:
    """The run folders under runs_dir that pass every check, in name order (with `sides`, an interleaved run's
    two sides after it); each that does not goes to `skipped` (by default, one warning line) and is not read
    further, nor are its sides."""
    dirs = run_dirs(runs_dir)
    for d in dirs:
        try:
            m = current_manifest(d)
        except IngestError as e:
            skipped(d, e)
            continue
        yield Folder(d, d.name, m, arrived_utc(d))
        for side in SIDES if sides else ():
            if not (d / side / "manifest.json").exists() and not (d / side).is_symlink():
                continue
            try:
                ms = current_manifest(d / side)
            except IngestError as e:
                skipped(d / side, e)
                continue
            yield Folder(d / side, f"{d.name}/{side}", ms, arrived_utc(d))
