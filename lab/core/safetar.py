"""Extracting a tar archive that may come from somewhere untrusted (a target host, a source archive) without
letting it write outside its destination.

What the lab extracts (a run folder fetched from a host, an sdist's vendored llama.cpp) is regular files and
directories, so that is all it extracts, on every Python: a link, a device, a FIFO, an absolute name or a `..`
in a name refuses the whole archive before anything is written. Resolving where links point is what bypassed
tarfile's own `data` filter (CVE-2025-4517, fixed in 3.11.13, 3.12.11, 3.13.4) and an older version of this
check (a chain `a -> .`, `a/b -> ..`, `a/b/evil`). The `data` filter (PEP 706: 3.11.4 and later) still
applies where there is one, for modes and owners; older Pythons (Debian 12's 3.11.2) get the same done here."""

from __future__ import annotations

import copy
import os
import tarfile
from collections.abc import Iterable
from pathlib import Path

from lab.core.errors import LabError


class UnsafeArchive(LabError):
    pass


def safe_extract(tar: tarfile.TarFile, dest: Path, members: Iterable[tarfile.TarInfo] | None = None) -> None:
    chosen = list(members) if members is not None else tar.getmembers()
    check_members(chosen, dest)
    if hasattr(tarfile, "data_filter"):
        try:
            tar.extractall(dest, members=chosen, filter="data")
        except tarfile.FilterError as e:
            raise UnsafeArchive(f"refusing to extract into {dest}: {e}") from e
        return
    tar.extractall(dest, members=[_as_data(m) for m in chosen])


def check_members(members: Iterable[tarfile.TarInfo], dest: Path) -> None:
    """Refuse anything but regular files and directories with relative names and no `..` (one line naming
    the first member refused)."""
    for m in members:
        name = repr(m.name if len(m.name) <= 120 else m.name[:120] + "...")
        if not m.name or os.path.isabs(m.name) or ".." in Path(m.name).parts:
            raise UnsafeArchive(f"refusing to extract into {dest}: {name} is not a relative name inside it")
        if not (m.isreg() or m.isdir()):
            raise UnsafeArchive(f"refusing to extract into {dest}: {name} is {_kind(m)}")


def _kind(m: tarfile.TarInfo) -> str:
    if m.issym():
        return "a symbolic link"
    if m.islnk():
        return "a hard link"
    return "a device or FIFO" if m.isdev() else f"of tar type {m.type!r}"


def _as_data(m: tarfile.TarInfo) -> tarfile.TarInfo:
    """What the `data` filter does to a checked member: no setuid/setgid/sticky or group/other write bits, the
    owner can read and write, and it belongs to the user extracting it (tarfile chowns only as root)."""
    m = copy.copy(m)
    m.mode = (m.mode & 0o755) | (0o700 if m.isdir() else 0o600)
    m.uid, m.gid, m.uname, m.gname = os.getuid(), os.getgid(), "", ""
    return m
