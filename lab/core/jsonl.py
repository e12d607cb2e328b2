"""A run's raw files read and appended to with bounds, and a file written whole or not at all. A file is read
only when it is a regular one of at most a limit's bytes and rows, each bad line is one error naming the file and
line, and a torn last line (a writer killed mid-line) is set aside before anything is appended after it."""

from __future__ import annotations

import json
import os
import secrets
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel

from lab.core.errors import RunError, validation_line, warn

Row = TypeVar("Row", bound=BaseModel)


# what a file of a run folder may hold before it is read into memory (the profile's per-node dump has a larger
# bound of its own: lab.experiments.profile.dump): a larger one is refused by name, unread
MAX_RAW_BYTES = 512 * 2**20
MAX_RAW_ROWS = 10_000_000
MAX_MANIFEST_BYTES = 16 * 2**20


class RawLimit(NamedTuple):
    """What a JSON-lines file may hold before it is read: bytes, and rows (lines)."""

    max_bytes: int
    max_rows: int


RAW_LIMIT = RawLimit(MAX_RAW_BYTES, MAX_RAW_ROWS)  # every table's but the profile's dump (its own: profile.dump)


def _size(n: int) -> str:
    """A byte limit as it is said: in GiB or MiB when it is whole in them."""
    for unit, shift in (("GiB", 30), ("MiB", 20)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def read_bounded(path: Path, limit: int = MAX_RAW_BYTES) -> bytes:
    """A file's bytes, when it is a regular file (a FIFO would block the reader, a device never end) of at most
    `limit` bytes; else one RunError naming it."""
    try:  # O_NONBLOCK: opening a FIFO does not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise RunError(f"{path}: cannot be read ({e.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise RunError(f"{path}: not a regular file: not read")
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > limit:
            raise RunError(
                f"{path}: {st.st_size:,} bytes, over the limit of {_size(limit)} a raw file may hold: not read"
            )
        data = fh.read(limit + 1)  # a file still growing is bounded too
    if len(data) > limit:
        raise RunError(f"{path}: over the limit of {_size(limit)} a raw file may hold: not read")
    return data


def _why(e: Exception) -> str:
    """A bad row's error in one short line."""
    return " ".join(validation_line(e).split())[:300] or type(e).__name__


def read_document(path: Path, schema: type[Row]) -> Row:
    """A one-document table (raw/<name>.json), validated; a bad one is an error naming the file."""
    data = read_bounded(path)
    try:
        return schema.model_validate_json(data)
    except (ValueError, RecursionError) as e:  # pydantic's errors, and any the parser lets through
        raise RunError(f"{path}:1: bad {schema.__name__}: {_why(e)}") from None


def read_jsonl(
    path: Path, schema: type[Row] | None, tolerate_torn_tail: bool = False, limit: RawLimit = RAW_LIMIT
) -> list[Any]:
    """A JSON-lines file's rows, validated by `schema` (plain dicts when None); a bad line is an error naming
    file and line, whatever is wrong with it (not UTF-8, not JSON, a number or a nesting past the parser's
    limits, not the schema); a torn last line (a writer killed mid-line, maybe inside a character) is dropped
    when `tolerate_torn_tail`. A file over `limit` (its bytes or its rows) is refused by name, unread."""
    data = read_bounded(path, limit.max_bytes)
    return [row for _, row in parse_jsonl(path, data, schema, tolerate_torn_tail, limit.max_rows)]


def parse_jsonl(
    path: Path, data: bytes, schema: type[Row] | None, tolerate_torn_tail: bool = False, max_rows: int = MAX_RAW_ROWS
) -> list[tuple[int, Any]]:
    """`read_jsonl` of a file's bytes already read (bounded): its rows, each with its line number."""
    if data.count(b"\n") > max_rows:
        raise RunError(f"{path}: over the limit of {max_rows:,} rows a raw file may hold: not read")
    lines = data.split(b"\n")
    last = len(lines) - 1 if lines[-1] == b"" else len(lines)
    what = "JSON" if schema is None else schema.__name__
    rows: list[tuple[int, Any]] = []
    for i, line in enumerate(lines[:last], start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode())
            rows.append((i, row if schema is None else schema.model_validate(row)))
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError, JSONDecodeError, ValidationError among them
            if tolerate_torn_tail and i == last and not data.endswith(b"\n"):
                break
            raise RunError(f"{path}:{i}: bad {what} row: {_why(e)}") from None
    return rows


def set_aside_torn_tail(path: Path) -> Path | None:
    """Before a JSON-lines file is appended to: a last line without its newline (a writer killed mid-line) is moved
    to a file of its own beside it, `<name>.torn-<UTC time>`, so the next row is never glued to it; that file's
    path, with a warning naming it (None when nothing was moved). A last line that is whole JSON and lacks only its
    newline is kept, and ended."""
    if not path.is_file():
        return None
    with path.open("r+b") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - 1))
        if fh.read(1) in (b"", b"\n"):  # empty, or whole: the common case, one byte read
            return None
        start = size
        while start > 0:  # back to the last newline, a block at a time (the file may be large)
            block = max(0, start - 65536)
            fh.seek(block)
            data = fh.read(start - block)
            if (nl := data.rfind(b"\n")) >= 0:
                start = block + nl + 1
                break
            start = block
        if start == size:
            return None
        fh.seek(start)
        tail = fh.read()
        try:
            json.loads(tail)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser
            pass
        else:
            fh.write(b"\n")
            fh.flush()
            os.fsync(fh.fileno())
            return None
        aside = _aside_path(path)
        with aside.open("xb") as out:
            out.write(tail)
            out.flush()
            os.fsync(out.fileno())
        fh.truncate(start)
        os.fsync(fh.fileno())
    warn(f"{path}: its last line was cut mid-write ({len(tail)} bytes, no newline); moved to {aside}")
    return aside


def _aside_path(path: Path) -> Path:
    """A new name beside `path` for what is set aside from it: `<name>.torn-<UTC time>`, `-2` on when taken."""
    base = f"{path.name}.torn-{datetime.now(UTC).strftime('%Y-%m-%dT%H%M%SZ')}"
    n = 1
    while (aside := path.with_name(base if n == 1 else f"{base}-{n}")).exists():
        n += 1
    return aside


def atomic_write(path: Path, text: str | bytes) -> None:
    """Write `text` to `path` whole or not at all: a temp name of this writer's own, the file and then its
    directory fsynced (a crash leaves the old file or the new one, never a torn or a lost one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        with tmp.open("wb") as fh:
            fh.write(text.encode() if isinstance(text, str) else text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
