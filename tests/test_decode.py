"""Decoding at depth against the real patched server (asserts on) and the tiny model: the decode contract at a few
depths, a typed failure when the server generates fewer tokens than asked, `lab engine decode` end to end, and a
sweep with `--n-out` storing a decode interval on every point."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from labcli import lab

from lab.core.runs import RunFolder
from lab.core.schemas.raw import DECODE_DEPTHS, SWEEP_POINTS, SWEEP_SAMPLES
from lab.engine.contract import ContractClient, filler_tokens, measure_decode, text_step
from lab.engine.server import LlamaServer

pytestmark = pytest.mark.engine

LAB = str(Path(sys.executable).parent / "lab")
REPO = Path(__file__).resolve().parent.parent
TOKENS = filler_tokens(8192, seed=21, n_vocab=151936)


@pytest.mark.parametrize("L", [0, 300, 1000, 2500])
def test_the_fake_arm_decodes_n_out_tokens_at_depth(server: LlamaServer, L: int) -> None:
    step = text_step(TOKENS[:L], TOKENS[L : L + 24])
    results, iv = measure_decode(ContractClient(server), step, n_out=8, reps=2, key=f"L{L}")
    for r in results:
        assert r.ok, r.reason
        assert r.timings is not None and (r.timings.predicted_n, r.timings.cache_n) == (8, L)
        assert r.timings.prompt_n == 24 and r.timings.decode_ms is not None and r.timings.decode_ms > 0
    assert iv is not None and iv.n == 2 and iv.lo <= iv.value <= iv.hi


def test_fewer_generated_tokens_than_asked_is_a_typed_contract_failure(server: LlamaServer) -> None:
    # the context (8192) ends 12 tokens into the generation: the server stops early, and says so in predicted_n
    step = text_step(TOKENS[:8100], TOKENS[8100:8180])
    (r,), iv = measure_decode(ContractClient(server), step, n_out=40, reps=1)
    assert not r.ok and r.kind == "contract" and "!= n_out=40" in r.reason, r
    assert iv is None and server.alive()


def test_lab_engine_decode_prints_a_verdict_per_depth_and_stores_its_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = lab(
        "engine",
        "decode",
        "--depths",
        "300,1200",
        "--reps",
        "2",
        "--n-out",
        "8",
        "--new",
        "16",
        "--runs-dir",
        str(runs),
    )
    assert r.returncode == 0, r.stderr + r.stdout
    # the medians per depth, then the check per depth: each with its interval
    rows = {int(m[0]): m for m in re.findall(r"│\s*(\d+) │\s*(\d+) │\s*16 │\s*8 │(.*)│", r.stdout)}
    assert sorted(rows) == [300, 1200], r.stdout
    assert {int(m[1]) for m in rows.values()} == {284, 1184}  # L = depth - new
    for _depth, _L, cells in rows.values():
        assert len(re.findall(r"\d+\.\d+ \[\d+\.\d+, \d+\.\d+\]", cells)) == 2, cells  # the two medians
    checks = {int(d): v for d, _, v in re.findall(r"│\s*(\d+) │\s*(\d+\.\d+ \[[\d., ]+\])[^│]*│\s*(\w+)\s*│", r.stdout)}
    assert sorted(checks) == [300, 1200] and set(checks.values()) <= {"agree", "disagree", "undecided"}, r.stdout
    assert "1 +- 10%" in r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    assert (
        run.ready and run.manifest().experiment == "decode" and run.manifest().params["decode"]["depths"] == [300, 1200]
    )
    stored = run.read(DECODE_DEPTHS)
    assert [d.depth for d in stored] == [300, 1200] and all(d.server_ms and d.bench_ms for d in stored)
    assert (run.path / "logs" / "llama-bench.log").exists() and (run.path / "logs" / "server.log").exists()
    catalog = tmp_path / "catalog"
    ingest = lab("catalog", "ingest", "--runs-dir", str(runs), "--catalog-dir", str(catalog))
    assert ingest.returncode == 0, ingest.stderr
    assert (catalog / "tables" / "decode_depths.parquet").exists()
    small = ["--depths", "96", "--reps", "1", "--n-out", "4", "--new", "16"]
    r = lab("engine", "decode", *small, "--runs-dir", str(runs), "--json")
    out = json.loads(r.stdout)  # the records the table is printed from, and the run folder
    assert [d["depth"] for d in out["depths"]] == [96] and RunFolder.open(Path(out["run"])).ready


def test_lab_engine_decode_refuses_a_depth_shallower_than_new() -> None:
    r = lab("engine", "decode", "--depths", "32", "--new", "64")
    assert r.returncode == 2 and "at least new" in r.stderr, r.stderr


def test_a_sweep_with_n_out_stores_decode_intervals_on_every_point(tmp_path: Path) -> None:
    grid = ["--Ls", "256,1024", "--news", "16", "--reps", "2", "--n-out", "8", "--arms", "fake,genuine"]
    r = lab("sweep", *grid, "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr + r.stdout
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = RunFolder.open(run_dir)
    assert run.manifest().params["sweep"]["n_out"] == 8
    points = run.read(SWEEP_POINTS)
    assert sorted(p.L for p in points) == [256, 1024]
    for p in points:
        assert p.n_out == 8 and p.decode_ci is not None and p.decode_ci.n == 2
        assert p.decode_ci.lo <= p.decode_ci.value <= p.decode_ci.hi
    for s in run.read(SWEEP_SAMPLES):
        if s.arm == "fake":
            assert s.predicted_n == 8 and s.decode_ms is not None and s.cache_n == s.L
        else:
            assert s.predicted_n is None and s.decode_ms is None  # only the fake arm generates
    # the decode column is not the answer's: every column with `lab show RUN --wide`
    assert "decode ms/token at L+new" not in r.stdout
    wide = lab("show", run_dir.name, "--runs-dir", str(tmp_path), "--wide")
    assert wide.returncode == 0 and "decode ms/token at L+new" in wide.stdout, wide.stderr
