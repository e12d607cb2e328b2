"""`fab -H nuc16 ...` against a host that is not like this machine and not friendly: its python3 is another
version (the lab installs from the host's own package index, not the pushed wheelhouse), the lab directory's
name holds a space and a quote, and its `ls` lists names that are not run ids (`../escape`, `/etc`, `.`).
Nothing outside the local runs folder is ever touched, and a run id from a flag is checked first."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.core.runs import RunFolder

from sshd import Sshd, alias, fab, fab_project, start_sshd

pytestmark = pytest.mark.slow


def other_python() -> tuple[Path, str] | None:
    """A python3 the lab supports (3.11 and later) of another minor version than this one, and its cache tag."""
    for minor in range(11, 15):
        if minor == sys.version_info[1]:
            continue
        found = [
            Path(f"/usr/bin/python3.{minor}"),
            *sorted(Path.home().glob(f".pyenv/versions/3.{minor}.*/bin/python3")),
        ]
        for p in found:
            if p.exists():
                return p, f"cpython-3{minor}"
    return None


HOSTILE_LS = '#!/bin/sh\n/bin/ls "$@"\necho ../escape\necho /etc\necho .\n'


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    found = other_python()
    if found is None:  # the remote flow's other-version path cannot be shown without one: a failure, not a skip
        pytest.fail("no python3 of another version here (pyenv or /usr/bin/python3.X): install one to run this")
    base = tmp_path_factory.mktemp("odd")
    bin_dir = base / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(found[0])
    (base / "tag").write_text(found[1])
    (bin_dir / "ls").write_text(HOSTILE_LS)
    os.chmod(bin_dir / "ls", 0o755)
    server = start_sshd(base, path_first=bin_dir)  # loopback: the host's package index is reachable
    yield server
    server.stop()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    p = fab_project(tmp_path_factory.mktemp("project"))
    (p / "catalog" / "escape").mkdir(parents=True)  # what `../escape` under catalog/runs would name
    (p / "catalog" / "escape" / "keep.txt").write_text("mine")
    return p


def config(host: Sshd, tmp_path: Path) -> Path:
    path = tmp_path / "ssh_config"
    path.write_text(alias("nuc16", host, host.known_hosts))
    return path


def test_a_host_with_another_python_and_an_odd_directory_name_measures(
    host: Sshd, project: Path, tmp_path: Path
) -> None:
    rdir = host.home / "pre fill 'lab"
    r = fab(
        project,
        config(host, tmp_path),
        "measure",
        "--ls",
        "256",
        "--news",
        "16",
        "--reps",
        "1",
        "--remote-dir",
        str(rdir),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    tag = (host.home.parent / "tag").read_text()
    assert f"python3 there is {tag}" in r.stdout and "the host's package index" in r.stdout, r.stdout
    local = project / r.stdout.strip().splitlines()[-1]
    run = RunFolder.open(local)
    assert run.ready and run.manifest().status == "complete" and "_nuc16_sweep_" in local.name
    assert (rdir / "venv" / "bin" / "lab").exists() and (rdir / "venv" / ".lab-wheel").read_text().strip()
    assert not (host.home / "pre").exists()  # one directory, not two
    assert sorted(p.name for p in local.parent.iterdir() if p.is_dir()) == [local.name]  # no `.`, `/etc`
    assert (project / "catalog" / "escape" / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("bad", ["../escape", ".", "/etc"])
def test_a_resume_id_that_is_not_a_run_id_removes_nothing(bad: str, host: Sshd, project: Path, tmp_path: Path) -> None:
    runs = project / "catalog" / "runs"
    before = sorted(p.name for p in runs.iterdir()) if runs.exists() else []
    r = fab(project, config(host, tmp_path), "measure", "--resume", bad, "--remote-dir", str(host.home / "x"))
    assert r.returncode != 0 and "is not a run id" in r.stderr, r.stdout + r.stderr
    assert (project / "catalog" / "escape" / "keep.txt").read_text() == "mine"
    assert (sorted(p.name for p in runs.iterdir()) if runs.exists() else []) == before
