"""`lab profile --clean-room STOP START` against a real dummy service: stopped before the sweep, always
started again (success, failure, SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.core.runs import RunFolder

pytestmark = pytest.mark.engine

LAB = str(Path(sys.executable).parent / "lab")
REPO = Path(__file__).resolve().parent.parent


class Service:
    """A real background process managed by a pidfile, with an event log of stops and starts."""

    def __init__(self, root: Path) -> None:
        self.pidfile, self.events = root / "svc.pid", root / "events.log"
        self.start_cmd = f"nohup sleep 600 >/dev/null 2>&1 & echo $! > {self.pidfile}; echo start >> {self.events}"
        self.stop_cmd = f"kill $(cat {self.pidfile}) && echo stop >> {self.events}"

    def pid(self) -> int:
        return int(self.pidfile.read_text())

    def running(self) -> bool:
        try:
            os.kill(self.pid(), 0)
        except ProcessLookupError:
            return False
        stat = Path(f"/proc/{self.pid()}/stat")
        return stat.exists() and stat.read_text().split()[2] != "Z"

    def log(self) -> list[str]:
        return self.events.read_text().split()

    def gone(self, timeout: float = 20.0) -> bool:
        """Whether the process has exited within `timeout` (kill only sends the signal)."""
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.running()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    svc = Service(tmp_path)
    subprocess.run(svc.start_cmd, shell=True, check=True)
    assert svc.running()
    yield svc
    if svc.running():
        os.kill(svc.pid(), signal.SIGKILL)


def profile(svc: Service, runs: Path, *extra: str) -> list[str]:
    args = [
        "profile",
        "--chunk",
        "128",
        "--depths",
        "0,256",
        "--processes",
        "2",
        "--reps",
        "1",
        "--runs-dir",
        str(runs),
    ]
    return [LAB, *args, "--clean-room", svc.stop_cmd, svc.start_cmd, *extra]


def test_service_stopped_for_the_sweep_and_restarted(service: Service, tmp_path: Path) -> None:
    first = service.pid()
    r = subprocess.run(profile(service, tmp_path / "runs"), capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr + r.stdout
    assert service.log() == ["start", "stop", "start"]
    assert service.running() and service.pid() != first
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    m = run.manifest()
    cr = m.results["clean_room"]
    assert "clean_room" not in m.params  # an output, never written into the inputs
    assert (cr["stop_rc"], cr["start_rc"]) == (0, 0) and run.ready


def test_service_restarted_when_the_sweep_fails(service: Service, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    r = subprocess.run(profile(service, tmp_path / "runs", "--model", str(bad)), capture_output=True, text=True)
    assert r.returncode != 0
    assert service.log() == ["start", "stop", "start"] and service.running()
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert RunFolder.open(run_dir).manifest().status == "incomplete"


def measuring_in_the_room(service: Service, runs: Path, start_cmd: str | None = None) -> subprocess.Popen[str]:
    """A long profile in a clean room, returned once the service is stopped and the profile has begun."""
    cmd = profile(service, runs)
    if start_cmd is not None:
        cmd[cmd.index(service.start_cmd)] = start_cmd
    cmd[cmd.index("0,256")] = "0,131072"  # long enough to be interrupted
    cmd[cmd.index("--reps") + 1] = "50"
    cmd[cmd.index("--chunk") + 1] = "512"
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    deadline = time.monotonic() + 120
    while "stop" not in (service.events.read_text() if service.events.exists() else ""):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    time.sleep(1.0)
    return proc


def test_service_restarted_on_sigterm(service: Service, tmp_path: Path) -> None:
    proc = measuring_in_the_room(service, tmp_path / "runs")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert service.log() == ["start", "stop", "start"] and service.running()
    (run_dir,) = (tmp_path / "runs").iterdir()
    m = RunFolder.open(run_dir).manifest()
    assert (m.status, m.reason) == ("incomplete", "interrupted by SIGTERM")
    assert m.results["clean_room"]["start_rc"] == 0


def test_a_second_signal_during_the_restart_does_not_skip_it(service: Service, tmp_path: Path) -> None:
    """Ctrl-C twice, or SIGTERM then SIGINT: the second lands while the start command runs; the service still
    comes back, and the run still ends incomplete. After a SIGKILL (which no handler sees), one command
    restores the service from what the run recorded."""
    began = tmp_path / "restart-began"
    slow_start = f"touch {began}; sleep 2; {service.start_cmd}"
    proc = measuring_in_the_room(service, tmp_path / "runs", slow_start)
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 60
    while not began.exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # during the restart
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "Traceback" not in err, err
    assert service.log() == ["start", "stop", "start"] and service.running()
    (run_dir,) = (tmp_path / "runs").iterdir()
    m = RunFolder.open(run_dir).manifest()
    assert m.status == "incomplete" and m.results["clean_room"]["start_rc"] == 0, m.reason
    # a SIGKILL left it stopped: the recorded start command brings it back
    subprocess.run(service.stop_cmd, shell=True, check=True)
    assert service.gone()
    r = subprocess.run(
        [LAB, "host", "restore", run_dir.name, "--runs-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert r.returncode == 0 and slow_start in r.stdout, r.stderr
    assert service.running()
