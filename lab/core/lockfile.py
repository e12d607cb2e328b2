"""The committed lock files: every Python dependency of the lab pinned with its hashes, resolved for every
supported Python (`make lock` refreshes them with uv). `make setup` installs requirements-dev.lock, the
Dockerfile requirements.lock, and a remote bundle's wheelhouse holds exactly requirements.lock's pins."""

from __future__ import annotations

from pathlib import Path

from lab.core.errors import LabError
from lab.core.settings import REPO_ROOT

LOCK = REPO_ROOT / "requirements.lock"
DEV_LOCK = REPO_ROOT / "requirements-dev.lock"


class LockError(LabError):
    pass


def pins(lock: Path = LOCK) -> list[str]:
    """`name==version` of every package the lock installs on this interpreter (its markers evaluated)."""
    from packaging.markers import Marker

    if not lock.exists():
        raise LockError(f"{lock} is missing: run this from a lab checkout (or `make lock`)")
    out = []
    for line in lock.read_text().splitlines():
        if not line.strip() or line[0] in " #-":
            continue  # hash continuation lines, comments, options
        requirement, _, marker = line.rstrip(" \\").partition(";")
        if marker.strip() and not Marker(marker.strip()).evaluate():
            continue
        out.append(requirement.strip())
    return sorted(out)
