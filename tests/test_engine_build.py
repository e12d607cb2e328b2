"""The cached CPU build: a repeat is a no-op, a changed patch rebuilds, `lab engine info --json`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from labcli import lab

from lab.engine.build import STAMP, EngineInfo, _run_logged

pytestmark = pytest.mark.engine

LAB = [str(Path(sys.executable).parent / "lab")]


def test_assert_flavor_drops_ndebug(engine: EngineInfo) -> None:
    assert engine.flavor == "assert"
    assert any(f.startswith("-DCMAKE_CXX_FLAGS_RELEASE=") and "NDEBUG" not in f for f in engine.flags)
    assert "-DBUILD_SHARED_LIBS=ON" in engine.flags and "-DLLAMA_BUILD_UI=OFF" in engine.flags
    assert engine.server.exists() and engine.bench.exists()
    assert (engine.lib_dir / "libllama.so").exists()
    assert (engine.include_dir / "llama.h").read_text().count("llama_memory_seq_fake_prefix") == 1


def test_repeated_build_is_a_no_op(engine: EngineInfo) -> None:
    stamp = engine.build_dir / STAMP
    log = engine.build_dir / "lab-build.log"
    before = (stamp.stat().st_mtime_ns, log.stat().st_size, engine.server.stat().st_mtime_ns)
    r = lab("engine", "build", "--flavor", "assert", "--quiet")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(engine.server)
    after = (stamp.stat().st_mtime_ns, log.stat().st_size, engine.server.stat().st_mtime_ns)
    assert after == before, "cmake ran again"  # a stamp check: no build log line, no new binary


def test_engine_info_json(engine: EngineInfo) -> None:
    r = lab("engine", "info", "--json", "--flavor", "assert")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    for key in ("server", "bench", "lib_dir", "include_dir", "source", "patch_sha256", "flags"):
        assert key in info, key
    assert info["source"]["commit"] == "465b1f0e7"
    assert info["source"]["origin"].startswith("pypi:llama-cpp-python==0.3.27")
    assert len(info["source"]["sha256"]) == 64
    assert info["patch_sha256"] == engine.patch_sha256
    assert Path(info["server"]) == engine.server


def test_invalid_setting_is_refused_naming_the_key() -> None:
    r = lab("engine", "build", env={"LAB_ENGINE__SOURCE_MODE": "svn"})
    assert r.returncode == 2
    assert "source_mode" in r.stderr


def test_a_build_step_whose_output_cuts_a_character_in_two_is_logged_not_fatal(tmp_path: Path) -> None:
    """Two compilers writing to one pipe can cut a UTF-8 character (gcc's quotes are three bytes) in two."""
    log = tmp_path / "build.log"
    _run_logged(
        ["sh", "-c", r"printf '[  9%%] Building x.o\n\342\200 cut\n\200\230 rest\n'"], log, dict(os.environ), None
    )
    text = log.read_text()
    assert "[  9%] Building x.o" in text and "cut" in text and "rest" in text and "\ufffd" in text


def test_a_bundle_of_another_release_is_refused_not_run_under_the_wrong_name(
    engine: EngineInfo, tmp_path: Path
) -> None:
    """A target host runs the bundle it was pushed (engine.prebuilt): `--engine latest` with the pin's bundle is
    one line naming both releases; the pin's own is taken as it is."""
    bundle = tmp_path / "engine"
    (bundle / "bin").mkdir(parents=True)
    for binary in (engine.server, engine.bench):
        (bundle / "bin" / binary.name).symlink_to(binary)
    (bundle / STAMP).write_text((engine.build_dir / STAMP).read_text())
    env = {"LAB_ENGINE__PREBUILT": str(bundle)}
    ok = lab("engine", "info", "--json", env=env)
    assert ok.returncode == 0 and json.loads(ok.stdout)["release"] == "pin", ok.stderr
    r = lab("engine", "info", "--engine", "latest", env=env)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "is the pin release's build; this run asks for latest" in r.stderr
