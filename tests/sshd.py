"""A real OpenSSH server on loopback for tests: its own host key, its own authorized client key, its own
known_hosts line. Runs as the current user (root in CI) with no systemd."""

from __future__ import annotations

import getpass
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass
class Sshd:
    dir: Path
    home: Path  # $HOME of its sessions (each test host has its own ~)
    port: int
    user: str
    client_key: Path
    known_hosts: Path  # the server's real host key
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def write_wrong_known_hosts(self, path: Path) -> Path:
        """A known_hosts naming this host with a different key (a changed or spoofed host)."""
        other = self.dir / "other_host_key"
        if not other.exists():
            keygen(other)
        path.write_text(f"[127.0.0.1]:{self.port} {' '.join(other.with_suffix('.pub').read_text().split()[:2])}\n")
        return path


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    # ssh-keygen names the public key <path>.pub; keep a copy readable with with_suffix(".pub") too
    pub = Path(str(path) + ".pub")
    if path.with_suffix(".pub") != pub:
        shutil.copyfile(pub, path.with_suffix(".pub"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_sshd(base: Path) -> Sshd:
    if not Path(SSHD).exists():
        raise RuntimeError(f"{SSHD} is missing: install openssh-server (scripts/system-deps.sh does)")
    d, home = base / "sshd", base / "home"
    d.mkdir(parents=True)
    home.mkdir(exist_ok=True)
    keygen(d / "host_key")
    keygen(d / "client_key")
    shutil.copyfile(d / "client_key.pub", d / "authorized_keys")
    (d / "authorized_keys").chmod(0o600)
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    port = free_port()
    (d / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {d / 'host_key'}",
                f"AuthorizedKeysFile {d / 'authorized_keys'}", f"PidFile {d / 'sshd.pid'}",
                "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
                "PermitRootLogin prohibit-password", "UsePAM no", "StrictModes no",
                "Subsystem sftp internal-sftp", f"SetEnv HOME={home}", "",
            ]
        )
    )  # fmt: skip
    subprocess.run([SSHD, "-t", "-f", str(d / "sshd_config")], check=True)
    log = (d / "sshd.log").open("wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log, stderr=log)
    pub = (d / "host_key.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise RuntimeError(f"sshd did not start; see {d / 'sshd.log'}")
    return Sshd(d, home, port, getpass.getuser(), d / "client_key", d / "known_hosts", proc)
