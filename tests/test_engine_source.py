"""Source at the pin: sdist verification, the patch on both sides of da87e9b, git and path modes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab.core.settings import EngineSettings, Settings
from lab.engine.source import (
    SDIST_PINS,
    PreparedSource,
    SourceError,
    applied_diff,
    check_patch_applies,
    fetch_sdist,
    patch_files,
    prepare_source,
)

pytestmark = pytest.mark.slow


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True).stdout


def test_sdist_source_is_recorded(source: PreparedSource) -> None:
    info = source.info
    assert info.mode == "sdist"
    assert info.commit == "465b1f0e7"
    assert info.sha256 == SDIST_PINS["0.3.27"].sha256
    assert len(source.patch_sha256) == 64
    # the tree's diff against its pristine commit is exactly the lab's patch
    patch = patch_files(EngineSettings().patches_dir)
    assert len(patch) == 1
    assert applied_diff(source.path) == patch[0].read_text()


def test_sdist_sha256_is_verified(settings: Settings, tmp_path: Path) -> None:
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / "llama_cpp_python-0.3.27.tar.gz").write_bytes(b"not the sdist")
    with pytest.raises(SourceError, match="sha256"):
        fetch_sdist("0.3.27", downloads)
    with pytest.raises(SourceError, match="no pinned sha256"):
        fetch_sdist("0.0.1", downloads)


def test_patch_applies_on_both_sides_of_the_pin(settings: Settings) -> None:
    """0.3.26 vendors 7c158fbb4 (17 commits before da87e9b), 0.3.27 vendors 465b1f0e7 (12 after)."""
    patches = patch_files(settings.engine.patches_dir)
    for version in ("0.3.26", "0.3.27"):
        archive, _pin = fetch_sdist(version, settings.cache_dir / "downloads")
        check_patch_applies(archive, patches)


@pytest.fixture(scope="module")
def user_checkout(source: PreparedSource, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's llama.cpp checkout: a clone of the pristine commit."""
    dest = tmp_path_factory.mktemp("user") / "llama.cpp"
    subprocess.run(["git", "clone", "-q", str(source.path), str(dest)], check=True)
    pristine = git(source.path, "rev-list", "--max-parents=0", "HEAD").strip()
    git(dest, "checkout", "-q", pristine)
    return dest


def test_path_mode_never_dirties_the_users_tree(user_checkout: Path, tmp_path: Path) -> None:
    before = git(user_checkout, "status", "--porcelain")
    es = EngineSettings(source_mode="path", path=user_checkout)
    with pytest.warns(UserWarning, match="not the pin"):
        prepared = prepare_source(es, tmp_path / "cache")
    assert git(user_checkout, "status", "--porcelain") == before == ""
    assert prepared.path != user_checkout
    assert prepared.info.mode == "path" and prepared.info.origin == str(user_checkout.resolve())
    assert prepared.info.commit == git(user_checkout, "rev-parse", "HEAD").strip()
    assert prepared.info.pinned is False
    assert "seq_fake_prefix" in (prepared.path / "src" / "llama-memory.h").read_text()


def test_git_mode_clones_and_checks_out_the_commit(user_checkout: Path, tmp_path: Path) -> None:
    commit = git(user_checkout, "rev-parse", "HEAD").strip()
    es = EngineSettings(source_mode="git", git_url=f"file://{user_checkout}", git_commit=commit)
    prepared = prepare_source(es, tmp_path / "cache")
    assert prepared.info.mode == "git" and prepared.info.commit == commit
    assert prepared.info.pinned is False and "not the pin" in prepared.info.note
    assert "n_fake_cached" in (prepared.path / "tools" / "server" / "server-task.h").read_text()
    # idempotent: a second call changes nothing
    assert prepare_source(es, tmp_path / "cache").patch_sha256 == prepared.patch_sha256


def test_a_patch_that_does_not_apply_is_named(user_checkout: Path, tmp_path: Path) -> None:
    bad = tmp_path / "patches"
    bad.mkdir()
    (bad / "0001-bad.patch").write_text(
        "--- a/README.md\n+++ b/README.md\n@@ -1,1 +1,1 @@\n-no such line in the readme\n+x\n"
    )
    es = EngineSettings(source_mode="path", path=user_checkout, patches_dir=bad)
    with pytest.warns(UserWarning), pytest.raises(SourceError, match=r"0001-bad\.patch does not apply"):
        prepare_source(es, tmp_path / "cache")


def test_a_build_shows_one_progress_line_per_step_from_cmakes_own_output() -> None:
    import io

    from lab.engine.build import BuildProgress

    out = io.StringIO()  # not a terminal: a line per 10% step
    p = BuildProgress("engine release", out)
    for i in range(0, 101):
        p.feed(f"[{i:3d}%] Building CXX object src/CMakeFiles/llama.dir/llama-{i}.cpp.o\n")
        p.feed("-- some configure chatter\n")
    p.feed("[100%] Built target llama-server\n")
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "engine release:   0% llama-0.cpp.o" and lines[-1] == "engine release: 100% llama-100.cpp.o"
    assert len(lines) == 11  # 0, 10, ..., 100: never the raw CMake lines
