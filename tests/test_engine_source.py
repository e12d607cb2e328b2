"""Sources: sdist verification, each series on its releases (the pin's on both sides of da87e9b, the newest's on
0.3.36 and not the pin's), git and path modes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab.core import releases
from lab.core.settings import EngineSettings, Settings
from lab.engine.series import SeriesError, patch_files
from lab.engine.source import (
    PreparedSource,
    SourceError,
    applied_diff,
    check_patch_applies,
    fetch_sdist,
    prepare_source,
    series_for,
)

pytestmark = pytest.mark.slow


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True).stdout


def test_sdist_source_is_recorded(source: PreparedSource) -> None:
    info = source.info
    assert info.mode == "sdist"
    assert info.commit == "465b1f0e7"
    pin = releases.release("0.3.27")
    assert pin is not None and info.sha256 == pin.sha256
    assert len(source.patch_sha256) == 64
    assert (source.series, source.release) == ("465b1f0e7", "pin")
    # the tree's diff against its pristine commit is exactly the lab's patch
    patch = patch_files(series_for(EngineSettings(), Path("/nonexistent")))
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


def test_each_series_applies_to_its_releases_and_the_newest_not_to_the_pin(settings: Settings) -> None:
    """0.3.26 vendors 7c158fbb4 (17 commits before da87e9b), 0.3.27 vendors 465b1f0e7 (12 after): the pin's series
    applies to both. 0.3.36 vendors 0c1e57098: its own series applies, the pin's does not."""
    for rel in releases.RELEASES:
        archive, _rel = fetch_sdist(rel.sdist_version, settings.cache_dir / "downloads")
        check_patch_applies(archive, patch_files(settings.engine.patches_dir / rel.series))
    archive, _rel = fetch_sdist("0.3.36", settings.cache_dir / "downloads")
    with pytest.raises(SourceError, match=r"server-context\.cpp"):
        check_patch_applies(archive, patch_files(settings.engine.patches_dir / "465b1f0e7"))


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


def test_a_checkout_of_the_newest_release_gets_its_series(settings: Settings, tmp_path: Path) -> None:
    latest = prepare_source(settings.engine.model_copy(update={"sdist_version": "0.3.36"}), settings.cache_dir)
    user = tmp_path / "llama.cpp"
    subprocess.run(["git", "clone", "-q", str(latest.path), str(user)], check=True)
    git(user, "checkout", "-q", git(latest.path, "rev-list", "--max-parents=0", "HEAD").strip())
    with pytest.warns(UserWarning, match="not the pin"):
        prepared = prepare_source(EngineSettings(source_mode="path", path=user), tmp_path / "cache")
    assert prepared.series == "0c1e57098" and prepared.release is None
    assert applied_diff(prepared.path) == applied_diff(latest.path)


def test_a_checkout_no_series_fits_names_the_hunk_and_caches_nothing(user_checkout: Path, tmp_path: Path) -> None:
    """The pin's checkout with one line the server hunks rely on changed: no series fits it."""
    user = tmp_path / "moved"
    subprocess.run(["git", "clone", "-q", str(user_checkout), str(user)], check=True)
    server = user / "tools" / "server" / "server-context.cpp"
    server.write_text(server.read_text().replace("double t_prompt_processing = 0.0; // ms", "double t_pp = 0.0;", 1))
    git(user, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "moved")
    cache = tmp_path / "cache"
    with pytest.raises(SeriesError) as e:
        prepare_source(EngineSettings(source_mode="path", path=user), cache)
    line = str(e.value)
    assert "\n" not in line and not cache.exists()
    # no release commit in this history: the nearest is the series that fails at fewest hunks (one, the pin's)
    assert "465b1f0e7/0001-fake-prefix.patch: tools/server/server-context.cpp hunk @@ -189,6" in line, line
    assert "nearest supported release: pin, llama-cpp-python 0.3.27 (llama.cpp 465b1f0e7" in line, line


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
