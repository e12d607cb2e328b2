"""Deterministic PNG images in pure Python (zlib + struct, numpy for speed; no Pillow)."""

from __future__ import annotations

import struct
import zlib

import numpy as np

_TILE = 32  # solid-colour tiles: a screenshot-like image that compresses well


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def make_png(width: int, height: int, seed: int = 0) -> bytes:
    """An 8-bit RGB PNG: seeded random colour tiles with a light grid; same arguments, same bytes."""
    if width <= 0 or height <= 0:
        raise ValueError(f"width and height must be > 0, got {width}x{height}")
    rng = np.random.default_rng(seed)
    tiles = rng.integers(0, 256, size=(-(-height // _TILE), -(-width // _TILE), 3), dtype=np.uint8)
    rgb = np.repeat(np.repeat(tiles, _TILE, axis=0), _TILE, axis=1)[:height, :width]
    rgb[::_TILE, :] = 255
    rgb[:, ::_TILE] = 255
    rows = np.concatenate([np.zeros((height, 1), dtype=np.uint8), rgb.reshape(height, width * 3)], axis=1)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit truecolour, no interlace
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 9))
        + _chunk(b"IEND", b"")
    )


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk; ValueError if it is not a PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG file")
    w, h = struct.unpack(">II", data[16:24])
    return int(w), int(h)


def png_check(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG that really decodes: its chunks are whole and its image data inflates;
    ValueError naming what is wrong otherwise."""
    width, height = png_size(data)
    pos, idat, end = 8, b"", False
    while pos + 8 <= len(data) and not end:
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if pos + 12 + length > len(data):
            raise ValueError(f"the {kind.decode(errors='replace')} chunk is cut short")
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        end = kind == b"IEND"
        pos += 12 + length
    if not end:
        raise ValueError("no IEND chunk (truncated)")
    try:
        zlib.decompress(idat)
    except zlib.error as e:
        raise ValueError(f"its image data does not inflate ({e})") from e
    return width, height
