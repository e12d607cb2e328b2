"""The per-node profiler instrument, built against the engine and run on the real tiny model."""

from __future__ import annotations

import json
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from lab.engine.build import EngineInfo
from lab.instrument import InstrumentInfo, build_instrument

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def info(engine: EngineInfo) -> InstrumentInfo:
    from lab.core.settings import load_settings

    built = build_instrument(engine, load_settings().cache_dir)
    assert build_instrument(engine, load_settings().cache_dir) == built  # cached: a stamp check
    return built


def run(info: InstrumentInfo, model: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(info.binary), "--model", str(model), "--out", str(out), "--chunk", "128", "-t", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def rows(info: InstrumentInfo, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("prof") / "prof.jsonl"
    r = run(info, tiny_model, out, "--depths", "256,0,128", "--reps", "2", "--process", "3", "--check-depth", "128")
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_meta_and_both_modes_at_every_depth_and_rep(rows: list[dict[str, Any]]) -> None:
    meta = rows[0]
    assert meta["kind"] == "meta" and meta["n_layer"] == 8 and meta["chunk"] == 128 and meta["fill"] == "fake"
    assert meta["process"] == 3 and meta["reps"] == 2 and meta["n_ctx_train"] == 262144
    walls = [r for r in rows if r["kind"] in ("fused", "timed")]
    probes = Counter((r["kind"], r["rep"], r["depth"]) for r in walls if not r["check"])
    assert probes == {(k, rep, d): 1 for k in ("fused", "timed") for rep in (0, 1) for d in (0, 128, 256)}
    assert all(r["process"] == 3 and r["ms"] > 0 for r in walls)
    # the check: at each depth up to 128, every rep times each mode after a fake prefix and a real fill
    checked = Counter((r["kind"], r["fill"], r["rep"], r["depth"]) for r in walls if r["check"])
    assert checked == {
        (k, f, rep, d): 1 for k in ("fused", "timed") for f in ("fake", "real") for rep in (0, 1) for d in (0, 128)
    }


def test_nodes_cover_the_hybrid_graph(rows: list[dict[str, Any]]) -> None:
    nodes = [r for r in rows if r["kind"] == "node"]
    assert nodes and all(r["ms"] >= 0 and r["calls"] >= 1 for r in nodes)
    by_chunk: dict[tuple[Any, ...], set[tuple[str, str]]] = defaultdict(set)
    for r in nodes:
        by_chunk[(r["check"], r["fill"], r["rep"], r["depth"])].add((r["name"], r["op"]))
    graphs = list(by_chunk.values())
    assert all(g == graphs[0] for g in graphs), "the same graph at every depth, rep and fill"
    ops = {op for _, op in graphs[0]}
    assert {"MUL_MAT", "MUL_MAT_ID", "GATED_DELTA_NET", "SSM_CONV"} <= ops
    assert "FLASH_ATTN_EXT" in ops or "SOFT_MAX" in ops
    # weight names identify projections exactly (the categoriser's second signal)
    src0 = {r["src0"] for r in nodes if r["op"] == "MUL_MAT"}
    assert "blk.3.attn_q.weight" in src0 and "blk.0.attn_qkv.weight" in src0
    # the per-node clocks run inside the TIMED wall, so their sum is positive and never exceeds it (how much
    # scheduler glue lies between the nodes depends on the machine's load: the overhead benchmark measures it)
    for key in by_chunk:
        node_ms = sum(r["ms"] for r in nodes if (r["check"], r["fill"], r["rep"], r["depth"]) == key)
        wall = next(
            r["ms"] for r in rows if r["kind"] == "timed" and (r["check"], r["fill"], r["rep"], r["depth"]) == key
        )
        assert 0 < node_ms <= wall * 1.01, (key, node_ms, wall)


def test_the_cumulative_pass_is_a_mode(info: InstrumentInfo, tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "real.jsonl"
    r = run(info, tiny_model, out, "--depths", "0,256", "--fill", "real", "--reps", "1")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    walls = [(x["kind"], x["fill"], x["depth"]) for x in rows if x["kind"] in ("fused", "timed")]
    # only the listed depths are recorded; the pass decodes every chunk between them
    assert sorted(walls) == sorted((k, "real", d) for k in ("fused", "timed") for d in (0, 256))
    assert r.stderr.count("progress ") == 4


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--depths", "0,128,128"], "--depths lists depth 128 twice"),
        (["--depths", "0,-128"], "--depths takes whole numbers >= 0 separated by commas, not '-128'"),
        (["--depths", "0,300000"], "depth 300000 and a chunk of 128 pass the model's context of 262144 tokens"),
        (["--depths", "0,100", "--fill", "real"], "--fill real reaches depths at multiples of --chunk 128, not 100"),
        (["--depths", "0", "--fill", "sometimes"], "--fill is fake or real, not sometimes"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    info: InstrumentInfo, tiny_model: Path, tmp_path: Path, args: list[str], says: str
) -> None:
    out = tmp_path / "bad.jsonl"
    r = run(info, tiny_model, out, *args)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == says, r.stderr
    assert not out.exists()
