"""Ctrl-C while a target host's run goes on: the first goes down the pty, a second (or none heeded in time)
hangs up."""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

from lab.remote.connect import SshShell

CTRL_C_GRACE = 30.0  # s the host's run has to end after a Ctrl-C before the connection is hung up


class CtrlC:
    """SIGINT while the host's run goes on (the main thread only: parallel hosts' is lab.remote.parallel's). The
    first is raised as KeyboardInterrupt, which invoke sends down the pty as ^C (the run ends incomplete and the
    command returns); a second, or no end within CTRL_C_GRACE s, hangs up (SIGHUP there)."""

    def __init__(self, t: SshShell) -> None:
        self.t, self.interrupted = t, False
        self.old: Any = None
        self.timer: threading.Timer | None = None

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, self.on_sigint)
        return self

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupted:
            self.t.hang_up()
            return
        self.interrupted = True
        self.timer = threading.Timer(CTRL_C_GRACE, self.t.hang_up)
        self.timer.daemon = True
        self.timer.start()
        raise KeyboardInterrupt

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
