"""The target host for tests: a real OpenSSH server on loopback with its own host key, authorized client key,
known_hosts line and $HOME. Runs as the current user (root in CI) with no systemd. Plus how tests drive it:
an ssh config alias, a lab project to run `fab` in, and `fab` itself."""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass
class Sshd:
    dir: Path
    home: Path  # $HOME of its sessions (each test host has its own ~)
    address: str
    port: int
    user: str
    client_key: Path
    known_hosts: Path  # the server's real host key
    proc: subprocess.Popen[bytes]
    netns: str | None = None  # its own network namespace (reached over a veth pair), if any

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.netns:
            drop_netns(self.netns)

    def session_pids(self) -> list[int]:
        """The sshd processes serving connections (killing them cuts every connection; the listener stays)."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]

    def sshd_processes(self) -> list[int]:
        """Every sshd process below the listener (each connection's monitor and the child that does its network
        I/O), not the shells and commands they run: SIGSTOP them and the host goes silent, its runs go on."""
        parent: dict[int, int] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                comm, rest = stat.read_text().rsplit(")", 1)
            except (OSError, ValueError):
                continue
            if comm.split("(", 1)[1] == "sshd":
                parent[int(stat.parent.name)] = int(rest.split()[1])
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            kids = [p for p, pp in parent.items() if pp == pid]
            out += kids
            todo += kids
        return out

    def write_wrong_known_hosts(self, path: Path) -> Path:
        """A known_hosts naming this host with a different key (a changed or spoofed host)."""
        other = self.dir / "other_host_key"
        if not other.exists():
            keygen(other)
        path.write_text(f"[{self.address}]:{self.port} {' '.join(other.with_suffix('.pub').read_text().split()[:2])}\n")
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


def make_netns(name: str) -> str:
    """A network namespace joined to this one by a veth pair; returns its address (this side is .1). Its
    processes (sshd, the sessions, the llama-server they start) get their own loopback and ports."""
    n = int(name.rsplit("-", 1)[1]) % 16000
    net = f"10.{200 + n // 250 % 50}.{n % 250}"
    here, there = f"vl{n}a", f"vl{n}b"
    for cmd in (
        f"ip netns add {name}", f"ip netns exec {name} ip link set lo up",
        f"ip link add {here} type veth peer name {there}", f"ip link set {there} netns {name}",
        f"ip addr add {net}.1/30 dev {here}", f"ip link set {here} up",
        f"ip netns exec {name} ip addr add {net}.2/30 dev {there}", f"ip netns exec {name} ip link set {there} up",
    ):  # fmt: skip
        r = subprocess.run(cmd.split(), capture_output=True, text=True)
        if r.returncode != 0:
            drop_netns(name)
            raise RuntimeError(f"`{cmd}` failed (needs root and iproute2): {r.stderr.strip()}")
    return f"{net}.2"


def drop_netns(name: str) -> None:
    n = int(name.rsplit("-", 1)[1]) % 16000
    subprocess.run(["ip", "link", "del", f"vl{n}a"], capture_output=True)  # takes its peer along
    subprocess.run(["ip", "netns", "del", name], capture_output=True)


def start_sshd(base: Path, netns: bool = False, path_first: Path | None = None) -> Sshd:
    """sshd on 127.0.0.1, or (netns=True) in its own network namespace, reached at a veth address; path_first:
    a directory put first on its sessions' PATH (another python3, a hostile `ls`)."""
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
    ns = f"lab-sshd-{port}" if netns else None
    address = make_netns(ns) if ns else "127.0.0.1"
    (d / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}", f"ListenAddress {address}", f"HostKey {d / 'host_key'}",
                f"AuthorizedKeysFile {d / 'authorized_keys'}", f"PidFile {d / 'sshd.pid'}",
                "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
                "PermitRootLogin prohibit-password", "UsePAM no", "StrictModes no",
                "Subsystem sftp internal-sftp",
                f"SetEnv HOME={home}" + (f" PATH={path_first}:/usr/local/bin:/usr/bin:/bin" if path_first else ""), "",
            ]
        )
    )  # fmt: skip
    subprocess.run([SSHD, "-t", "-f", str(d / "sshd_config")], check=True)
    log = (d / "sshd.log").open("wb")
    inside = ["ip", "netns", "exec", ns] if ns else []
    proc = subprocess.Popen([*inside, SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log, stderr=log)
    pub = (d / "host_key.pub").read_text().split()
    (d / "known_hosts").write_text(f"[{address}]:{port} {pub[0]} {pub[1]}\n")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=1):
                break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        if ns:
            drop_netns(ns)
        raise RuntimeError(f"sshd did not start; see {d / 'sshd.log'}")
    return Sshd(d, home, address, port, getpass.getuser(), d / "client_key", d / "known_hosts", proc, ns)


REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def alias(name: str, server: Sshd, known_hosts: Path) -> str:
    """An ssh config entry naming the server `name`, trusting the keys in known_hosts."""
    return (f"Host {name}\n  HostName {server.address}\n  Port {server.port}\n  User {server.user}\n"
            f"  IdentityFile {server.client_key}\n  UserKnownHostsFile {known_hosts}\n")  # fmt: skip


def fab_project(p: Path) -> Path:
    """A lab project (fabfile, fabric.yaml, params, DVC config, git) where fetched runs land."""
    for name in ("fabfile.py", "fabric.yaml", "params.yaml", "dvc.yaml", ".dvcignore"):
        shutil.copyfile(REPO / name, p / name)
    (p / ".dvc").mkdir()
    shutil.copyfile(REPO / ".dvc" / "config", p / ".dvc" / "config")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=p, check=True)
    return p


def fab_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The lab's venv first on PATH; no DOCKER_HOST leaking in (`--via auto` looks at the local Docker)."""
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    return {**env, "PATH": f"{BIN}:{os.environ['PATH']}", "COLUMNS": "200", **(extra or {})}


def fab_cmd(config: Path, hosts: str, *args: str) -> list[str]:
    return [str(BIN / "fab"), "-S", str(config), "-H", hosts, *args]


def fab(
    project: Path, config: Path, *args: str, hosts: str = "nuc16", env: dict[str, str] | None = None,
    timeout: float = 1200,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(fab_cmd(config, hosts, *args), cwd=project, env=fab_env(env), capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def cut_mid_sweep(
    server: Sshd, proc: subprocess.Popen[str], runs: Path, before: set[Path], timeout: float = 600
) -> tuple[Path, str, str]:
    """Once the sweep that `proc` (a fab measure) started has written a point's first round on the host (its reps
    in the run's first process: every point has rounds still to come), cut every SSH connection to it; returns
    the host's run folder and fab's output after it gave up."""
    deadline, run_dir = time.monotonic() + timeout, None
    while time.monotonic() < deadline and run_dir is None:
        assert proc.poll() is None, proc.communicate()
        new = [p for p in runs.glob("*_sweep_*") if p not in before]
        if new and (new[0] / "raw" / "rounds.jsonl").exists() and (new[0] / "raw" / "rounds.jsonl").read_text():
            run_dir = new[0]
        time.sleep(0.2)
    assert run_dir is not None, "the remote sweep made no progress"
    for pid in server.session_pids():
        os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode != 0, out + err
    return run_dir, out, err
