"""The in-process arms driver, built against the assertions-on engine and run on the real tiny models: a
cumulative fill keeps a state at every grid L and times a chunk there, each arm's samples and position checks,
the restored genuine hit's blob and yardstick, bad commands answered without dying, and bad startup inputs as
one clear line with exit 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab.core.settings import Settings
from lab.engine.build import EngineInfo
from lab.inproc import DriverError, DriverSession, build_driver, check_driver, driver_command
from lab.instrument import InstrumentInfo
from lab.models.tiny.archs import GEMMA3_SLIDING_WINDOW as WINDOW

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def driver(engine: EngineInfo, settings: Settings) -> InstrumentInfo:
    return build_driver(engine, settings.cache_dir)


def run(cmd: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=300)


def test_a_fill_then_every_arm_with_its_positions_checked(
    driver: InstrumentInfo, tiny_model: Path, tmp_path: Path
) -> None:
    cmd = driver_command(driver, tiny_model, Ls=[600, 256], news=[16, 8], threads=2)
    raw = tmp_path / "raw.jsonl"
    with DriverSession(cmd, tmp_path / "driver.log", raw) as d:
        assert d.meta["n_ctx"] == 616 and d.meta["tokens"] == "seeded filler"
        before = d.rep(256, 16, 0, ["genuine", "fake"])  # before any fill: that sample fails, with its reason
        assert not before[0]["ok"] and "no depth-256 state yet" in before[0]["reason"] and before[1]["ok"]
        fill = d.fill(0)
        segs = [r for r in fill if r["kind"] == "fill"]
        assert [(r["L"], r["from"]) for r in segs] == [(256, 0), (600, 256)]  # the grid's Ls in order, once
        assert all(r["ms"] > 0 and r["blob_bytes"] > 0 for r in segs) and segs[0]["blob_bytes"] < segs[1]["blob_bytes"]
        chunks = [(r["L"], r["new"]) for r in fill if r["kind"] == "chunk" and r["ok"] and r["ms"] > 0]
        assert chunks == [(256, 8), (256, 16), (600, 8), (600, 16)]
        samples = []
        for rep in range(2):
            for L in (256, 600):
                arms = ["baseline", "fake", "genuine", "plain"]
                samples += d.rep(L, 16, rep, arms[rep:] + arms[:rep])
        with pytest.raises(DriverError, match="not a point of this driver's grid"):
            d.rep(300, 16, 0, ["fake"])
        with pytest.raises(DriverError, match="unknown arm"):
            d.rep(256, 16, 0, ["restore"])
        assert d.rep(256, 8, 0, ["fake"])[0]["ok"]  # still serving after refusals
    assert len(samples) == 2 * 2 * 4 and all(s["ok"] for s in samples), [s for s in samples if not s["ok"]]
    for s in samples:
        assert s["decode_ms"] > 0
        assert s["pos_max"] == (-1 if s["arm"] == "baseline" else s["L"] - 1)  # fabricated / restored / decoded
        if s["arm"] in ("fake", "genuine"):
            assert s["prep_ms"] > 0
        if s["arm"] == "genuine":  # the cache read's blob is the fill's, and the memcpy yardstick ran
            assert s["blob_bytes"] == next(r["blob_bytes"] for r in segs if r["L"] == s["L"]) and s["copy_ms"] > 0
    assert raw.read_text().count('"kind":"sample"') == len(samples) + 3  # every row kept verbatim
    assert raw.read_text().count('"kind":"error"') == 2


@pytest.mark.parametrize("model", ["iswa_model", "oss_model"], ids=["gemma3", "gpt-oss"])
@pytest.mark.parametrize("swa_full", [False, True], ids=["window", "swa-full"])
def test_a_sliding_window_fake_prefix_holds_the_genuine_hit_s_positions(
    driver: InstrumentInfo, request: pytest.FixtureRequest, tmp_path: Path, model: str, swa_full: bool
) -> None:
    """On the tiny gemma3 and gpt-oss (a window of 128 in three of four, or every other, layer) at the depths
    where the window arithmetic is easy to get wrong, with a ubatch of 64: the fake prefix and the restored
    genuine hit hold the same first and last position (the window cache keeps the last 128, with or without
    --swa-full), and every arm decodes new tokens that cross the window, a ubatch boundary, or are more than a
    ubatch."""
    Ls = [100, WINDOW - 1, WINDOW, WINDOW + 1, 200, 300]
    path = request.getfixturevalue(model)
    cmd = driver_command(driver, path, Ls=Ls, news=[20, 100], threads=2, ubatch=64, swa_full=swa_full)
    with DriverSession(cmd, tmp_path / "driver.log", tmp_path / "raw.jsonl") as d:
        d.fill(0)
        samples = [s for L in Ls for new in (20, 100) for s in d.rep(L, new, 0, ["fake", "genuine", "baseline"])]
    assert all(s["ok"] and s["decode_ms"] > 0 for s in samples), [s for s in samples if not s["ok"]]
    for s in samples:
        if s["arm"] != "baseline":
            assert (s["pos_min"], s["pos_max"]) == (max(0, s["L"] - WINDOW), s["L"] - 1), s


def test_bad_startup_inputs_exit_2_with_one_line(driver: InstrumentInfo, tiny_model: Path, tmp_path: Path) -> None:
    r = run(driver_command(driver, tiny_model, Ls=[9000], news=[64], threads=2, n_ctx=4096))
    assert r.returncode == 2 and r.stderr.strip() == "L + new = 9064 does not fit the context (4096)", r.stderr
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("1 2 3")
    cmd = driver_command(driver, tiny_model, Ls=[300], news=[8], threads=2, tokens=tokens, check=True)
    with pytest.raises(DriverError, match="--tokens holds 3 ids, the grid needs 308"):
        check_driver(cmd, tmp_path / "check.log")
    tokens.write_text("1 -5")
    assert "outside the vocabulary" in run(cmd).stderr
    tokens.write_text(" ".join(str(1000 + i) for i in range(308)))
    r = run(cmd)
    assert r.returncode == 0 and r.stdout == "", r.stderr  # --check measures and prints nothing
    with DriverSession(cmd[:-1], tmp_path / "driver.log") as d:
        assert d.meta["tokens"] == "given" and d.meta["flash_attn"] == "auto"


def test_a_threadpool_like_llama_bench_s_on_request(driver: InstrumentInfo, tiny_model: Path, tmp_path: Path) -> None:
    """--threadpool attaches a persistent one (to compare with llama-bench like for like); the default none."""
    for pool in (False, True):
        cmd = driver_command(driver, tiny_model, Ls=[256], news=[16], threads=2, threadpool=pool)
        with DriverSession(cmd, tmp_path / "driver.log") as d:
            assert d.meta["threadpool"] is pool
            d.fill(0)
            assert d.rep(256, 16, 0, ["warmup", "genuine"])[-1]["ok"]
