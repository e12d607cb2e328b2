"""The lab's container image on a host that has Docker: pushed with `docker save | docker load` over the
task's own SSH connection (skipped when the host has the same image id), and `lab` run there in it.

The local side talks to whatever Docker the environment names (DOCKER_HOST, the default socket); the host's
side to its default daemon, or to `--docker-host` (a rootless or private daemon).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from typing import BinaryIO

from rich.console import Console

from lab.core.errors import UsageError
from lab.remote.connect import RemoteError, SshShell, sh
from lab.remote.modelcheck import HostModel

IMAGE = "prefill-lab:latest"
CHUNK = 1 << 20


@dataclass(frozen=True)
class ImageRef:
    name: str
    id: str
    revision: str  # org.opencontainers.image.revision (the lab commit it was built from)
    native: bool  # engine built with -march=native of the build machine

    def provenance(self) -> dict[str, str | bool]:
        return {"image": self.name, "id": self.id, "revision": self.revision, "native": self.native}


def local_image(name: str) -> ImageRef | None:
    """The image as the local Docker knows it (None: no docker client, no daemon, or no such image)."""
    if shutil.which("docker") is None:
        return None
    r = subprocess.run(["docker", "image", "inspect", name], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return None
    info = json.loads(r.stdout)[0]
    config = info.get("Config") or {}
    env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
    labels = config.get("Labels") or {}
    return ImageRef(
        name,
        info["Id"],
        labels.get("org.opencontainers.image.revision", "unknown"),
        env.get("LAB_ENGINE__NATIVE", "true").lower() == "true",
    )


def docker(docker_host: str | None) -> str:
    """The docker command on the host (pointed at --docker-host when given)."""
    return (f"DOCKER_HOST={shlex.quote(docker_host)} " if docker_host else "") + "docker"


def host_has_docker(t: SshShell, docker_host: str | None) -> bool:
    return t.run(f"{docker(docker_host)} info --format '{{{{.ServerVersion}}}}'", timeout=60).ok


def image_id_there(t: SshShell, name: str, docker_host: str | None) -> str:
    """The id of image `name` on the host ("" when it has none)."""
    r = t.run(f"{docker(docker_host)} image inspect --format '{{{{.Id}}}}' {shlex.quote(name)}")
    return r.stdout.strip() if r.ok else ""


def push_image(t: SshShell, ref: ImageRef, docker_host: str | None, console: Console) -> None:
    """docker save here | docker load there, unless the host already has this image id under that name."""
    if image_id_there(t, ref.name, docker_host) == ref.id:
        console.print(f"{t.name}: image {ref.name} ({ref.id[7:19]}) already there")
        return
    if ref.native:
        console.print(
            f"[yellow]{t.name}: {ref.name} has an engine built with -march=native of the machine that "
            "built it; on a different CPU build it with LAB_ENGINE__NATIVE=false[/yellow]"
        )
    console.print(f"{t.name}: docker save {ref.name} | docker load ({ref.id[7:19]}) ...")
    save = subprocess.Popen(["docker", "save", ref.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert save.stdout is not None

    def feed(stdin: BinaryIO) -> None:
        while chunk := save.stdout.read(CHUNK):  # type: ignore[union-attr]
            stdin.write(chunk)

    try:
        t.pipe_in(f"{docker(docker_host)} load -q", feed)
    finally:
        save.stdout.close()
        err = save.stderr.read().decode(errors="replace") if save.stderr else ""
        if save.wait() != 0:
            raise RemoteError(f"docker save {ref.name} failed: {err.strip()}")
    got = image_id_there(t, ref.name, docker_host)
    if got != ref.id:
        raise RemoteError(f"{t.name}: after docker load, {ref.name} is {got or 'missing'}, not {ref.id}")


def lab_in_container(
    t: SshShell,
    remote_dir: str,
    ref: ImageRef,
    args: list[str],
    container: str,
    docker_host: str | None,
    model: HostModel | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """`lab <args>` in the image on the host: run folders in remote_dir/runs, params.yaml from remote_dir, the
    host's user, no network (like compose.yaml), tini as PID 1 so a hang-up reaches the lab. `model`: a file
    of the host's, mounted read-only where `args` name it, and recorded by its host path and hash. `env`: more
    variables for the lab there."""
    runs, params = sh(f"{remote_dir}/runs:/work/catalog/runs"), sh(f"{remote_dir}/params.yaml:/work/params.yaml:ro")
    mount = ""
    if model is not None:
        if ":" in model.path or "," in model.path:  # docker's -v splits on ':'
            raise UsageError(f"--model {model.path}: a path with ':' or ',' cannot be mounted; link it elsewhere")
        mount = f"-v {sh(f'{model.path}:{model.mount}:ro')} -e LAB_MODEL_ORIGIN={shlex.quote(model.origin())} "
    extra = "".join(f"-e {shlex.quote(k + '=' + v)} " for k, v in (env or {}).items())
    return (
        f"mkdir -p {sh(remote_dir + '/runs')} && {docker(docker_host)} run --rm --init --name {shlex.quote(container)} "
        f'--network none -u "$(id -u):$(id -g)" --hostname {shlex.quote(t.name)} '
        f"-e LAB_HOST_NAME={shlex.quote(t.name)} {extra}-v {runs} -v {params} {mount}{shlex.quote(ref.name)} "
        f"{shlex.join(args)} --runs-dir /work/catalog/runs"
    )


def stop_container(t: SshShell, container: str, docker_host: str | None) -> None:
    """After a failed or cut run: stop the run's container if it still runs (SIGTERM: the run ends incomplete)."""
    name = shlex.quote(container)
    t.run(
        f"{docker(docker_host)} stop -t 30 {name} >/dev/null 2>&1; {docker(docker_host)} rm -f {name} >/dev/null 2>&1; "
        "true",
        timeout=120,
    )
