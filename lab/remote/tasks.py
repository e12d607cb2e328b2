"""Fabric tasks (`fab -H nuc16 measure`; the repo's fabfile.py imports these).

Every task verifies the host key first (lab.remote.connect): an unknown or changed key stops it with a
clear message. Runs land in catalog/runs/<run_id>/ (keyed by host in the id) and are `dvc add`ed.
`fab -H a,b measure` runs the hosts in parallel (lab.remote.parallel, named in fabric.yaml); results are keyed
by host. Each task returns what it produced (the run folder), which the parallel summary shows per host.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from fabric import task
from invoke.exceptions import Exit
from pydantic import ValidationError
from rich.console import Console

from lab.core.console import lab_console
from lab.core.errors import LabError, validation_line
from lab.core.settings import Settings, load_settings
from lab.measure.cleanroom import CleanRoom
from lab.remote.connect import SshShell, explain
from lab.remote.forward import forwarding_task
from lab.remote.image import IMAGE
from lab.remote.session import RemoteResult, RemoteRun, absolute_dir, deploy, params_to_push, run_remote
from lab.remote.session import snapshot as host_snapshot

REMOTE_DIR = "~/prefill-lab"
T = TypeVar("T")
_DVC_LOCK = threading.Lock()  # hosts in parallel: DVC's repository lock refuses a concurrent `dvc add`


def _target(c: Any) -> SshShell:
    return SshShell(c, name=str(getattr(c, "original_host", None) or c.host))


INTERRUPTED = 130  # exit code after Ctrl-C (128 + SIGINT, as a shell reports it)


def _guarded(c: Any, work: Any) -> Any:
    """The lab's error policy for fab tasks: a refused host key or any LabError is one clear message and exit 1
    (2 for a bad option), Ctrl-C one line and exit 130; anything else is a bug and keeps its traceback."""
    host = str(getattr(c, "original_host", c.host))
    try:
        return work(_target(c))
    except KeyboardInterrupt as e:
        raise Exit(f"{host}: interrupted", code=INTERRUPTED) from e
    except LabError as e:
        raise Exit(f"{host}: {e}", code=e.exit_code) from e
    except Exception as e:
        why = explain(e, host)
        if why is not None:
            raise Exit(why, code=1) from e
        raise


def _settings(**overrides: Any) -> Settings:
    """The settings here, a bad one (params file, LAB_* variable) one line and exit 2, as `lab` says it."""
    try:
        return _unguarded(lambda: load_settings(**overrides))
    except ValidationError as e:
        raise Exit(f"invalid settings: {validation_line(e, root='settings')}", code=2) from e


def _unguarded(work: Callable[[], T]) -> T:
    """`work()` before any host is reached: a LabError is one line and its exit code (_guarded's policy)."""
    try:
        return work()
    except LabError as e:
        raise Exit(str(e).strip().splitlines()[0], code=e.exit_code) from e


def _finish(res: RemoteResult, settings: Settings, console: Console) -> str:
    if res.run is not None:
        from lab.catalog.dvc import DvcError, track_runs

        try:
            with _DVC_LOCK:
                track_runs(settings.runs_dir, settings.runs_dir.resolve().parent, only=[res.run])
        except DvcError as e:  # not a DVC project, or dvc failed: the run folder is kept either way
            console.print(f"[yellow]dvc add skipped:[/yellow] {e}")
    console.print(f"{res.host}: {res.status}" + (f" ({res.message})" if res.message else ""))
    if res.run is not None:
        console.print(str(res.run))
    rerun = f"; rerun with --resume {res.run.name if res.run else '<run>'}" if res.status != "complete" else ""
    if res.interrupted:
        raise Exit(f"{res.host}: interrupted; run {res.status}{rerun}", code=INTERRUPTED)
    if res.status != "complete":
        raise Exit(f"{res.host}: run {res.status}{rerun}", code=1)
    return str(res.run)


@task(help={"out": "where to write host/ and git/ (default: catalog/hosts/<host>)", "checkout": "lab checkout there"})
def snapshot(c: Any, out: str | None = None, checkout: str | None = None) -> str:
    """Snapshot the host: uname, lscpu, free, df, ... and the git state of a lab checkout there."""
    dest = Path(out or f"catalog/hosts/{getattr(c, 'original_host', c.host)}")
    summary = _guarded(c, lambda t: host_snapshot(t, dest, checkout))
    lab_console().print(summary)
    print(dest)
    return str(dest)


VIA = {
    "via": "auto (the image if this machine has it and the host has Docker, else the bundle) | docker | bundle",
    "image": f"container image to push (default {IMAGE})",
    "docker_host": "DOCKER_HOST on the host (default: its own)",
    "remote_dir": f"lab directory on the host (default {REMOTE_DIR})",
}


@task(help=VIA)
def push(
    c: Any, via: str = "auto", image: str = IMAGE, docker_host: str | None = None, remote_dir: str = REMOTE_DIR
) -> str:
    """Push the pinned build unless the host has it: the container image (docker save | docker load) or the
    bundle (engine + instrument + lab wheel + tiny model)."""
    settings, console = _settings(), lab_console()
    how = _guarded(c, lambda t: deploy(t, settings, absolute_dir(t, remote_dir), console, via, image, docker_host))
    if how.image is not None:
        what = f"image {how.image.name} {how.image.id[7:19]} (lab {how.image.revision[:12]})"
    else:
        m = how.meta
        what = f"bundle {m['key']} (engine {m['engine_commit']}, patch {m['engine_patch_sha256'][:12]})"
    console.print(what)
    return what


RESUME = {"resume": (None, "finish an incomplete run (its id)")}
VIA_OPTS: dict[str, tuple[Any, str]] = {k: ({"via": "auto", "image": IMAGE}.get(k), h) for k, h in VIA.items()}
VIA_OPTS["remote_dir"] = (REMOTE_DIR, VIA["remote_dir"])
VIA_OPTS["push_model"] = (
    False,
    "--model is a file here (or pretrained:NAME, always pushed): copy it to the host once, resumably, its sha256 "
    "checked there; skipped when the host has it",
)


def _run_there(c: Any, args: list[str], own: dict[str, Any], room: CleanRoom | None = None) -> str:
    """`lab <args>` on the host (lab.remote.session.run_remote) with the task's own options, then the fetched
    run tracked and its status said. The release the command names (`--engine`) is the one pushed."""
    asked = args[args.index("--engine") + 1] if "--engine" in args[:-1] else None
    settings, console = _settings(engine={"sdist_version": asked}), lab_console()
    _unguarded(lambda: params_to_push(settings))  # before anything is pushed
    resume = own.get("resume")
    if resume is not None:
        args = args[:1]  # a resumed run keeps its own params
    remote = RemoteRun(
        args,
        own["remote_dir"],
        resume=resume,
        via=own["via"],
        image=own["image"],
        docker_host=own["docker_host"],
        room=room,
        push=bool(own.get("push_model")),
    )
    res = _guarded(c, lambda t: run_remote(t, settings, remote, console))
    return _finish(res, settings, console)


def _measure(c: Any, args: list[str], own: dict[str, Any]) -> str:
    return _run_there(c, args, own)


def _profile(c: Any, args: list[str], own: dict[str, Any]) -> str:
    stop, start = own.get("clean_room_stop"), own.get("clean_room_start")
    if (stop is None) != (start is None):
        raise Exit("--clean-room-stop and --clean-room-start go together", code=2)
    return _run_there(c, args, own, CleanRoom(stop, start) if stop is not None and start is not None else None)


measure = forwarding_task(
    "sweep",
    "measure",
    "Run the fake-prefix sweep (`lab sweep`, same options) on the host and fetch the run folder into catalog/runs/ "
    "(and dvc add it).",
    {**RESUME, **VIA_OPTS},
    _measure,
)

profile = forwarding_task(
    "profile",
    "profile",
    "Run the per-node profile (`lab profile`, same options) on the host, optionally in a clean room held by the "
    "host's shell, and fetch the run folder.",
    {
        "clean_room_stop": (None, "command that stops the host's server"),
        "clean_room_start": (None, "command that starts it again (always run)"),
        **RESUME,
        **VIA_OPTS,
    },
    _profile,
)

arms = forwarding_task(
    "arms",
    "arms",
    "Run the sweep in one process (`lab arms` = `lab sweep --where inproc`, same options: no server in the "
    "numbers) on the host with the bundled driver, and fetch the run folder.",
    {**RESUME, **VIA_OPTS},
    _measure,
)
