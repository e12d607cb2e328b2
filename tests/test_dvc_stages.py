"""`dvc repro` re-runs a stage only when one of its deps changed: every lab module a stage's command imports
must be covered by the stage's deps in dvc.yaml. The imports are traced by running each command for real
(on an empty catalog), so a new import in any module the command reaches is caught."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent

TRACE = """
import json, sys
before = set(sys.modules)  # what the interpreter loaded at startup (site .pth hooks), not the command
from lab.cli import app
sys.argv = ["lab", *json.loads(sys.argv[1])]
try:
    app()
except SystemExit:
    pass
print("\\nLAB-MODULES " + json.dumps(sorted(m.__file__ for n, m in list(sys.modules.items())
                                            if (n == "lab" or n.startswith("lab.")) and n not in before
                                            and getattr(m, "__file__", None))))
"""


def imported_lab_files(args: list[str]) -> set[str]:
    r = subprocess.run([sys.executable, "-c", TRACE, json.dumps(args)], capture_output=True, text=True, cwd=REPO)
    line = next(x for x in r.stdout.splitlines() if x.startswith("LAB-MODULES "))
    return {str(Path(f).resolve().relative_to(REPO)) for f in json.loads(line.split(" ", 1)[1])}


def covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def test_stage_deps_cover_what_their_commands_import(tmp_path: Path) -> None:
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    (tmp_path / "runs").mkdir()
    extra = {
        "lab catalog ingest": ["--runs-dir", str(tmp_path / "runs"), "--catalog-dir", str(tmp_path / "cat")],
        "lab report": ["--catalog-dir", str(tmp_path / "cat"), "--out", str(tmp_path / "reports")],
    }
    assert set(extra) == {s["cmd"] for s in stages.values()}, "a new stage: add its command here"
    for name, stage in stages.items():
        files = imported_lab_files([*stage["cmd"].split()[1:], *extra[stage["cmd"]]])
        assert "lab/cli/__init__.py" in files and len(files) > 5, files  # the trace saw the command run
        missing = sorted(f for f in files if not covered(f, stage["deps"]))
        assert not missing, f"dvc.yaml stage {name!r} runs {missing} but does not depend on them"
