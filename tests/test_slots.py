"""The genuine arm's scratch directory for slot files: removed when its run ends, and what a killed run left
behind (its owner process gone) removed when the next one starts; a live run's is left alone."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lab.engine.slots import scratch_dir

pytestmark = pytest.mark.fast


def test_a_killed_runs_states_go_and_a_live_runs_stay(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])  # a process that has exited: its run is over
    dead.wait()
    root = tmp_path / "slots"
    (root / f"{dead.pid}-abc").mkdir(parents=True)
    (root / f"{dead.pid}-abc" / "L4096.bin").write_bytes(b"state")
    (root / f"{os.getppid()}-live").mkdir()  # the test runner's parent: alive
    (root / "notes").mkdir()  # not ours: left alone
    with scratch_dir(tmp_path) as d:
        here = Path(d)
        assert here.is_dir() and here.name.startswith(f"{os.getpid()}-")
        assert sorted(p.name for p in root.iterdir()) == sorted([here.name, f"{os.getppid()}-live", "notes"])
    assert not here.exists()
