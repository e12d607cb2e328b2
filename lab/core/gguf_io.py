"""Small GGUF helpers: import a pinned ``gguf`` package, write a GGUF atomically, read its metadata fast.

:func:`read_gguf_kv` and :func:`read_gguf_metadata` parse only the header and the metadata (KV)
section, incrementally from a buffered file handle: the tensor data is never read, so they cost the
same on a 20 GB model as on a metadata-only file.  They are much faster than ``gguf.GGUFReader``,
which takes ~15 s on a 151,936-token vocab because it builds a memmap view per item.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import struct
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any


def import_gguf(gguf_py_dir: Path | None) -> Any:
    """Import ``gguf``, from ``gguf_py_dir`` (a llama.cpp ``gguf-py`` dir) if given.

    With ``gguf_py_dir`` a differently-located, already-imported ``gguf`` is evicted from
    ``sys.modules`` first.  Without it, whatever ``gguf`` is importable (or already imported,
    possibly a pinned one from an earlier call) is used; the bytes written are the same for
    gguf-py 0.19.0 installed and the pinned tree's copy.
    """
    if gguf_py_dir is None:
        return importlib.import_module("gguf")
    pkg_dir = (Path(gguf_py_dir) / "gguf").resolve()
    if not (pkg_dir / "__init__.py").is_file():
        raise FileNotFoundError(f"no gguf package under {gguf_py_dir}")
    loaded: ModuleType | None = sys.modules.get("gguf")
    loaded_file = getattr(loaded, "__file__", None) if loaded is not None else None
    if loaded_file is not None and Path(loaded_file).resolve().parent == pkg_dir:
        return loaded
    # A different gguf (e.g. the installed one) is cached: drop it so the pinned one is imported.
    for name in [m for m in sys.modules if m == "gguf" or m.startswith("gguf.")]:
        del sys.modules[name]
    src = str(Path(gguf_py_dir).resolve())
    if src in sys.path:
        sys.path.remove(src)
    sys.path.insert(0, src)
    return importlib.import_module("gguf")


@contextlib.contextmanager
def atomic_gguf(gguf: Any, out_path: Path, arch: str) -> Iterator[Any]:
    """A GGUFWriter on a temporary file next to out_path; on success the file is written, synced and renamed
    into place, on any error removed (a reader never sees a partial model)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=out_path.parent, prefix=f".{out_path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        writer = gguf.GGUFWriter(str(tmp), arch)
        yield writer
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# GGUF value type codes (gguf spec) -> struct format of one scalar item.
_GGUF_SCALAR_FMT: dict[int, str] = {
    0: "B",  # UINT8
    1: "b",  # INT8
    2: "H",  # UINT16
    3: "h",  # INT16
    4: "I",  # UINT32
    5: "i",  # INT32
    6: "f",  # FLOAT32
    7: "?",  # BOOL
    10: "Q",  # UINT64
    11: "q",  # INT64
    12: "d",  # FLOAT64
}
_GGUF_STRING = 8
_GGUF_ARRAY = 9

# Bounds no real GGUF comes near (a chat template is kilobytes, a vocabulary a few hundred thousand tokens): a
# count or a length beyond them is a corrupt or hostile header, refused before anything is allocated for it
MAX_STRING_BYTES = 1 << 26
MAX_ARRAY_ITEMS = 1 << 26

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<4sIQQ")  # magic, version, n_tensors, n_kv
_ARRAY_HEADER = struct.Struct("<IQ")  # item type, count


class _KVReader:
    """Sequential little-endian reads from a file through a chunk buffer, refusing to read past its end.

    The metadata is read a chunk at a time, never the whole file; the string loop works on the
    chunk with ``struct.unpack_from`` (one Python call per string, not per read).
    """

    _CHUNK = 1 << 20

    def __init__(self, f: IO[bytes], path: Path) -> None:
        self.f, self.path = f, path
        self.unread = os.fstat(f.fileno()).st_size  # bytes of the file not yet in buf
        self.buf, self.pos = b"", 0

    def _refill(self, need: int) -> None:
        """Make ``buf[pos:]`` hold at least ``need`` bytes (checked first: a corrupt length must raise)."""
        have = len(self.buf) - self.pos
        if need - have > self.unread:
            raise ValueError(f"{self.path}: truncated GGUF metadata (need {need} bytes, {have + self.unread} left)")
        n = min(self.unread, max(need - have, self._CHUNK))
        self.buf = self.buf[self.pos :] + self.f.read(n)
        self.pos = 0
        self.unread -= n

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            self._refill(n)
        s = self.buf[self.pos : self.pos + n]
        self.pos += n
        return s

    def u32(self) -> int:
        (v,) = _U32.unpack(self.take(4))
        return int(v)

    def string(self) -> bytes:
        (n,) = _U64.unpack(self.take(8))
        return self.take(self.bounded(n, 1, MAX_STRING_BYTES, "string"))

    def bounded(self, count: int, item_bytes: int, most: int, what: str) -> int:
        """`count` items of `item_bytes` each, checked against the bound and what is left of the file."""
        left = len(self.buf) - self.pos + self.unread
        if count > most or count * item_bytes > left:
            raise ValueError(
                f"{self.path}: truncated or corrupt GGUF metadata: a {what} of {count:,} items, {left:,} bytes left"
            )
        return count

    def strings(self, count: int) -> list[bytes]:
        self.bounded(count, 8, MAX_ARRAY_ITEMS, "string array")
        out: list[bytes] = []
        append, unpack = out.append, _U64.unpack_from
        for _ in range(count):
            if self.pos + 8 > len(self.buf):
                self._refill(8)
            buf, pos = self.buf, self.pos
            (n,) = unpack(buf, pos)
            if n > MAX_STRING_BYTES:
                raise ValueError(f"{self.path}: corrupt GGUF metadata: a string of {n:,} bytes")
            pos += 8
            if pos + n > len(buf):
                self.pos = pos
                self._refill(n)
                buf, pos = self.buf, self.pos
            append(buf[pos : pos + n])
            self.pos = pos + n
        return out

    def scalars(self, vtype: int, count: int) -> list[Any]:
        self.bounded(count, struct.calcsize(_GGUF_SCALAR_FMT[vtype]), MAX_ARRAY_ITEMS, "array")
        fmt = struct.Struct(f"<{count}{_GGUF_SCALAR_FMT[vtype]}")
        return list(fmt.unpack(self.take(fmt.size)))


def read_gguf_kv(path: Path) -> list[tuple[str, int, int | None, Any]]:
    """Parse the metadata (KV) section of a little-endian GGUF file (version 2 or 3).

    Returns ``(key, value_type, array_item_type | None, value)`` tuples in file order.
    Strings are returned as raw ``bytes`` (GGUFWriter accepts bytes for STRING values),
    so values round-trip exactly.  Only the header and the KV section are read.
    """
    return _parse(Path(path), with_tensors=False)[0]


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]
    ggml_type: int

    @property
    def elements(self) -> int:
        return math.prod(self.dims)


def read_gguf_tensors(path: Path) -> list[TensorInfo]:
    """The tensor infos (name, shape, ggml type) that follow the metadata; no tensor data is read."""
    return _parse(Path(path), with_tensors=True)[1]


def _parse(path: Path, with_tensors: bool) -> tuple[list[tuple[str, int, int | None, Any]], list[TensorInfo]]:
    with path.open("rb") as f:
        r = _KVReader(f, path)
        if r.unread < _HEADER.size:
            raise ValueError(f"{path}: not a GGUF file")
        magic, version, n_tensors, n_kv = _HEADER.unpack(r.take(_HEADER.size))
        if magic != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        if version not in (2, 3):
            raise ValueError(f"{path}: unsupported GGUF version {version}")
        out: list[tuple[str, int, int | None, Any]] = []
        for _ in range(n_kv):
            raw = r.string()
            try:
                key = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{path}: corrupt GGUF metadata: a key that is not UTF-8 ({raw[:16]!r})") from None
            vtype = r.u32()
            if vtype == _GGUF_STRING:
                out.append((key, vtype, None, r.string()))
            elif vtype == _GGUF_ARRAY:
                itype, count = _ARRAY_HEADER.unpack(r.take(_ARRAY_HEADER.size))
                if itype == _GGUF_STRING:
                    items: list[Any] = r.strings(count)
                elif itype in _GGUF_SCALAR_FMT:
                    items = r.scalars(itype, count)
                else:
                    raise ValueError(f"{path}: key {key}: unsupported array item type {itype}")
                out.append((key, vtype, itype, items))
            elif vtype in _GGUF_SCALAR_FMT:
                out.append((key, vtype, None, r.scalars(vtype, 1)[0]))
            else:
                raise ValueError(f"{path}: key {key}: unsupported value type {vtype}")
        tensors: list[TensorInfo] = []
        if with_tensors:
            for _ in range(r.bounded(n_tensors, 24, MAX_ARRAY_ITEMS, "tensor table")):
                name = r.string().decode("utf-8", "replace")
                n_dims = r.u32()
                if not 1 <= n_dims <= 4:
                    raise ValueError(f"{path}: corrupt GGUF tensor info: {name!r} has {n_dims} dimensions")
                dims = struct.unpack(f"<{n_dims}Q", r.take(8 * n_dims))
                ggml_type = r.u32()
                r.take(8)  # the data offset
                tensors.append(TensorInfo(name, tuple(int(d) for d in dims), ggml_type))
    return out, tensors


def _maybe_str(s: bytes) -> str | bytes:
    try:
        return s.decode("utf-8")
    except UnicodeDecodeError:
        return s


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """The metadata of a GGUF file as a ``key -> value`` dict (see :func:`read_gguf_kv` for the cost).

    Works on any GGUF, including one that holds only metadata and zero tensors.  Values are
    Python scalars (``int``, ``float``, ``bool``) or lists of them; strings are ``str`` where they
    are valid UTF-8 and ``bytes`` otherwise, except that string arrays under ``tokenizer.*``
    (e.g. ``tokenizer.ggml.tokens``, ``tokenizer.ggml.merges``) stay ``list[bytes]``: a token need not
    be valid UTF-8 on its own, and decoding 150k of them is wasted work for most callers.
    Example: ``read_gguf_metadata(p)["qwen35moe.block_count"] == 40``.
    """
    meta: dict[str, Any] = {}
    for key, vtype, itype, value in read_gguf_kv(path):
        if vtype == _GGUF_STRING:
            value = _maybe_str(value)
        elif itype == _GGUF_STRING and not key.startswith("tokenizer."):
            value = [_maybe_str(s) for s in value]
        meta[key] = value
    return meta
