"""The error policy, the way a user meets it: one clear red line and exit 1 (2 for a bad option), never a
traceback, and nothing created before the inputs are validated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from labcli import lab, one_line_error

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parent.parent


def test_missing_model_is_one_line_and_creates_no_run(tmp_path: Path) -> None:
    r = lab("sweep", "--model", str(tmp_path / "nope.gguf"), "--runs-dir", str(tmp_path / "runs"))
    one_line_error(r, 1, f"model not found: {tmp_path / 'nope.gguf'}")
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_missing_projector_creates_no_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = lab(
        "sweep",
        "--Ls",
        "256",
        "--news",
        "8",
        "--reps",
        "1",
        "--images",
        "320x200",
        "--mmproj",
        str(tmp_path / "no-mmproj.gguf"),
        "--runs-dir",
        str(runs),
    )
    one_line_error(r, 1, "vision projector not found")
    assert not runs.exists() or not list(runs.iterdir()), list(runs.iterdir())


def test_server_that_cannot_start_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    r = lab("sweep", "--Ls", "256", "--news", "8", "--reps", "1", "--model", str(bad), "--runs-dir", str(tmp_path))
    one_line_error(r, 2, "unsupported GGUF version 0")  # the estimate's driver reads the model first: no run
    assert not any(p.is_dir() for p in tmp_path.iterdir())
    r = lab(
        "sweep",
        "--Ls",
        "256",
        "--news",
        "8",
        "--arms",
        "fake,genuine",
        "--model",
        str(bad),
        "--runs-dir",
        str(tmp_path),
    )
    one_line_error(r, 2, "unsupported GGUF version 0")  # without the estimate too: the fake op is checked first
    assert not any(p.is_dir() for p in tmp_path.iterdir())
    # a model the checks accept and a server that cannot start anyway: the run is left incomplete, saying why
    env = {"LAB_SERVER__EXTRA_ARGS": '["--no-such-flag"]'}
    r = lab(
        "sweep",
        "--Ls",
        "256",
        "--news",
        "8",
        "--reps",
        "1",
        "--arms",
        "fake,genuine",
        "--runs-dir",
        str(tmp_path),
        env=env,
    )
    one_line_error(r, 1, "llama-server exited")
    (run_dir,) = (p for p in tmp_path.iterdir() if p.is_dir())
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "incomplete" and "llama-server exited" in m["reason"]


def test_engine_check_exits_1_when_the_contract_fails(tiny_model: Path) -> None:
    """A server with a draft model (speculative decoding, as a user's own flag) refuses n_fake_cached: the check
    must say so, with the reason and the memory type."""
    draft = json.dumps(["--model-draft", str(tiny_model), "--spec-type", "draft-simple"])
    r = lab("engine", "check", "--L", "512", "--new", "16", "--model", str(tiny_model), "--no-layout",
            env={"LAB_SERVER__EXTRA_ARGS": draft})  # fmt: skip
    one_line_error(r, 1, "does not honour the n_fake_cached contract: the fake arm")
    assert "speculative decoding" in r.stderr and "memory type hybrid" in r.stderr, r.stderr  # the reason, named
    assert "NO (http)" in r.stdout, r.stdout


def test_engine_check_passes_on_a_sliding_window_model(iswa_model: Path) -> None:
    """The contract's three arms, then the layout comparison on the model's family (one line)."""
    r = lab("engine", "check", "--L", "512", "--new", "16", "--model", str(iswa_model))
    assert r.returncode == 0, r.stderr + r.stdout
    assert r.stdout.count(" yes") == 3, r.stdout
    line = f"iSWA ({iswa_model.name}): fake prefix lays out as a restored hit: n_kv, cells, mask tiles equal"
    assert line in r.stdout.replace("\n", " "), r.stdout


def test_engine_check_passes_on_the_hybrid(tiny_model: Path) -> None:
    r = lab("engine", "check", "--L", "512", "--new", "16", "--model", str(tiny_model), "--no-layout")
    assert r.returncode == 0, r.stderr + r.stdout
    assert r.stdout.count(" yes") == 3, r.stdout
    r = lab("engine", "check", "--L", "512", "--new", "16", "--model", str(tiny_model), "--json")
    out = json.loads(r.stdout)  # the record the table is printed from
    assert [a["arm"] for a in out["arms"]] == ["baseline", "fake", "genuine"] and out["failure"] == ""
    (layout,) = out["layout"]  # the hybrid's attention cache, compared at every depth and chunk
    assert (layout["family"], layout["ok"], layout["chunks"]) == ("hybrid", True, [64, 512]) and layout["compared"]
    assert all(a["ok"] for a in out["arms"]) and out["arms"][1]["timings"]["cache_n"] == 512


@pytest.mark.parametrize("model", ["tiny_model", "iswa_model", "oss_model"], ids=["hybrid", "gemma3", "gpt-oss"])
def test_engine_check_passes_on_the_newest_release(request: pytest.FixtureRequest, model: str) -> None:
    path = request.getfixturevalue(model)
    args = ["--engine", "latest", "--flavor", "assert", "--L", "512", "--new", "16", "--model", str(path), "--json"]
    args.append("--no-layout")  # the layout on both releases: tests/test_fake_prefix_layout.py
    r = lab("engine", "check", *args)
    assert r.returncode == 0, r.stderr + r.stdout
    out = json.loads(r.stdout)
    assert out["commit"] == "0c1e57098" and out["failure"] == "", out
    assert all(a["ok"] for a in out["arms"]) and out["arms"][1]["timings"]["fake_n"] == 512


def test_bad_trace_line_is_named(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"task_id": "t", "step": 0, "L": 64, "new_text": "ok"}\n{not json\n')
    r = lab("replay-trace", str(trace), "--runs-dir", str(tmp_path / "runs"))
    one_line_error(r, 1, f"{trace}:2:")
    assert not (tmp_path / "runs").exists()


def test_bad_options_exit_2(tmp_path: Path) -> None:
    one_line_error(lab("sweep", "--Ls", "1,x", "--runs-dir", str(tmp_path)), 2, "comma-separated integers")
    one_line_error(lab("sweep", "--Ls", "20000", "--runs-dir", str(tmp_path)), 2, "invalid settings")
    one_line_error(lab("engine", "build", "--flavor", "debugx"), 2, "--flavor must be release or assert")
    one_line_error(lab("engine", "build", "--engine", "0.3.30"), 2, "'0.3.30' is not a supported llama.cpp release")
    assert not list(tmp_path.iterdir())
