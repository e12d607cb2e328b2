"""Extracting a tar archive that may come from somewhere untrusted (a target host, a source archive) without
letting it write outside its destination.

Pythons with PEP 706 (3.11.4 and later, 3.12) get tarfile's own `data` filter. Older ones (3.11.0-3.11.3, which
`requires-python` allows: Debian 12 ships 3.11.2) get the same protection checked here before extracting:
no absolute or `..` names, no links pointing out of the destination, no devices or FIFOs."""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterable
from pathlib import Path

from lab.core.errors import LabError


class UnsafeArchive(LabError):
    pass


def safe_extract(tar: tarfile.TarFile, dest: Path, members: Iterable[tarfile.TarInfo] | None = None) -> None:
    chosen = list(members) if members is not None else tar.getmembers()
    if hasattr(tarfile, "data_filter"):
        try:
            tar.extractall(dest, members=chosen, filter="data")
        except tarfile.FilterError as e:
            raise UnsafeArchive(f"refusing to extract into {dest}: {e}") from e
        return
    check_members(chosen, dest)
    tar.extractall(dest, members=chosen)


def check_members(members: Iterable[tarfile.TarInfo], dest: Path) -> None:
    """What the `data` filter refuses, for Pythons without it (one line naming the member)."""
    root = os.path.realpath(dest)

    def inside(path: str) -> bool:
        return os.path.commonpath([root, os.path.realpath(path)]) == root

    for m in members:
        if os.path.isabs(m.name) or not inside(os.path.join(root, m.name)):
            raise UnsafeArchive(f"refusing to extract into {dest}: {m.name!r} is outside it")
        if m.isdev() or m.isfifo():
            raise UnsafeArchive(f"refusing to extract into {dest}: {m.name!r} is a device or FIFO")
        if m.issym() and not inside(os.path.join(root, os.path.dirname(m.name), m.linkname)):
            raise UnsafeArchive(f"refusing to extract into {dest}: the link {m.name!r} points outside it")
        if m.islnk() and (os.path.isabs(m.linkname) or not inside(os.path.join(root, m.linkname))):
            raise UnsafeArchive(f"refusing to extract into {dest}: the hard link {m.name!r} points outside it")
