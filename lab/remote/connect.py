"""An SSH target with verified host keys, and the same run/put/get API as the local target.

Fabric's Connection hard-codes paramiko's AutoAddPolicy and never loads known_hosts, i.e. it accepts any
host key. `verified()` loads the known_hosts files (ssh config `UserKnownHostsFile`, else ~/.ssh/known_hosts)
and sets RejectPolicy before the first use: an unknown or changed key is refused. Trusting a new host is an
explicit step (`ssh-keyscan` into known_hosts, fingerprint compared out of band; see docs/target-host.md).
"""

from __future__ import annotations

import io
import os
import shlex
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from lab.core.errors import LabError
from lab.core.safetar import safe_extract
from lab.core.target import CmdResult


class HostKeyError(LabError):
    pass


class RemoteError(LabError):
    """A step on a target host failed (pushing, installing, packing a run folder)."""


def sh(path: str) -> str:
    """A path as one shell word on the host: `~` and `~/...` expand to its home there, everything else is
    quoted (a space, a quote or a `;` in a directory name stays part of that one name)."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def known_hosts_files(c: Any) -> list[Path]:
    configured = str(c.ssh_config.get("userknownhostsfile", "~/.ssh/known_hosts ~/.ssh/known_hosts2"))
    return [Path(os.path.expanduser(f)) for f in configured.split()]


def verified(c: Any) -> Any:
    """Make a fabric Connection refuse unknown and changed host keys (call before its first use)."""
    import paramiko

    if getattr(c, "_lab_verified", False):
        return c
    if c.is_connected:
        raise HostKeyError("connection opened before host-key verification was set up")
    for f in known_hosts_files(c):
        if f.exists():
            c.client.load_system_host_keys(str(f))
    c.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    c._lab_verified = True
    return c


def explain(e: BaseException, host: str) -> str | None:
    """A clear message for a refused host key (None: not a host-key problem)."""
    import paramiko

    if isinstance(e, paramiko.BadHostKeyException):
        return (
            f"{host}: the host key CHANGED (expected {e.expected_key.get_base64()[:16]}..., got "
            f"{e.key.get_base64()[:16]}...). Refusing. If the host was reinstalled, verify the new "
            "fingerprint out of band and replace its known_hosts line."
        )
    if isinstance(e, paramiko.SSHException) and "not found in known_hosts" in str(e):
        return (
            f"{host}: unknown host key ({e}). Refusing. To trust it: ssh-keyscan the host into "
            "known_hosts and compare the fingerprint (ssh-keygen -lf) out of band."
        )
    return None


class SshTarget:
    """A host over SSH (fabric.Connection, host keys verified): run/put/get like LocalTarget, plus trees."""

    def __init__(self, connection: Any, name: str | None = None) -> None:
        self.c = verified(connection)
        self.name = name or str(getattr(connection, "original_host", None) or connection.host)

    def run(self, cmd: str, timeout: float | None = None, pty: bool = False) -> CmdResult:
        r = self.c.run(cmd, warn=True, hide=True, in_stream=False, timeout=timeout, pty=pty)
        return CmdResult(stdout=r.stdout, stderr=r.stderr, exited=int(r.exited))

    def put(self, local: Path, remote: str) -> None:
        self.c.put(str(local), remote)

    def get(self, remote: str, local: Path) -> None:
        self.c.get(remote, str(local))

    def pipe_in(self, remote_cmd: str, feed: Callable[[BinaryIO], None]) -> None:
        """Run remote_cmd with feed() writing its stdin (a stream: nothing is staged on either side)."""
        chan = self.c.client.get_transport().open_session()
        chan.exec_command(remote_cmd)
        with chan.makefile_stdin("wb") as stdin:
            feed(stdin)
        chan.shutdown_write()
        if chan.recv_exit_status() != 0:
            err = chan.makefile_stderr("rb").read().decode(errors="replace").strip()
            raise RemoteError(f"{self.name}: `{remote_cmd}` failed: {err[-1500:]}")

    def put_tree(self, local: Path, remote_dir: str) -> None:
        """Copy a directory's contents into remote_dir as one tar stream (SFTP is slow for many files)."""
        self.run(f"mkdir -p {sh(remote_dir)}")

        def tar_into(stdin: BinaryIO) -> None:
            with tarfile.open(fileobj=stdin, mode="w|") as tar:
                tar.add(str(local), arcname=".")

        self.pipe_in(f"tar -C {sh(remote_dir)} -xf -", tar_into)

    def get_tree(self, remote_dir: str, local: Path) -> None:
        """Copy remote_dir's contents into local (created) as one tar stream."""
        local.mkdir(parents=True, exist_ok=True)
        chan = self.c.client.get_transport().open_session()
        chan.exec_command(f"tar -C {sh(remote_dir)} -cf - .")
        data = io.BytesIO()
        while True:
            chunk = chan.recv(1 << 20)
            if not chunk:
                break
            data.write(chunk)
        if chan.recv_exit_status() != 0:
            raise RemoteError(f"packing {self.name}:{remote_dir} failed")
        data.seek(0)
        with tarfile.open(fileobj=data, mode="r:") as tar:
            safe_extract(tar, local)  # a host's tar never writes outside `local`
