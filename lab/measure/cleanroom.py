"""The clean room: the host's own server (a production llama-server, say) is stopped for a measurement and
always started again, however the measurement ends. One record shape wherever it is held:

    results.clean_room = {stop, start, stop_rc, start_rc, where}

Two holders, one for each place the measured process runs:
  hold(shell, room, run)   the lab holds it itself around its measurement (`lab profile --clean-room STOP START`):
                           a `finally` restarts on success, failure and SIGINT/SIGTERM/SIGHUP (the run's guard
                           turns those into exceptions)
  wrap(cmd, room)          a shell on the target host holds it around a whole `lab` command (fab tasks, for the
                           bundle and the container image alike): an EXIT trap restarts however the command ends,
                           also when the SSH session drops (SIGHUP) or the lab is killed; the rc lines it prints
                           become the record (`parse`)
"""

from __future__ import annotations

import contextlib
import re
import shlex
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

from lab.core.console import lab_console
from lab.core.errors import LabError
from lab.core.runs import RunFolder, RunInterrupted
from lab.core.shell import Shell

MARK = "lab-clean-room:"


class CleanRoomError(LabError):
    pass


@dataclass(frozen=True)
class CleanRoom:
    stop: str
    start: str

    def record(self, where: str, **rcs: int | None) -> dict[str, Any]:
        return {"stop": self.stop, "start": self.start, **rcs, "where": where}


@contextlib.contextmanager
def hold(shell: Shell, room: CleanRoom | None, run: RunFolder) -> Iterator[None]:
    """Stop the host's server through `shell` for the body and always start it again."""
    if room is None:
        yield
        return
    r = shell.run(room.stop, timeout=300)
    run.add_results(clean_room=room.record("lab", stop_rc=r.exited))
    if not r.ok:
        raise CleanRoomError(f"clean-room stop command failed ({r.exited}): {room.stop}\n{r.stderr.strip()}")
    try:
        yield
    finally:
        # the restart must happen whatever else arrives: a second Ctrl-C or SIGTERM during it is held until it
        # is done, and the start command runs in its own session (the terminal's SIGINT does not reach it)
        with deferred_signals() as later:
            again = shell.run(f"setsid -w sh -c {shlex.quote(room.start)}", timeout=300)
            run.add_results(clean_room=room.record("lab", stop_rc=r.exited, start_rc=again.exited))
        if not again.ok:
            lab_console(stderr=True).print(f"[red]clean-room start command failed ({again.exited}):[/red] {room.start}")
        if later:
            raise RunInterrupted(f"interrupted by {later[0]} (the host's server was started again first)")


@contextlib.contextmanager
def deferred_signals() -> Iterator[list[str]]:
    """SIGINT, SIGTERM and SIGHUP recorded, not acted on, for the body; the names of those that came."""
    got: list[str] = []

    def note(signum: int, frame: FrameType | None) -> None:
        got.append(signal.Signals(signum).name)

    old = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def restore_command(run: RunFolder) -> str:
    """The start command a run's clean room recorded (to restore the host's server after a SIGKILL, which
    no handler sees): one line to run by hand, or `lab host restore RUN`."""
    room = run.manifest().results.get("clean_room") or {}
    if not room.get("start"):
        raise CleanRoomError(f"{run.path.name} held no clean room")
    return str(room["start"])


def restore(run: RunFolder, announce: Callable[[str], None]) -> None:
    """`lab host restore RUN`: run the start command `run`'s clean room recorded, here, after `announce`-ing it
    (`$ <command>`); its failure is a CleanRoomError."""
    cmd = restore_command(run)
    announce(f"$ {cmd}")
    r = subprocess.run(["sh", "-c", cmd])
    if r.returncode != 0:
        raise CleanRoomError(f"the start command failed ({r.returncode}): {cmd}")


def wrap(cmd: str, room: CleanRoom) -> str:
    """`cmd` in a clean room held by the host's shell: stop first (its failure aborts, cmd never runs), start
    again however cmd ends (a hang-up included: trap HUP exits, the EXIT trap restarts). Prints the rc lines
    `parse` reads."""
    start = f"{{ {room.start} ; }}; echo '{MARK} start rc='$? >&2"
    script = (
        f"{{ {room.stop} ; }}; rc=$?; echo '{MARK} stop rc='$rc >&2; [ $rc -eq 0 ] || exit 1; "
        f"trap {shlex.quote(start)} EXIT; trap 'exit 129' HUP; trap 'exit 143' TERM; {cmd}"
    )
    return f"bash -c {shlex.quote(script)}"


def parse(output: str, room: CleanRoom, where: str) -> dict[str, Any]:
    """The record of a wrapped command, from its output (stop_rc/start_rc None when it never got there)."""
    rcs: dict[str, int | None] = {"stop_rc": None, "start_rc": None}
    for which, rc in re.findall(rf"{MARK} (stop|start) rc=(\d+)", output):
        rcs[f"{which}_rc"] = int(rc)
    return room.record(where, **rcs)
