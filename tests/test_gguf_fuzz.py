"""The GGUF reader against truncated, mutated and sparse copies of the real tiny model: every one is read or
refused with one line naming the file (a ValueError the callers turn into their one-line errors), never
another exception, and never allocating beyond what the file holds."""

from __future__ import annotations

import random
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from lab.core.gguf_io import read_gguf_metadata, read_gguf_tensors

pytestmark = pytest.mark.engine

CASES = 500
HEAD = 6 << 20  # the tiny model's header and metadata, and a little of its tensor data


def outcome(path: Path, trace: bool = True) -> tuple[str, int]:
    """('read'|'refused', peak bytes the read allocated when traced); anything but a ValueError propagates."""
    if trace:
        tracemalloc.start()
    try:
        read_gguf_metadata(path)
        read_gguf_tensors(path)  # the tensor table after the metadata (the cost model reads its types)
        result = "read"
    except ValueError as e:
        assert str(e).startswith(str(path)) and "\n" not in str(e), e
        result = "refused"
    finally:
        peak = tracemalloc.get_traced_memory()[1] if trace else 0
        tracemalloc.stop()
    return result, peak


def test_truncated_and_mutated_copies_are_read_or_refused_in_one_line(tiny_model: Path, tmp_path: Path) -> None:
    head = tiny_model.read_bytes()[:HEAD]
    rng = random.Random(0)
    path = tmp_path / "fuzz.gguf"
    seen = {"read": 0, "refused": 0}
    for i in range(CASES):
        data = bytearray(head)
        if i % 2 == 0:  # truncated anywhere in the metadata
            data = data[: rng.randrange(0, len(data))]
        else:  # mutated: random bytes, or a length / count field made huge, in the first 64 KiB (of 1 MiB)
            data = data[: 1 << 20]
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(0, 1 << 16)
                if rng.random() < 0.5:
                    data[at] = rng.randrange(256)
                else:
                    data[at : at + 8] = struct.pack("<Q", rng.choice([1 << 61, 1 << 40, 2**64 - 1, 1 << 27]))
        path.write_bytes(bytes(data))
        result, peak = outcome(path, trace=i % 2 == 1)  # a truncated file holds less than the whole one
        seen[result] += 1
        # Python objects for what the file holds (a short token costs more as a bytes object than on disk), and
        # nothing sized by a header's claim
        assert peak < 8 * len(data) + (4 << 20), (i, peak, len(data))
    assert seen["refused"] >= CASES // 2 and seen["read"] >= 1, seen


def test_a_sparse_file_claiming_a_huge_string_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "sparse.gguf"
    with path.open("wb") as f:
        f.write(struct.pack("<4sIQQ", b"GGUF", 3, 0, 1) + struct.pack("<Q", 3) + b"key" + struct.pack("<I", 8))
        f.write(struct.pack("<Q", 1 << 32))  # a 4 GiB string value
        f.truncate(8 << 30)  # 8 GiB of holes: the file is big enough to hold it
    result, peak = outcome(path)
    assert result == "refused" and peak < 4 << 20, peak


def test_the_cli_says_one_line_for_a_corrupt_model(tiny_model: Path, tmp_path: Path) -> None:
    data = bytearray(tiny_model.read_bytes()[:HEAD])
    data[24:32] = struct.pack("<Q", 1 << 61)  # the first key's length
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    lab = str(Path(sys.executable).parent / "lab")
    r = subprocess.run([lab, "model", "cost", str(bad)], capture_output=True, text=True, timeout=120)
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "corrupt GGUF metadata" in r.stderr, r.stderr
