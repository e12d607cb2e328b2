"""Every command that takes a run id, against DVC-tracked runs (`<id>/` with `<id>.dvc` beside it), called the
way the docs tell users to: by id. An interrupted sweep is tracked, then resumed by id; a complete run is
shown, compared and refused for resume by id."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab.core.runs import RunFolder

from conftest import interrupt_after_first_row
from test_dvc_catalog import BIN, dvc, lab, make_project, project_env

pytestmark = pytest.mark.engine


def run_lab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "lab"), *args], cwd=cwd, capture_output=True, text=True, env=project_env(),
                          timeout=600)  # fmt: skip


def test_commands_take_the_ids_of_tracked_runs(tmp_path: Path) -> None:
    proj = make_project(tmp_path / "proj")
    dvc("config", "--local", "core.analytics", "false", cwd=proj)
    runs = proj / "catalog" / "runs"
    # an interrupted sweep: SIGTERM after its first point
    cmd = [str(BIN / "lab"), "sweep", "--Ls", "256,512,768", "--news", "8", "--reps", "1"]
    interrupt_after_first_row(cmd, "*/raw/points.jsonl", runs, proj, project_env())
    (sweep,) = (p for p in runs.iterdir() if p.is_dir() and "_sweep_" in p.name)
    assert RunFolder.open(sweep).manifest().status == "incomplete"
    lab("rebuild", "exact", cwd=proj)
    lab("catalog", "track", cwd=proj)
    tracked = sorted(p for p in runs.iterdir() if p.is_dir())
    assert all(p.with_name(p.name + ".dvc").exists() for p in tracked), list(runs.iterdir())

    r = run_lab("sweep", "--resume", sweep.name, cwd=proj)  # the id, with its .dvc file beside it
    assert r.returncode == 0, r.stderr + r.stdout
    assert RunFolder.open(sweep).ready
    dvc_file = sweep.with_name(sweep.name + ".dvc")
    partial = dvc_file.read_text()
    lab_run = next(p for p in tracked if "rebuild_exact" in p.name)
    lab_dvc = lab_run.with_name(lab_run.name + ".dvc").read_text()
    lab("catalog", "track", cwd=proj)  # the resumed run is tracked again: a push ships it whole, not the part
    assert dvc_file.read_text() != partial
    assert lab_run.with_name(lab_run.name + ".dvc").read_text() == lab_dvc  # unchanged runs stay as they were
    assert "up to date" in dvc("status", str(dvc_file), cwd=proj)
    r = run_lab("catalog", "show", lab_run.name, cwd=proj)
    assert r.returncode == 0 and "rebuild_exact (2 rows)" in r.stdout, r.stderr
    r = run_lab("compare", sweep.name, sweep.name[:-2], cwd=proj)  # an id and a unique prefix of it
    assert r.returncode == 0 and "fake_median_ms" in r.stdout, r.stderr
    r = run_lab("sweep", "--resume", sweep.name, cwd=proj)
    assert r.returncode == 1 and "complete" in r.stderr and "no unique run" not in r.stderr, r.stderr
    r = run_lab("profile", "--resume", lab_run.name, cwd=proj)
    assert r.returncode == 1 and "is a rebuild_exact run, not profile" in r.stderr, r.stderr
    r = run_lab("replay-trace", "--resume", lab_run.name, cwd=proj)
    assert r.returncode == 1 and "is a rebuild_exact run, not conversation" in r.stderr, r.stderr
