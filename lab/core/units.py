"""Quantities as users write them on a command line."""

from __future__ import annotations

import re

from lab.core.errors import UsageError

MIB = 1024**2

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|K|M|G|T)?\s*$", re.IGNORECASE)
_UNITS = {
    "b": 1,
    "k": 1024,
    "kib": 1024,
    "kb": 1000,
    "m": 1024**2,
    "mib": 1024**2,
    "mb": 1000**2,
    "g": 1024**3,
    "gib": 1024**3,
    "gb": 1000**3,
    "t": 1024**4,
    "tib": 1024**4,
    "tb": 1000**4,
}


def parse_size(text: str) -> int:
    """Bytes of a size such as `4GiB`, `512MiB`, `2G` (binary) or `3GB` (decimal); a bare number is bytes."""
    m = _SIZE.match(text)
    if not m:
        raise UsageError(f"{text!r}: not a size (e.g. 4GiB, 512MiB)")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "b").lower()])
