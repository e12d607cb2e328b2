"""Run ids: the grammar of a run folder's name (RunFolder.create names folders by it, and nothing else is a run
id), the sides of an interleaved run, and matching an id or a unique prefix of one among a listing."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from lab.core.errors import RunError

# <UTC date>_<host slug>_<experiment>_<6 hex>: what RunFolder.create names a folder, and all a run id may be
RUN_ID = re.compile(r"^\d{4}-\d{2}-\d{2}_[A-Za-z0-9-]+_[a-z][a-z0-9_]*_[0-9a-f]{6}$")
SIDES = ("a", "b")  # the two configurations of an interleaved run (lab.experiments.versus), folders in its own


def side_name(path: Path) -> str | None:
    """`<run id>/<side>` when `path` is a side of an interleaved run by its place (a folder `a` or `b` beside its
    run's manifest.json), else None."""
    if path.name in SIDES and (path.parent / "manifest.json").is_file():
        return f"{path.parent.name}/{path.name}"
    return None


def check_run_id(run_id: str, where: str) -> str:
    """A run id from a listing, a flag or a file, before any path is built from it (one-line error if not)."""
    if not RUN_ID.match(run_id):
        raise RunError(f"{where}: {run_id!r} is not a run id (like 2026-12-02_host_sweep_1a2b3c)")
    return run_id


def matching(ref: str, ids: Iterable[str]) -> list[str]:
    """The ids equal to `ref`, else those it is a prefix of."""
    ids = list(ids)
    return [i for i in ids if i == ref] or sorted(i for i in ids if i.startswith(ref))


def match_run_id(ref: str, ids: Iterable[str], where: str, key: str | None = None) -> str:
    """The one run id `ref` names among `ids` (itself, or a unique prefix of it); else a one-line RunError
    saying how many matched (`key`: what is matched when it is not `ref` as given)."""
    found = matching(ref if key is None else key, ids)
    if len(found) != 1:
        listed = f"{len(found)} match: {', '.join(found[:5])}" if found else "none matches"
        raise RunError(f"no unique run {ref!r} {where} ({listed})")
    return found[0]
