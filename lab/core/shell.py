"""The host shell: where the lab's shell commands run. Local = invoke.Context, a target host =
fabric.Connection (lab.remote.connect.SshShell): the same `run` API. The host snapshot, the git snapshot,
llama-bench and the clean-room commands go through it, so the same code records a host whether the lab runs
there itself (a bundle or the image on nuc16 runs `lab` locally) or a fab task asks it over SSH.
The engine's own processes (llama-server, the profiler instrument) are started directly, on the machine the
lab runs on, because the lab supervises them (health checks, process groups, parent-death signals)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class CmdResult:
    stdout: str
    stderr: str
    exited: int

    @property
    def ok(self) -> bool:
        return self.exited == 0


class Shell(Protocol):
    """What the lab needs from a host: run a shell command, and a name for it."""

    name: str

    def run(self, cmd: str, timeout: float | None = None) -> CmdResult: ...


class LocalShell:
    """This machine, through invoke (the API fabric.Connection extends)."""

    def __init__(self, name: str | None = None) -> None:
        from invoke.context import Context

        self.ctx = Context()
        self.name = name or socket.gethostname().split(".")[0]

    def run(self, cmd: str, timeout: float | None = None) -> CmdResult:
        r: Any = self.ctx.run(cmd, warn=True, hide=True, in_stream=False, timeout=timeout)
        return CmdResult(stdout=r.stdout, stderr=r.stderr, exited=int(r.exited))
