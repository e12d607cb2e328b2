"""Settings say what they read: a params file named that does not exist is an error, a run from a directory without
one says it measured the defaults, and a run records the params file's path and sha256. A params file the lab
cannot read as its settings (a section or key given twice, a syntax error, a list or a scalar at the top, a
`!!python` tag, bytes that are not UTF-8, a directory) is one line naming it, no traceback and no run folder; so
is a LAB_* value that is not one of its setting (`lab rebuild exact`: a run of a second, no engine)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from labcli import LabResult, lab, one_line_error

from lab.core.runs import RunFolder

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent


def rebuild(tmp_path: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[LabResult, Path]:
    runs = tmp_path / "runs"
    return lab("rebuild", "exact", "--runs-dir", str(runs), env=env, cwd=cwd), runs


def the_run(runs: Path) -> RunFolder:
    (folder,) = runs.iterdir()
    return RunFolder.open(folder)


def test_a_named_params_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    r, runs = rebuild(tmp_path, env={"LAB_PARAMS_FILE": str(missing)})
    one_line_error(r, 2, f"LAB_PARAMS_FILE={missing}: no such file")
    assert not runs.exists()


def test_an_empty_params_file_name_is_an_error(tmp_path: Path) -> None:
    r, runs = rebuild(tmp_path, env={"LAB_PARAMS_FILE": " "})
    one_line_error(r, 2, "LAB_PARAMS_FILE is set but empty")
    assert not runs.exists()


def test_a_run_from_another_directory_says_it_read_no_params_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No LAB_PARAMS_FILE and no ./params.yaml: the defaults, said when the run opens and recorded."""
    monkeypatch.delenv("LAB_PARAMS_FILE")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r, runs = rebuild(tmp_path, cwd=elsewhere)
    assert r.returncode == 0, r
    assert f"params: none (no params.yaml in {elsewhere})" in r.stdout + r.stderr
    assert the_run(runs).manifest().lab["params_file"] == {"path": None, "sha256": None}


def test_a_run_records_the_params_file_it_read_and_says_which(tmp_path: Path) -> None:
    params = tmp_path / "mine.yaml"
    params.write_text("rebuild:\n  window: 4\n")
    r, runs = rebuild(tmp_path, env={"LAB_PARAMS_FILE": str(params)})
    assert r.returncode == 0, r
    sha = hashlib.sha256(params.read_bytes()).hexdigest()
    assert f"params: {params} (sha256 {sha[:12]})" in r.stdout + r.stderr
    m = the_run(runs).manifest()
    assert m.lab["params_file"] == {"path": str(params), "sha256": sha}
    assert m.params["rebuild"]["window"] == 4


def test_the_checkouts_params_file_is_read_from_the_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAB_PARAMS_FILE")
    r, runs = rebuild(tmp_path, cwd=REPO)
    assert r.returncode == 0, r
    record = the_run(runs).manifest().lab["params_file"]
    assert record == {"path": str(REPO / "params.yaml"), "sha256": hashlib.sha256(
        (REPO / "params.yaml").read_bytes()).hexdigest()}  # fmt: skip


def test_an_empty_params_file_is_the_defaults_and_says_so(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("# nothing set yet\n")
    r, runs = rebuild(tmp_path, env={"LAB_PARAMS_FILE": str(params)})
    assert r.returncode == 0, r
    assert f"params: {params} (empty: the defaults)" in r.stdout + r.stderr
    assert the_run(runs).manifest().params["rebuild"]["window"] == 3  # the default


BAD = {  # what a params file holds -> what its one line says
    "a section twice": (
        b"rebuild:\n  window: 3\nrebuild:\n  window: 4\n",
        "line 3, column 1: 'rebuild' is given twice",
    ),
    "a key twice": (b"rebuild:\n  window: 3\n  window: 4\n", "line 3, column 3: 'window' is given twice"),
    "a key twice in a flow mapping": (b"rebuild: {window: 3, window: 4}\n", "'window' is given twice"),
    "a syntax error": (b"rebuild: [1, 2\n", "line 2, column 1: expected ',' or ']'"),
    "a list at the top": (
        b"- rebuild\n- sweep\n",
        "a mapping of sections (sweep:, server: ...) at the top, not a list",
    ),
    "a scalar at the top": (b"42\n", "at the top, not a int"),
    "a python tag": (
        b"rebuild: !!python/object/apply:os.system ['touch PWNED']\n",
        "line 1, column 10: could not determine a constructor for the tag",
    ),
    "not UTF-8": (b"rebuild:\n  window: 3\xff\n", "line 2: not UTF-8 (byte 0xff)"),
    "a key with a space around it": (b'"rebuild ":\n  window: 3\n', "line 1, column 1: the key 'rebuild ' has a space"),
    "a nested key with a space": (b'rebuild:\n  " window": 3\n', "line 2, column 3: the key ' window' has a space"),
    "a number as a section": (b"1: {window: 3}\n", "1 is not the name of a setting"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_params_file_that_is_not_the_labs_settings_is_one_line(tmp_path: Path, case: str) -> None:
    text, said = BAD[case]
    params = tmp_path / "params.yaml"
    params.write_bytes(text)
    r, runs = rebuild(tmp_path, env={"LAB_PARAMS_FILE": str(params)}, cwd=tmp_path)
    one_line_error(r, 2, f"params file {params}")
    assert said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not runs.exists() and not (tmp_path / "PWNED").exists()


def test_a_params_yaml_that_is_a_directory_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """./params.yaml a directory (a container's bind mount of a missing file makes one) used to read as none."""
    monkeypatch.delenv("LAB_PARAMS_FILE")
    (tmp_path / "params.yaml").mkdir()
    r, runs = rebuild(tmp_path, cwd=tmp_path)
    one_line_error(r, 2, "params file params.yaml: not a regular file")
    assert not runs.exists()


def test_a_section_that_is_a_scalar_is_one_line(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("rebuild: 3\n")
    r, runs = rebuild(tmp_path, env={"LAB_PARAMS_FILE": str(params)})
    one_line_error(r, 2, "invalid settings: rebuild: Input should be a valid dictionary")
    assert not runs.exists()


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("LAB_SWEEP__LS", "abc", "LAB_SWEEP__LS: not a value of its setting"),
        ("LAB_SERVER__EXTRA_ARGS", "--foo", "LAB_SERVER__EXTRA_ARGS: not a value of its setting"),
        ("LAB_REBUILD__WINDOW", "three", "invalid settings: rebuild.window: Input should be a valid integer"),
    ],
)
def test_a_lab_variable_of_the_wrong_type_is_one_line(tmp_path: Path, name: str, value: str, said: str) -> None:
    r, runs = rebuild(tmp_path, env={name: value})
    one_line_error(r, 2, said)
    assert not runs.exists()


def test_a_params_file_with_a_recursive_alias_is_one_line(tmp_path: Path) -> None:
    """A YAML alias to itself builds a list that holds itself: refused by name, no RecursionError."""
    params = tmp_path / "params.yaml"
    params.write_text("rebuild:\n  lengths: &a [1, *a]\n")
    r, runs = rebuild(tmp_path, env={"LAB_PARAMS_FILE": str(params)})
    one_line_error(r, 2, "rebuild.lengths")
    assert not runs.exists()


# --- fab pushes the params file it read, or nothing ----------------------------------------------------------------


def fab_here(project: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`fab -H nuc16 ...` in `project`, a host that is never reached (what is checked comes before)."""
    import os

    full = {k: v for k, v in os.environ.items() if k != "LAB_PARAMS_FILE"}
    full.update(env, PATH=f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}", COLUMNS="200")
    cmd = [str(REPO / ".venv" / "bin" / "fab"), "-H", "nuc16.invalid", *args]
    return subprocess.run(cmd, cwd=project, env=full, capture_output=True, text=True, timeout=120)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory with the lab's fabfile and fabric.yaml and no params.yaml."""
    p = tmp_path / "project"
    p.mkdir()
    for name in ("fabfile.py", "fabric.yaml"):
        (p / name).write_bytes((REPO / name).read_bytes())
    return p


def test_fab_pushes_no_empty_params_file_when_there_is_none(project: Path) -> None:
    r = fab_here(project, "measure", env={})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"no params file here to push (no params.yaml in {project})" in r.stderr


@pytest.mark.parametrize(
    ("task", "text", "said"),
    [("push", None, "LAB_PARAMS_FILE={}: no such file"), ("measure", b"- a list\n", "not a list")],
)
def test_fab_with_a_bad_params_file_is_one_line(project: Path, task: str, text: bytes | None, said: str) -> None:
    """Every task reads the settings before it reaches the host: a bad params file used to be a traceback."""
    params = project / "mine.yaml"
    if text is not None:
        params.write_bytes(text)
    r = fab_here(project, task, env={"LAB_PARAMS_FILE": str(params)})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert said.format(params) in r.stderr
