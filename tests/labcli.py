"""`lab ...` called in the test's own process: the same command tree, error policy and output a user gets, without
a Python start and the lab's imports per call (about half a second each). Where a second process is the point
(a second writer of a run, a run interrupted by a signal) a test still starts the installed `lab` script.

The call sees `env` on top of the test's environment and runs in `cwd`; both are put back afterwards. stdout and
stderr are captured apart, neither is a terminal (as in a log or a pipe)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from lab.cli import app


@dataclass(frozen=True)
class LabResult:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def lab(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> LabResult:
    """`lab *args`, its exit code and its two streams."""
    here = Path.cwd()
    code = 0
    with CliRunner().isolation(env={"COLUMNS": "200", **(env or {})}) as (out, err, _):
        try:
            if cwd is not None:
                os.chdir(cwd)
            app(args=list(args), prog_name="lab")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        finally:
            os.chdir(here)
    return LabResult(args, code, out.getvalue().decode(), err.getvalue().decode())


def one_line_error(r: LabResult, code: int, needle: str) -> None:
    """The command failed with `code`, said why in its first line of stderr, and showed no traceback."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr
    first = r.stderr.strip().splitlines()[0]
    assert needle in first, r.stderr
