"""Which patch series a source takes (lab.engine.series) and how a release is named (lab.core.releases): a toy
checkout and toy series named like the real ones, no llama.cpp needed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab.core import releases
from lab.core.settings import EngineSettings
from lab.engine.series import SeriesError, declared_series, fitting_series, series_dirs
from lab.engine.source import prepare_source

pytestmark = pytest.mark.fast

PIN, LATEST = (releases.release(releases.NAMED[n]) for n in ("pin", "latest"))
REAL = Path(__file__).resolve().parent.parent / "patches" / "llama.cpp"


def git(tree: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tree), *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def edit_patch(path: str, old: str, new: str, start: int = 1) -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -{start},1 +{start},1 @@ int f(void)\n-{old}\n+{new}\n"


@pytest.fixture
def toy(tmp_path: Path) -> dict[str, Path]:
    """A checkout at its "old" state (the pin's series fits), and a patches folder with both series."""
    src = tmp_path / "checkout"
    src.mkdir()
    (src / "server.c").write_text("old line\n")
    git(src, "init", "-q")
    git(src, "add", "-A")
    git(src, "commit", "-qm", "old")
    patches = tmp_path / "patches"
    assert PIN is not None and LATEST is not None
    for rel, line in ((PIN, "old line"), (LATEST, "new line")):
        (patches / rel.series).mkdir(parents=True)
        (patches / rel.series / "0001-fake-prefix.patch").write_text(edit_patch("server.c", line, "patched"))
    return {"src": src, "patches": patches, "cache": tmp_path / "cache"}


def test_a_release_is_named_or_versioned_and_anything_else_is_refused() -> None:
    assert EngineSettings().sdist_version == "0.3.27"
    assert EngineSettings(sdist_version="latest").sdist_version == "0.3.36"
    assert EngineSettings(sdist_version="0.3.26").sdist_version == "0.3.26"
    with pytest.raises(ValueError, match=r"'0\.3\.30' is not a supported llama\.cpp release; known: pin \(0\.3\.27\)"):
        EngineSettings(sdist_version="0.3.30")
    assert [r.series for r in releases.newest_first()] == ["0c1e57098", "465b1f0e7"]


def test_every_supported_release_has_its_series_in_the_repository() -> None:
    dirs = series_dirs(REAL)
    for rel in releases.RELEASES:
        assert declared_series(EngineSettings(sdist_version=rel.sdist_version)) == dirs[rel.series]
    assert declared_series(EngineSettings(source_mode="git")) == dirs["465b1f0e7"]  # the pin's commit
    assert declared_series(EngineSettings(source_mode="path", path=Path("/x"))) is None  # tried there


def test_a_patch_set_of_ones_own_applies_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "0001-mine.patch").write_text(edit_patch("a.c", "x", "y"))
    es = EngineSettings(sdist_version="latest", patches_dir=tmp_path)
    assert declared_series(es) == tmp_path
    with pytest.raises(SeriesError, match=r"no \*\.patch in"):
        declared_series(EngineSettings(patches_dir=tmp_path / "empty"))


def test_a_checkout_gets_the_newest_series_that_fits(toy: dict[str, Path]) -> None:
    assert fitting_series(toy["src"], toy["patches"]).name == "465b1f0e7"  # the old state: the pin's
    (toy["src"] / "server.c").write_text("new line\n")
    git(toy["src"], "commit", "-qam", "new")
    assert fitting_series(toy["src"], toy["patches"]).name == "0c1e57098"
    assert git(toy["src"], "status", "--porcelain") == ""  # only checked, never applied there


def test_a_checkout_no_series_fits_is_one_line_and_nothing_is_cached(toy: dict[str, Path]) -> None:
    (toy["src"] / "server.c").write_text("moved on\n")
    git(toy["src"], "commit", "-qam", "moved")
    es = EngineSettings(source_mode="path", path=toy["src"], patches_dir=toy["patches"])
    with pytest.raises(SeriesError) as e:
        prepare_source(es, toy["cache"])
    line = str(e.value)
    assert "\n" not in line
    assert "no patch series fits this llama.cpp checkout" in line
    # the file and hunk of the nearest release's series (no supported commit in this history: the newest)
    assert "0c1e57098/0001-fake-prefix.patch: server.c hunk @@ -1,1 +1,1 @@ int f(void) (line 1)" in line
    assert "nearest supported release: latest, llama-cpp-python 0.3.36 (llama.cpp 0c1e57098" in line
    assert not toy["cache"].exists()


def test_a_resumed_run_keeps_the_release_it_was_measured_with(tmp_path: Path) -> None:
    from rich.console import Console

    from lab.core.runs import RunFolder
    from lab.core.settings import load_settings
    from lab.experiments.protocol import Experiment, OpenRun, Outcome, restore

    class Probe(Experiment):
        name = "probe"

        def measure(self, sess: OpenRun, console: Console) -> Outcome:
            return Outcome()

    run = RunFolder.create(tmp_path, "probe", "here", {})
    run.update(engine={"release": "latest", "series": "0c1e57098"})
    settings = load_settings(runs_dir=tmp_path)
    assert settings.engine.sdist_version == "0.3.27"
    assert restore(Probe(), settings, run).engine.sdist_version == "0.3.36"


def test_a_missing_checkout_is_one_line_and_nothing_is_cached(tmp_path: Path) -> None:
    from lab.engine.source import SourceError

    with pytest.raises(SourceError, match=r"engine.path .*nope: no such directory"):
        prepare_source(EngineSettings(source_mode="path", path=tmp_path / "nope"), tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
