"""The import contracts (pyproject.toml, [tool.importlinter]): the layers, and the presenters that only format
records; kept by the tree, broken by an upward import or a presenter that reads the run folders."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent
LINT = str(Path(sys.executable).parent / "lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}  # the copy's `lab`, not the installed one
    return subprocess.run([LINT, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def copy_of_the_tree(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "lab", tmp_path / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    return tmp_path


def test_the_tree_keeps_its_layers(tmp_path: Path) -> None:
    r = lint(copy_of_the_tree(tmp_path))
    assert r.returncode == 0 and "2 kept, 0 broken" in r.stdout, r.stdout + r.stderr


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    root = copy_of_the_tree(tmp_path)
    with (root / "lab" / "core" / "runs.py").open("a") as f:  # the run folders, low in the core, importing a presenter
        f.write("\nfrom lab.presenters.catalog import runs_listing  # noqa: E402, F401\n")
    r = lint(root)
    assert r.returncode == 1 and "lab.core.runs is not allowed to import lab.presenters" in r.stdout, (
        r.stdout + r.stderr
    )


def test_a_presenter_that_reads_the_run_folders_breaks_the_contract(tmp_path: Path) -> None:
    root = copy_of_the_tree(tmp_path)
    with (root / "lab" / "presenters" / "plan.py").open("a") as f:  # a layer below, but not a record's module
        f.write("\nfrom lab.core.runs import resolve_run  # noqa: E402, F401\n")
    r = lint(root)
    assert r.returncode == 1 and "lab.presenters is not allowed to import lab.core.runs" in r.stdout, (
        r.stdout + r.stderr
    )
