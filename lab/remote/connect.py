"""An SSH shell on a target host, with verified host keys: the same run/put/get API as the local shell.

Fabric's Connection hard-codes paramiko's AutoAddPolicy and never loads known_hosts, i.e. it accepts any
host key. `verified()` loads the known_hosts files (ssh config `UserKnownHostsFile`, else ~/.ssh/known_hosts)
and sets RejectPolicy before the first use: an unknown or changed key is refused, on every ProxyJump hop too
(fabric makes each hop a Connection of its own). Trusting a new host is an explicit step (`ssh-keyscan` into
known_hosts, fingerprint compared out of band; see docs/target-host.md).

Paramiko's keepalive only sends and never waits for an answer, so a silent partition would hang a command
forever. `Watchdog` does what OpenSSH's ServerAliveInterval/ServerAliveCountMax do (read from the ssh config,
else 15 s and 3): a probe every interval, and no answer within interval x count closes the connection (the
command ends, and the caller says "connection lost"). ConnectTimeout (or `fab -t`) bounds a connect, else 30 s.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from lab.core.errors import LabError
from lab.core.safetar import MAX_BYTES, MAX_MEMBERS, safe_extract
from lab.core.shell import CmdResult


class HostKeyError(LabError):
    pass


class RemoteError(LabError):
    """A step on a target host failed (pushing, installing, packing a run folder)."""


# a run folder's tar stream: what safe_extract would unpack at most, its headers and padding
MAX_STREAM = MAX_BYTES + (MAX_MEMBERS + 2) * 1024


class ConnectionLost(RemoteError):
    """The host stopped answering: the keepalive's bound passed and the connection was closed."""


ALIVE_INTERVAL = 15.0  # s between probes (ssh config ServerAliveInterval; 0: none)
ALIVE_COUNT = 3  # a probe unanswered for interval x count s: the connection is dead (ServerAliveCountMax)
CONNECT_TIMEOUT = 30  # s (ssh config ConnectTimeout, or `fab -t`)


def sh(path: str) -> str:
    """A path as one shell word on the host: `~` and `~/...` expand to its home there, everything else is
    quoted (a space, a quote or a `;` in a directory name stays part of that one name)."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def network_errors() -> tuple[type[BaseException], ...]:
    """What a connection that cannot be made (again) raises: a socket's error or timeout, SSH's own."""
    import paramiko

    return (OSError, EOFError, paramiko.SSHException)


def known_hosts_files(c: Any) -> list[Path]:
    configured = str(c.ssh_config.get("userknownhostsfile", "~/.ssh/known_hosts ~/.ssh/known_hosts2"))
    return [Path(os.path.expanduser(f)) for f in configured.split()]


def hops(c: Any) -> list[Any]:
    """The ProxyJump hops in front of a Connection, the nearest first (a ProxyCommand string is no hop of ours)."""
    out, gw = [], getattr(c, "gateway", None)
    while gw is not None and not isinstance(gw, str):
        out.append(gw)
        gw = getattr(gw, "gateway", None)
    return out


def verified(c: Any) -> Any:
    """Make a fabric Connection and each of its ProxyJump hops refuse unknown and changed host keys, and bound
    their connects (call before its first use)."""
    import paramiko

    if getattr(c, "_lab_verified", False):
        return c
    for conn in (c, *hops(c)):
        if conn.is_connected:
            raise HostKeyError("connection opened before host-key verification was set up")
        for f in known_hosts_files(conn):
            if f.exists():
                conn.client.load_system_host_keys(str(f))
        conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        if conn.connect_timeout is None:
            conn.connect_timeout = CONNECT_TIMEOUT
    c._lab_verified = True
    return c


def alive_setting(c: Any) -> tuple[float, int]:
    """(ServerAliveInterval, ServerAliveCountMax) of a Connection's ssh config, else the lab's defaults."""
    cfg = c.ssh_config
    try:
        interval = float(cfg.get("serveraliveinterval", ALIVE_INTERVAL))
        count = int(cfg.get("serveralivecountmax", ALIVE_COUNT))
    except ValueError as e:
        raise RemoteError(f"ssh config ServerAliveInterval/ServerAliveCountMax: {e}") from e
    return interval, max(count, 1)


class Watchdog(threading.Thread):
    """Probes a transport every `interval` s (a session channel opened and closed: a round trip any SSH server
    answers, a refusal included); one unanswered for interval x count s closes the transport, which ends what
    runs over it. `lost` says why (empty while the host answers)."""

    def __init__(self, transport: Any, name: str, interval: float, count: int) -> None:
        super().__init__(name=f"ssh-alive-{name}", daemon=True)
        self.transport, self.host, self.interval, self.count = transport, name, interval, count
        self.lost = ""

    def run(self) -> None:
        import paramiko

        t = self.transport
        while t.is_active():
            time.sleep(self.interval)
            if not t.is_active():
                return
            try:
                t.open_session(timeout=self.interval * self.count).close()
            except paramiko.ChannelException:
                continue  # refused (MaxSessions): an answer all the same
            except Exception:
                if t.is_active():
                    self.lost = (
                        f"connection lost: no answer from {self.host} for {self.interval * self.count:g} s "
                        f"(ServerAliveInterval {self.interval:g} x ServerAliveCountMax {self.count})"
                    )
                    t.close()
                return


def watch(conn: Any, name: str) -> Watchdog | None:
    """The watchdog of an open Connection's transport (started once per transport; None: keepalive off)."""
    transport = conn.client.get_transport()
    dog: Watchdog | None = getattr(transport, "_lab_watchdog", None)
    if dog is None:
        interval, count = alive_setting(conn)
        if interval <= 0:
            return None
        dog = Watchdog(transport, name, interval, count)
        transport._lab_watchdog = dog
        dog.start()
    return dog


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


class SshShell:
    """A host over SSH (fabric.Connection, host keys verified on every hop, watched by a keepalive): run/put/get
    like LocalShell, plus trees."""

    def __init__(self, connection: Any, name: str | None = None) -> None:
        self.c = verified(connection)
        self.name = name or str(getattr(connection, "original_host", None) or connection.host)

    def connect(self) -> Watchdog | None:
        """Connect if not connected: the ProxyJump hops first, the farthest first (a refused hop's key is one line
        naming it), each bounded and watched; returns the watchdog of the connection to the host."""
        for hop in reversed(hops(self.c)):
            if hop.is_connected:
                continue
            name = str(getattr(hop, "original_host", None) or hop.host)
            try:
                hop.open()
            except Exception as e:
                why = explain(e, f"ProxyJump hop {name}")
                if why is not None:
                    raise HostKeyError(why) from e
                raise
            # fabric opens the next hop's channel through this one with paramiko's default timeout (an hour)
            hop.client.get_transport().channel_timeout = hop.connect_timeout or CONNECT_TIMEOUT
            watch(hop, name)
        self.c.open()
        return watch(self.c, self.name)

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """One use of the connection (opened first); ConnectionLost if the watchdog closed it meanwhile."""
        dog = self.connect()
        try:
            yield
        except Exception as e:
            if dog is not None and dog.lost:
                raise ConnectionLost(dog.lost) from e
            raise
        if dog is not None and dog.lost:
            raise ConnectionLost(dog.lost)

    def hang_up(self) -> None:
        """Close the connection (a pty command there gets SIGHUP); the next call connects again."""
        self.c.close()

    def run(self, cmd: str, timeout: float | None = None, pty: bool = False) -> CmdResult:
        with self.call():
            r = self.c.run(cmd, warn=True, hide=True, in_stream=False, timeout=timeout, pty=pty)
        return CmdResult(stdout=r.stdout, stderr=r.stderr, exited=int(r.exited))

    def put(self, local: Path, remote: str) -> None:
        with self.call():
            self.c.put(str(local), remote)

    def get(self, remote: str, local: Path) -> None:
        with self.call():
            self.c.get(remote, str(local))

    def pipe_in(self, remote_cmd: str, feed: Callable[[BinaryIO], None]) -> None:
        """Run remote_cmd with feed() writing its stdin (a stream: nothing is staged on either side)."""
        with self.call():
            chan = self.c.client.get_transport().open_session()
            chan.exec_command(remote_cmd)
            with chan.makefile_stdin("wb") as stdin:
                feed(stdin)
            chan.shutdown_write()
            status = chan.recv_exit_status()
        if status != 0:
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
        # on disk beside `local`, not in memory, and bounded: a host's stream is as long as the host likes
        with tempfile.TemporaryFile(dir=local.parent) as data:
            with self.call():
                chan = self.c.client.get_transport().open_session()
                chan.exec_command(f"tar -C {sh(remote_dir)} -cf - .")
                while chunk := chan.recv(1 << 20):
                    if data.tell() + len(chunk) > MAX_STREAM:
                        chan.close()
                        raise RemoteError(f"{self.name}:{remote_dir} sent over {MAX_STREAM} bytes: not taken")
                    data.write(chunk)
                status = chan.recv_exit_status()
            if status != 0:
                raise RemoteError(f"packing {self.name}:{remote_dir} failed")
            data.seek(0)
            try:
                with tarfile.open(fileobj=data, mode="r:") as tar:
                    safe_extract(tar, local)  # a host's tar never writes outside `local`
            except tarfile.TarError as e:
                raise RemoteError(f"{self.name}:{remote_dir} sent no readable tar stream ({e})") from e
