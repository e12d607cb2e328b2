"""The git snapshot every run records: `dirty` means the lab's tracked code differs from its commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab.core.shell import LocalShell
from lab.core.snapshot import snapshot_git

pytestmark = pytest.mark.fast


def git(repo: Path, *args: str) -> None:
    ident = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", *ident, "-C", str(repo), *args], check=True, capture_output=True)


def test_untracked_run_folders_are_not_dirt(tmp_path: Path) -> None:
    repo = tmp_path / "lab"
    (repo / "catalog" / "runs").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1\n")
    (repo / "catalog" / "runs" / ".gitkeep").write_text("")  # tracked, as in the lab's repo
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "c")
    # what every measuring checkout has: run folders and their .dvc files, untracked
    (repo / "catalog" / "runs" / "2026-12-01_vm_sweep_abc123").mkdir()
    (repo / "catalog" / "runs" / "2026-12-01_vm_sweep_abc123.dvc").write_text("outs: []\n")
    clean = snapshot_git(LocalShell(), repo, tmp_path / "g1")
    assert clean["dirty"] is False
    assert "sweep_abc123" in (tmp_path / "g1" / "status.txt").read_text()  # the full picture is kept
    assert (tmp_path / "g1" / "git_diff.patch").read_text() == ""
    (repo / "code.py").write_text("x = 2\n")
    dirty = snapshot_git(LocalShell(), repo, tmp_path / "g2")
    assert dirty["dirty"] is True and "+x = 2" in (tmp_path / "g2" / "git_diff.patch").read_text()
    assert dirty["commit"] == clean["commit"] and len(str(clean["commit"])) == 40


def test_not_a_checkout_is_recorded_as_such(tmp_path: Path) -> None:
    out = snapshot_git(LocalShell(), tmp_path, tmp_path / "g")
    assert out == {"commit": "unknown (not a git checkout)", "dirty": False}


def test_host_check_warns_about_a_busy_cpu(tmp_path: Path) -> None:
    import sys

    lab = str(Path(sys.executable).parent / "lab")
    busy = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    try:
        r = subprocess.run([lab, "host", "check", "--seconds", "0.5"], capture_output=True, text=True, timeout=60)
    finally:
        busy.kill()
        busy.wait()
    assert r.returncode == 0, r.stderr
    assert "window:" in r.stdout and "context switches/s" in r.stdout
    assert f"pid {busy.pid}" in r.stdout and "warning: other processes are using a CPU" in r.stdout, r.stdout
