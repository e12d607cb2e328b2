"""The in-process arms driver, built against the assertions-on engine and run on the real tiny models: each
arm's samples and position checks, the restore blob, and bad inputs as one clear line with exit 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lab.engine.build import EngineInfo
from lab.inproc import build_driver, driver_command
from lab.instrument import InstrumentInfo
from lab.settings import Settings

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def driver(engine: EngineInfo, settings: Settings) -> InstrumentInfo:
    return build_driver(engine, settings.cache_dir)


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_every_arm_measures_with_its_positions_checked(
    driver: InstrumentInfo, tiny_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "arms.jsonl"
    r = run(driver_command(driver, tiny_model, out, Ls=[256, 600], news=[16], reps=2, threads=2))
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["kind"] == "meta" and rows[0]["n_ctx"] == 616
    samples = [x for x in rows if x["kind"] == "sample"]
    assert len(samples) == 2 * 2 * 4 and all(s["ok"] for s in samples), [s for s in samples if not s["ok"]]
    for s in samples:
        assert s["decode_ms"] > 0
        if s["arm"] in ("fake", "restore"):
            assert s["pos_max"] == s["L"] - 1 and s["prep_ms"] > 0  # fabricated / restored to depth L
    blobs = {s["L"]: s["blob_bytes"] for s in samples if s["arm"] == "restore"}
    assert 0 < blobs[256] < blobs[600]  # attention KV grows with L on top of the fixed recurrent state
    order = [s["arm"] for s in samples if s["L"] == 256 and s["rep"] == 0]
    assert order != [s["arm"] for s in samples if s["L"] == 256 and s["rep"] == 1]  # rotating order


def test_bad_inputs_exit_2_with_one_line(
    driver: InstrumentInfo, tiny_model: Path, iswa_model: Path, tmp_path: Path
) -> None:
    r = run(driver_command(driver, tiny_model, tmp_path / "a.jsonl", Ls=[9000], news=[64], reps=1, threads=2,
                           n_ctx=4096))  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip() == "L + new = 9064 does not fit the context (4096)", r.stderr
    r = run(driver_command(driver, iswa_model, tmp_path / "b.jsonl", Ls=[256], news=[16], reps=1, threads=2))
    assert r.returncode == 2 and "no fake-prefix op" in r.stderr.strip().splitlines()[-1], r.stderr
    assert not (tmp_path / "a.jsonl").exists()  # refused before anything was written


def test_given_tokens_the_check_mode_and_the_memcpy_yardstick(
    driver: InstrumentInfo, tiny_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "arms.jsonl"
    cmd = driver_command(driver, tiny_model, out, Ls=[300], news=[8], reps=1, threads=2, tokens="-",
                         arms=("genuine", "restore"))  # fmt: skip
    r = subprocess.run(cmd, input=" ".join(str(1000 + i) for i in range(308)), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["tokens"] == "given" and rows[0]["flash_attn"] == "auto"
    restore = next(x for x in rows if x.get("arm") == "restore")
    assert restore["copy_ms"] > 0 and restore["blob_bytes"] > 0
    r = subprocess.run(cmd, input="1 2 3", capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == "--tokens holds 3 ids, L + new needs 308", r.stderr
    r = subprocess.run(cmd, input="1 -5", capture_output=True, text=True)
    assert r.returncode == 2 and "outside the vocabulary" in r.stderr, r.stderr
    check = driver_command(driver, tiny_model, None, Ls=[300], news=[8], reps=1, threads=2, check=True)
    r = subprocess.run(check, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "", r.stderr
