"""sha256 of a file, read a megabyte at a time (a 20 GB model never sits in memory). Standard library only: the
engine's early Docker layer and a target host's bare python3 (lab.remote.modelcheck) run it too."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
