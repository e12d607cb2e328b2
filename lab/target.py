"""Where commands run. Local = invoke.Context, remote = fabric.Connection: the same run/put/get API, so
experiment code never branches on local vs remote."""

from __future__ import annotations

import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class CmdResult:
    stdout: str
    stderr: str
    exited: int

    @property
    def ok(self) -> bool:
        return self.exited == 0


class Target(Protocol):
    """What the lab needs from a host: run a shell command, copy files both ways, and a name for it."""

    name: str

    def run(self, cmd: str, timeout: float | None = None) -> CmdResult: ...

    def put(self, local: Path, remote: str) -> None: ...

    def get(self, remote: str, local: Path) -> None: ...


class LocalTarget:
    """This machine, through invoke (the API fabric.Connection extends)."""

    def __init__(self, name: str | None = None) -> None:
        from invoke.context import Context

        self.ctx = Context()
        self.name = name or socket.gethostname().split(".")[0]

    def run(self, cmd: str, timeout: float | None = None) -> CmdResult:
        r: Any = self.ctx.run(cmd, warn=True, hide=True, in_stream=False, timeout=timeout)
        return CmdResult(stdout=r.stdout, stderr=r.stderr, exited=int(r.exited))

    def put(self, local: Path, remote: str) -> None:
        shutil.copy2(local, remote)

    def get(self, remote: str, local: Path) -> None:
        shutil.copy2(remote, local)
