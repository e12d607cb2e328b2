"""The fake prefix lays out as a restored hit: what the kernels see, compared exactly (lab.instrument.layout).

Engine tier: the profiler's --layout pass on the tiny model of each memory family (kv, iSWA twice, hybrid), on
every supported release, at L in {0, w-1, w, w+1, 4w, 8192} and chunks of 64 and 512. Fast tier: the comparison
itself on rows made here, so a difference is seen and named."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from lab.core.settings import Settings
from lab.engine.cells import CellDumpError, parse_cell_dumps
from lab.engine.slot_layout import slot_layout
from lab.engine.source import PreparedSource
from lab.instrument.layout import check_layout, compare, layout_depths
from lab.models.resolve import ensure_tiny_model
from lab.models.tiny.archs import tiny_spec

from conftest import ENGINES, EngineOf, server_settings


@pytest.fixture(scope="session")
def kv_model(settings: Settings, source: PreparedSource) -> Path:
    """The tiny qwen3moe: full attention in every layer (a plain KV cache)."""
    return ensure_tiny_model(settings.cache_dir, source, tiny_spec("qwen3moe", n_layer=4))


MODELS = ["kv_model", "iswa_model", "oss_model", "tiny_model"]
FAMILIES = {"kv_model": "kv", "iswa_model": "iSWA", "oss_model": "iSWA", "tiny_model": "hybrid"}


@pytest.mark.engine
@pytest.mark.parametrize("release", ENGINES)
@pytest.mark.parametrize("model", MODELS, ids=["qwen3moe", "gemma3", "gpt-oss", "qwen35moe"])
def test_a_fake_prefix_lays_out_as_a_restored_hit(
    engine_of: EngineOf,
    settings: Settings,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    release: str,
    model: str,
) -> None:
    path: Path = request.getfixturevalue(model)
    report = check_layout(engine_of(release), settings.cache_dir, path, tmp_path)
    assert report.family == FAMILIES[model]
    assert report.differences == [] and report.live_differences == [], report.line()
    # every attention layer and cache at every depth and chunk was compared (a pass that printed nothing fails)
    attn = sum(k != "recurrent" for k in report.kinds)
    caches = 2 if report.family == "iSWA" else 1
    assert report.compared == len(report.depths) * len(report.chunks) * (attn + len(report.kinds) + 1 + caches)
    assert report.line().startswith(f"{FAMILIES[model]} ({path.name}): fake prefix lays out as a restored hit")


@pytest.mark.engine
@pytest.mark.parametrize("release", ENGINES)
@pytest.mark.parametrize("model", ["iswa_model", "oss_model"], ids=["gemma3", "gpt-oss"])
def test_a_fake_slot_holds_a_genuine_hits_cells(
    engine_of: EngineOf, settings: Settings, request: pytest.FixtureRequest, release: str, model: str
) -> None:
    """Through llama-server: the step after n_fake_cached = L is placed in a cache laid out cell by cell as after
    the genuine hit of L restored from a saved slot, on both sides of the window and past it (a ubatch of 512)."""
    path: Path = request.getfixturevalue(model)
    got = slot_layout(engine_of(release), path, server_settings(), settings.cache_dir, [127, 128, 129, 512], 64)
    assert got.differences == [] and got.compared == 4 * 2, got  # every L, both caches (full and window)


# --- the comparison alone (fast) -------------------------------------------------------------------------


def dump(size: int, n_swa: int, head: int, pos: dict[int, int]) -> str:
    """find_slot's debug dump of one cache (llama-kv-cache.cpp, LLAMA_KV_CACHE_DEBUG=3), as llama.cpp writes it."""
    seqs = "".join(("0" if i in pos else ".") + (" *\n" if i % 256 == 255 else "") for i in range(size))
    cells = "".join(
        f"{pos.get(i, '.'):<5}" + (" *" if i % 256 == 255 else "") + ("\n" if i % 64 == 63 else "") for i in range(size)
    )
    head_line = f"find_slot: stream[0], n = {size:5d}, used = {len(pos):5d}, head = {head:5d}, size = {size:5d}, "
    return f"{head_line}n_swa = {n_swa:5d}\n\n{seqs}\n\n{cells}\n"


def rows(depth: int = 256) -> list[dict[str, Any]]:
    """One window layer's rows after each fill, equal but for where the live ring put the window."""
    out: list[dict[str, Any]] = []
    for fill in ("live", "restored", "fake"):
        where = {"process": 0, "fill": fill, "depth": depth}
        first = 0 if fill != "live" else 128  # the live ring holds the window elsewhere
        out.append(
            {"kind": "cells", **where, "dump": dump(768, 128, 128, {first + i: depth - 128 + i for i in range(128)})}
        )
        out.append({"kind": "graph", **where, "layer": 0, "nodes": 27, "shapes": "a", "params": fill == "live"})
        out.append(
            {
                "kind": "attn",
                **where,
                "layer": 0,
                "op": "FLASH_ATTN_EXT",
                "n_kv": 768,
                "rows": 512,
                "unmasked": [[128, 0, 0, 512]],
                "tiles": 24,
                "mask": fill == "live",
                "params": "p",
                "k_writes": [[128, 512]] if fill != "live" else [[0, 128], [256, 384]],
            }
        )
    return out


@pytest.mark.fast
def test_equal_layouts_compare_equal_and_a_live_ring_may_differ_in_cells() -> None:
    restored, live, tiles, compared = compare(rows(), ("window",), chunk=512)
    assert (restored, live, tiles, compared) == ([], [], [], 3)


@pytest.mark.fast
def test_a_split_window_is_named_by_kind_depth_and_field() -> None:
    split = copy.deepcopy(rows())
    fake_attn = next(r for r in split if r["kind"] == "attn" and r["fill"] == "fake")
    fake_attn.update(tiles=25, k_writes=[[0, 1], [128, 511]], mask="other")
    fake_cells = next(r for r in split if r["kind"] == "cells" and r["fill"] == "fake")
    fake_cells["dump"] = fake_cells["dump"].replace("head =   128", "head =     0")
    restored, live, tiles, _ = compare(split, ("window",), chunk=512)
    assert restored == [
        "window layer 0, L=256 chunk=512: tiles 25 after the fake prefix, 24 after the restored one",
        'window layer 0, L=256 chunk=512: mask "other" after the fake prefix, false after the restored one',
        "window layer 0, L=256 chunk=512: k_writes [[0, 1], [128, 511]] after the fake prefix, [[128, 512]] after "
        "the restored one",
        "window cache, L=256 chunk=512: head 0 after the fake prefix, 128 after the restored one",
    ]
    assert live == [] and tiles == ["window layer 0, L=256 chunk=512: 25 tiles, 24 after the live fill"]


@pytest.mark.fast
def test_counts_that_differ_from_a_live_fill_are_errors_and_a_missing_row_too() -> None:
    short = copy.deepcopy(rows())
    next(r for r in short if r["kind"] == "attn" and r["fill"] == "live")["n_kv"] = 1024
    _, live, _, _ = compare(short, ("window",), chunk=512)
    assert live == ["window layer 0, L=256 chunk=512: n_kv 768 after the fake prefix, 1024 after the live fill"]
    missing = [r for r in rows() if not (r["kind"] == "graph" and r["fill"] == "restored")]
    restored, _, _, _ = compare(missing, ("window",), chunk=512)
    assert restored == ["window layer 0, L=256 chunk=512: no row after the real prefix to compare with"]


@pytest.mark.fast
def test_the_depths_straddle_the_window() -> None:
    assert layout_depths(128) == [0, 127, 128, 129, 512, 8192]
    assert layout_depths(None) == [0, 511, 512, 513, 2048, 8192]


@pytest.mark.fast
def test_a_cell_dump_is_read_cell_by_cell_and_a_cut_one_is_refused() -> None:
    text = "D prepare: other log line\n" + dump(512, 0, 300, {i: 10000 + i for i in range(300)} | {400: 7})
    text += "D " + dump(256, 128, 3, {0: 5, 1: 6, 2: 7})
    full, window = parse_cell_dumps(text)
    assert (full.kind, full.size, full.head, full.used, full.cells) == (
        "full",
        512,
        300,
        301,
        ((0, 10000, 300), (400, 7, 1)),
    )
    assert (window.kind, window.n_swa, window.cells) == ("window", 128, ((0, 5, 3),))
    with pytest.raises(CellDumpError, match="ended after 448 of 512 cells"):
        parse_cell_dumps("\n".join(dump(512, 0, 0, {0: 0}).rstrip().splitlines()[:-1]))  # the last 64 cells cut
