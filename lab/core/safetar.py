"""Extracting a tar archive that may come from somewhere untrusted (a target host, a source archive) without
letting it write outside its destination, or without bound.

What the lab extracts (a run folder fetched from a host, an sdist's vendored llama.cpp) is regular files and
directories, so that is all it extracts, on every Python: a link, a device, a FIFO, an absolute name or a `..`
in a name refuses the whole archive before anything is written. Resolving where links point is what bypassed
tarfile's own `data` filter (CVE-2025-4517, fixed in 3.11.13, 3.12.11, 3.13.4) and an older version of this
check (a chain `a -> .`, `a/b -> ..`, `a/b/evil`). The `data` filter (PEP 706: 3.11.4 and later) still
applies where there is one, for modes and owners; older Pythons (Debian 12's 3.11.2) get the same done here.

The archive is bounded too, also before anything is written: no sparse member (10 KB of archive that tarfile
unpacks into an 8 GiB file of holes), at most MAX_MEMBERS members and MAX_BYTES bytes in all, and nothing that
would fail halfway through (an archive cut short, a name the file system refuses, a member that lands on or
inside another one)."""

from __future__ import annotations

import copy
import itertools
import os
import tarfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from lab.core.errors import LabError

MAX_MEMBERS = 100_000  # a run folder holds hundreds, llama.cpp's source a few thousand
MAX_BYTES = 16 << 30  # in all: what a compressed archive (a gzip bomb) can unpack into at most
NAME_MAX, PATH_MAX = 255, 4096  # Linux's limits, in bytes: a longer name fails in the middle of an extraction
KINDS = {
    tarfile.SYMTYPE: "a symbolic link",
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    # tarfile writes type 7 as a regular file, but neither GNU tar nor tarfile makes one: only a crafted archive
    tarfile.CONTTYPE: "a contiguous file",
}


class UnsafeArchive(LabError):
    pass


def safe_extract(
    tar: tarfile.TarFile,
    dest: Path,
    members: Iterable[tarfile.TarInfo] | None = None,
    *,
    max_members: int = MAX_MEMBERS,
    max_bytes: int = MAX_BYTES,
) -> None:
    chosen = list(members) if members is not None else read_members(tar, dest, max_members)
    check_members(chosen, dest, max_members, max_bytes)
    if hasattr(tarfile, "data_filter"):
        try:
            tar.extractall(dest, members=chosen, filter="data")
        except tarfile.FilterError as e:
            raise UnsafeArchive(f"refusing to extract into {dest}: {e}") from e
        return
    tar.extractall(dest, members=[_as_data(m) for m in chosen])


def read_members(tar: tarfile.TarFile, dest: Path, max_members: int = MAX_MEMBERS) -> list[tarfile.TarInfo]:
    """The archive's members, one more than max_members at most. Reading them parses every header, so an archive
    cut short or a malformed header (a sparse map that is not numbers) fails here, before anything is written."""
    try:
        return list(itertools.islice(tar, max_members + 1))
    except (tarfile.TarError, ValueError, EOFError, OSError) as e:
        raise UnsafeArchive(f"refusing to extract into {dest}: the archive cannot be read ({_shown(str(e))})") from e


def check_members(
    members: Iterable[tarfile.TarInfo], dest: Path, max_members: int = MAX_MEMBERS, max_bytes: int = MAX_BYTES
) -> None:
    """Refuse anything but regular files and directories with relative, printable names the file system takes,
    no `..`, none landing on or inside another, within the bounds (one line naming the first member refused)."""
    tree, total = _Tree(), 0
    for count, m in enumerate(members, 1):
        total += max(m.size, 0) if m.isreg() else 0
        why = (
            _name_problem(m.name, dest)
            or _kind_problem(m)
            or tree.clash(m)
            or (f"is past the first {max_members} members" if count > max_members else "")
            or (f"takes the archive past {max_bytes} bytes" if total > max_bytes else "")
        )
        if why:
            raise UnsafeArchive(f"refusing to extract into {dest}: {_shown(m.name)} {why}")


def _shown(text: str) -> str:
    return repr(text if len(text) <= 120 else text[:120] + "...")


def _name_problem(name: str, dest: Path) -> str:
    if not name or os.path.isabs(name) or ".." in Path(name).parts:
        return "is not a relative name inside it"
    if not name.isprintable():  # a NUL, a newline, a terminal escape, bytes that are not UTF-8
        return "has a character in its name that is not printable"
    if any(len(os.fsencode(p)) > NAME_MAX for p in Path(name).parts) or len(os.fsencode(dest / name)) >= PATH_MAX:
        return f"has a name longer than the file system takes ({NAME_MAX} bytes a part, {PATH_MAX} in all)"
    return ""


def _kind_problem(m: tarfile.TarInfo) -> str:
    # GNU.sparse.* of any version: a header tarfile does not read as sparse still sets the size to the real one
    if m.issparse() or any(k.startswith("GNU.sparse.") for k in m.pax_headers):
        return "is a sparse file"
    if m.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
        return f"declares a size of {m.size} bytes" if m.size < 0 else ""
    if m.type == tarfile.DIRTYPE:
        return ""
    return "is " + KINDS.get(m.type, f"of tar type {m.type!r}")


class _Tree:
    """The paths the members so far make: a member on or inside another's file, or a file where a directory is,
    is refused (tarfile would overwrite the first file, or fail after writing some members)."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.dirs: set[str] = {"."}

    def clash(self, m: tarfile.TarInfo) -> str:
        path = os.path.normpath(m.name)  # `./a/` and `a` are one path
        parents = [str(p) for p in PurePosixPath(path).parents][:-1]  # all but "."
        if inside := next((p for p in parents if p in self.files), None):
            return f"is inside {_shown(inside)}, a file"
        if path in self.files:
            return "is a directory where a file is" if m.isdir() else "appears twice"
        if path in self.dirs and not m.isdir():
            return "is a file where a directory is"
        (self.dirs if m.isdir() else self.files).add(path)
        self.dirs.update(parents)
        return ""


def _as_data(m: tarfile.TarInfo) -> tarfile.TarInfo:
    """What the `data` filter does to a checked member: no setuid/setgid/sticky or group/other write bits, the
    owner can read and write, and it belongs to the user extracting it (tarfile chowns only as root)."""
    m = copy.copy(m)
    m.mode = (m.mode & 0o755) | (0o700 if m.isdir() else 0o600)
    m.uid, m.gid, m.uname, m.gname = os.getuid(), os.getgid(), "", ""
    return m
