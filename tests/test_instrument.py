"""The per-node profiler instrument, built against the engine and run on the real tiny model."""

from __future__ import annotations

import json
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from lab.engine.build import EngineInfo
from lab.instrument import build_instrument

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def rows(engine: EngineInfo, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    from lab.core.settings import load_settings

    info = build_instrument(engine, load_settings().cache_dir)
    assert build_instrument(engine, load_settings().cache_dir) == info  # cached: a stamp check
    out = tmp_path_factory.mktemp("prof") / "prof.jsonl"
    cmd = [str(info.binary), "--model", str(tiny_model), "--out", str(out), "--chunk", "128"]
    cmd += ["--max-depth", "256", "--cycles", "2", "-t", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_meta_and_both_passes_at_every_depth(rows: list[dict[str, Any]]) -> None:
    meta = rows[0]
    assert meta["kind"] == "meta" and meta["n_layer"] == 8 and meta["chunk"] == 128 and meta["max_depth"] == 256
    walls = Counter((r["kind"], r["cycle"], r["depth"]) for r in rows if r["kind"] in ("fused", "timed"))
    assert set(walls) == {(k, c, d) for k in ("fused", "timed") for c in (0, 1) for d in (0, 128, 256)}
    assert all(n == 1 for n in walls.values())
    assert all(r["ms"] > 0 for r in rows if r["kind"] in ("fused", "timed"))


def test_nodes_cover_the_hybrid_graph(rows: list[dict[str, Any]]) -> None:
    nodes = [r for r in rows if r["kind"] == "node"]
    assert nodes and all(r["ms"] >= 0 and r["calls"] >= 1 for r in nodes)
    by_depth: dict[tuple[int, int], set[tuple[str, str]]] = defaultdict(set)
    for r in nodes:
        by_depth[(r["cycle"], r["depth"])].add((r["name"], r["op"]))
    graphs = list(by_depth.values())
    assert all(g == graphs[0] for g in graphs), "the same graph at every depth and cycle"
    ops = {op for _, op in graphs[0]}
    assert {"MUL_MAT", "MUL_MAT_ID", "GATED_DELTA_NET", "SSM_CONV"} <= ops
    assert "FLASH_ATTN_EXT" in ops or "SOFT_MAX" in ops
    # weight names identify projections exactly (the categoriser's second signal)
    src0 = {r["src0"] for r in nodes if r["op"] == "MUL_MAT"}
    assert "blk.3.attn_q.weight" in src0 and "blk.0.attn_qkv.weight" in src0
    # the per-node clocks run inside the TIMED wall, so their sum is positive and never exceeds it (how much
    # scheduler glue lies between the nodes depends on the machine's load: the overhead benchmark measures it)
    for (cycle, depth), _ in by_depth.items():
        node_ms = sum(r["ms"] for r in nodes if (r["cycle"], r["depth"]) == (cycle, depth))
        wall = next(r["ms"] for r in rows if r["kind"] == "timed" and (r["cycle"], r["depth"]) == (cycle, depth))
        assert 0 < node_ms <= wall * 1.01, (cycle, depth, node_ms, wall)
