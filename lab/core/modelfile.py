"""What a model file is, read where it lies: its size, mtime and sha256 (memoised by path, size and mtime: a
20 GB GGUF is hashed once per machine) and its GGUF metadata (the header and the metadata section only).

Standard library only (with lab.core.gguf_io and lab.core.hashing), so the same code runs on a target host
before anything is pushed there: lab.remote.modelcheck sends the three modules' source to the host's bare
`python3 -c` and reads back one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from lab.core.gguf_io import read_gguf_metadata
from lab.core.hashing import file_sha256

MEMO = "model-sha256.json"  # under a cache dir: {"<resolved path>|<size>|<mtime_ns>": sha256}


def memo_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"


def model_sha256(path: Path, cache_dir: Path) -> str:
    """sha256 of a model file, memoised in cache_dir by (path, size, mtime): a 20 GB GGUF is hashed once."""
    memo_file, key = cache_dir / MEMO, memo_key(path)
    try:  # shared by every clone and process on the machine: written whole, read forgivingly
        memo: dict[str, str] = json.loads(memo_file.read_text()) if memo_file.exists() else {}
    except (ValueError, OSError):
        memo = {}  # a memo is only a memo: hash again
    if key not in memo:
        memo[key] = file_sha256(path)
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo_file.parent, prefix=f".{memo_file.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:  # this writer's own temp file, whole before it replaces the memo
            f.write(json.dumps(memo, indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, memo_file)
    return memo[key]


def model_record(path: Path, cache_dir: Path, origin: str | None = None) -> dict[str, Any]:
    """The model a run records: its path, sha256 and size. `origin`: the host's own description of the file
    (JSON, lab.remote.modelcheck) when the lab sees it through a container's read-only mount; taken when the
    file's size and mtime match it (the mount shows the host's file), so the run records the host's path and
    the host's hash is not computed again."""
    st = path.stat()
    if origin:
        o = json.loads(origin)
        if (o.get("size"), o.get("mtime_ns")) == (st.st_size, st.st_mtime_ns):
            return {"path": str(o["path"]), "sha256": str(o["sha256"]), "size": st.st_size, "seen_as": str(path)}
    return {"path": str(path), "sha256": model_sha256(path, cache_dir), "size": st.st_size}


def _plain(v: Any) -> Any:
    """A metadata value as JSON can carry it (bytes decoded, replacing what is not UTF-8)."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def describe(path: Path, cache_dir: Path) -> dict[str, Any]:
    """The file as a run records it, and its metadata (the tokenizer's arrays left out: only their lengths), or
    {"error": one line} when it is missing, unreadable or not a GGUF. The header is read before the file is
    hashed: a file that is not a model is refused without reading it whole."""
    if not path.is_file():
        return {"error": f"{path}: no such file" if not path.exists() else f"{path}: not a file"}
    try:
        meta = read_gguf_metadata(path)
    except (ValueError, OSError) as e:
        return {"error": str(e).splitlines()[0] if str(e) else f"{path}: not a GGUF file"}
    short = {k: (len(v) if k.startswith("tokenizer.") and isinstance(v, list) else _plain(v)) for k, v in meta.items()}
    st = path.stat()
    return {
        "path": str(path.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "sha256": model_sha256(path, cache_dir),
        "meta": short,
    }


def main(argv: list[str]) -> int:
    """`PATH CACHE_DIR` (lab.remote.modelcheck runs it with the host's `python3 -c`): one JSON line describing PATH."""
    with contextlib.suppress(BrokenPipeError):
        print(json.dumps(describe(Path(argv[0]).expanduser(), Path(argv[1]).expanduser())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
