"""The shared engine cache is keyed by source + patch + flags: a second patch set (a second clone, a second
process) builds beside the first and never changes a binary the first one's runs use; a prune never removes a
build a run holds.

On a small CMake project standing in for llama.cpp (same targets, same layout), built through the lab's own
path mode, so each build takes seconds; the real engine's version of the first check is the slow test below.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from labcli import LabResult, lab, one_line_error

from lab.core.settings import EngineSettings, Settings
from lab.engine.build import STAMP, BuildError, EngineInfo, build_engine, in_use, prune_engines
from lab.engine.source import PreparedSource

LAB = str(Path(sys.executable).parent / "lab")

CMAKE = """cmake_minimum_required(VERSION 3.14)
project(toy C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(llama-server main.c)
add_executable(llama-bench main.c)
add_executable(llama main.c)
"""
MAIN = '#include <stdio.h>\nint main(void) { puts("pristine"); return 0; }\n'


def _patch_saying(word: str) -> str:
    return (
        "--- a/main.c\n+++ b/main.c\n@@ -1,2 +1,2 @@\n #include <stdio.h>\n"
        '-int main(void) { puts("pristine"); return 0; }\n'
        f'+int main(void) {{ puts("{word}"); return 0; }}\n'
    )


@pytest.fixture
def toy(tmp_path: Path) -> dict[str, Path]:
    """A git checkout of the toy project, two patch sets for it, and a cache of the test's own."""
    src = tmp_path / "toy"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(CMAKE)
    (src / "main.c").write_text(MAIN)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(src)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "toy"], check=True)
    out = {"src": src, "cache": tmp_path / "cache"}
    for name in ("a", "b"):
        d = tmp_path / f"patches-{name}"
        d.mkdir()
        (d / "0001-say.patch").write_text(_patch_saying(name))
        out[name] = d
    return out


def _settings(toy: dict[str, Path], which: str) -> EngineSettings:
    return EngineSettings(source_mode="path", path=toy["src"], patches_dir=toy[which], jobs=1)


def _build(toy: dict[str, Path], which: str) -> EngineInfo:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "not the pin": the toy is not llama.cpp
        return build_engine(_settings(toy, which), toy["cache"])


def _says(binary: Path) -> str:
    return subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.strip()


def _fingerprint(p: Path) -> tuple[str, int, int]:
    st = p.stat()
    return hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_ino


def _lab_build(toy: dict[str, Path], which: str) -> Path:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAB_")}
    env.update(LAB_PARAMS_FILE=os.environ["LAB_PARAMS_FILE"], LAB_ENGINE__PATCHES_DIR=str(toy[which]))
    r = subprocess.run(
        [
            LAB,
            "engine",
            "build",
            "--quiet",
            "--source-mode",
            "path",
            "--path",
            str(toy["src"]),
            "--cache-dir",
            str(toy["cache"]),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    return Path(r.stdout.strip())


@pytest.mark.engine
def test_a_second_patch_set_builds_beside_the_first_and_never_touches_its_binary(toy: dict[str, Path]) -> None:
    a = _build(toy, "a")
    assert _says(a.server) == "a"
    before = _fingerprint(a.server)
    b_server = _lab_build(toy, "b")  # a second process with other patches, on the same cache
    assert b_server != a.server and _says(b_server) == "b"
    assert _says(a.server) == "a" and _fingerprint(a.server) == before, "the first build was rebuilt"
    b = EngineInfo.model_validate_json((b_server.parent.parent / STAMP).read_text())
    assert json.loads((a.build_dir / STAMP).read_text())["patch_sha256"] == a.patch_sha256 != b.patch_sha256
    assert 'puts("a")' in (a.source_dir / "main.c").read_text()  # each tree keeps its own patch
    # the first key again: the stamp check, no cmake (the log does not grow)
    log = a.build_dir / "lab-build.log"
    size = log.stat().st_size
    assert _build(toy, "a") == a and log.stat().st_size == size


@pytest.mark.engine
def test_prune_keeps_a_build_a_run_holds_and_removes_it_once_released(toy: dict[str, Path]) -> None:
    a = _build(toy, "a")
    # a second process holds build a the way a running experiment does (lab.experiments.protocol)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from lab.engine.build import EngineInfo, in_use; "
            "e = EngineInfo.model_validate_json(sys.argv[1])\n"
            "with in_use(e):\n print('held', flush=True); sys.stdin.read()",
            a.model_dump_json(),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        b = _build(toy, "b")
        removed, held = prune_engines(_settings(toy, "b"), toy["cache"])
        assert removed == [] and held == [a.build_dir.parent]
        assert _says(a.server) == "a"
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert holder.returncode == 0
    removed, held = prune_engines(_settings(toy, "b"), toy["cache"])
    assert removed == [a.build_dir.parent] and held == []
    assert not a.server.exists() and _says(b.server) == "b"
    with pytest.raises(BuildError, match="pruned meanwhile"), in_use(a):
        pass
    assert prune_engines(_settings(toy, "b"), toy["cache"]) == ([], [])


@pytest.mark.slow
def test_changed_patch_builds_its_own_tree(settings: Settings, tmp_path: Path) -> None:
    """The real engine: a second patch gets a tree and build of its own, the first build is untouched and comes
    back as a stamp check. In a cache of its own (the shared engine cache is what users measure with; ccache
    makes the second build's unchanged files hits)."""
    cache = tmp_path / "cache"
    (cache / "downloads").mkdir(parents=True)
    for archive in (settings.cache_dir / "downloads").glob("*.tar.gz"):
        (cache / "downloads" / archive.name).symlink_to(archive)
    patches = tmp_path / "patches"
    shutil.copytree(settings.engine.patches_dir / "465b1f0e7", patches)  # the pin's series, as a set of one's own
    original = build_engine(settings.engine, cache)
    assert original.source_dir.is_relative_to(cache)
    before = _fingerprint(original.lib_dir / "libllama.so")
    src_file = original.source_dir / "src" / "llama-memory.cpp"
    first_two = src_file.read_text().splitlines()[:2]
    (patches / "0002-marker.patch").write_text(
        "--- a/src/llama-memory.cpp\n+++ b/src/llama-memory.cpp\n@@ -1,2 +1,3 @@\n"
        f" {first_two[0]}\n+// prefill-lab rebuild marker\n {first_two[1]}\n"
    )
    changed = build_engine(settings.engine.model_copy(update={"patches_dir": patches}), cache)
    assert changed.patch_sha256 != original.patch_sha256
    assert changed.build_dir != original.build_dir and changed.source_dir != original.source_dir
    assert "rebuild marker" in (changed.source_dir / "src" / "llama-memory.cpp").read_text()
    assert "rebuild marker" not in src_file.read_text()
    stamp = json.loads((changed.build_dir / STAMP).read_text())
    assert stamp["patch_sha256"] == changed.patch_sha256
    assert stamp["patches"] == ["0001-fake-prefix.patch", "0002-marker.patch"]
    assert _fingerprint(original.lib_dir / "libllama.so") == before, "the first build was rebuilt"
    log = original.build_dir / "lab-build.log"
    size = log.stat().st_size
    assert build_engine(settings.engine, cache) == original and log.stat().st_size == size


@pytest.mark.slow
def test_build_failure_is_one_line_with_the_log_tail(
    settings: Settings, source: PreparedSource, tmp_path: Path
) -> None:
    """A failing engine build (here: cmake cannot find the compiler) in a cache of its own."""
    cache = tmp_path / "cache"
    (cache / "downloads").mkdir(parents=True)
    for archive in (settings.cache_dir / "downloads").glob("*.tar.gz"):
        (cache / "downloads" / archive.name).symlink_to(archive)
    env = {"LAB_ENGINE__EXTRA_CMAKE_FLAGS": '["-DCMAKE_C_COMPILER=/nonexistent/cc"]'}
    r = lab("engine", "build", "--cache-dir", str(cache), env=env)
    progress, *rest = r.stderr.strip().splitlines()
    assert progress.startswith("engine release: configuring (full log: ") and "lab-build.log" in progress
    one_line_error(LabResult(r.args, r.returncode, r.stdout, "\n".join(rest)), 1, "cmake failed")
    assert "lab-build.log" in rest[0] and len(rest) > 1  # the log's tail below the red line
