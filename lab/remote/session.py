"""One target host: push the bundle, snapshot it, run a lab experiment there and fetch the run folder.

Layout on the host (remote_dir, default ~/prefill-lab): bundle/ (the pushed bundle), venv/ (the lab from
the bundle's wheel), cache/, runs/. The experiment runs with a pty, so a dropped connection hangs it up:
the run's guard turns SIGHUP into `status: incomplete`, its llama-server dies with it (PR_SET_PDEATHSIG),
the clean room restarts the host's service, and what was written is fetched on the next connection. Ctrl-C is
sent down the pty (the run ends incomplete); a second one, or no end within CTRL_C_GRACE s, hangs up.

The run fetched is the one the host's lab reports for this command (LAB_RUN_ID_FILE), never a name its listing
shows. Run folders are write-once here too: a new run never lands on a local folder, and a resumed run's local
copy only grows (lab.remote.fetch).
"""

from __future__ import annotations

import json
import shlex
import uuid
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from lab.core.errors import LabError, UsageError
from lab.core.run_ids import check_run_id
from lab.core.runs import RunFolder
from lab.core.settings import REPO_ROOT, Settings
from lab.core.shell import LocalShell
from lab.core.snapshot import snapshot_git, snapshot_host
from lab.engine.build import build_engine
from lab.inproc import build_driver
from lab.instrument import build_instrument
from lab.measure.cleanroom import CleanRoom, parse, wrap
from lab.models.resolve import resolve_model, resolve_projector
from lab.remote.bundle import make_bundle, make_wheelhouse, python_tag
from lab.remote.connect import ConnectionLost, RemoteError, SshShell, network_errors, sh
from lab.remote.fetch import fetch
from lab.remote.image import (
    IMAGE,
    ImageRef,
    host_has_docker,
    lab_in_container,
    local_image,
    push_image,
    stop_container,
)
from lab.remote.interrupt import CtrlC
from lab.remote.modelcheck import HostModel, check_host_model, model_arg, with_model
from lab.remote.modelpush import NAMED, Pushed, local_model, push_model


@dataclass
class RemoteResult:
    host: str
    run: Path | None  # the local copy under runs_dir
    status: str
    message: str = ""
    interrupted: bool = False  # Ctrl-C: the run was stopped there and fetched


def push(t: SshShell, settings: Settings, remote_dir: str, console: Console) -> dict[str, str]:
    """Make (cached) and push the bundle if the host lacks this exact one; install the lab in a venv."""
    engine = build_engine(settings.engine, settings.cache_dir, flavor="release", quiet=True)
    # compiled here, so `fab profile` and `lab arms` on the host need no compiler there
    tools = [build_instrument(engine, settings.cache_dir).binary, build_driver(engine, settings.cache_dir).binary]
    # the tiny default model travels along, and its vision projector (for image steps)
    model = resolve_model(settings) if settings.model is None else None
    projector = resolve_projector(settings) if settings.model is None and settings.mmproj is None else None
    bundle = make_bundle(engine, settings.cache_dir, model, tools, projector)
    meta: dict[str, str] = json.loads((bundle / "bundle.json").read_text())
    have = t.run(f"cat {sh(remote_dir + '/bundle/bundle.json')} 2>/dev/null")
    if have.ok and json.loads(have.stdout or "{}").get("key") == meta["key"]:
        console.print(f"{t.name}: bundle {meta['key']} already there")
    else:
        console.print(f"{t.name}: pushing bundle {meta['key']} ...")
        t.run(f"rm -rf {sh(remote_dir + '/bundle.new')}")
        t.put_tree(bundle, f"{remote_dir}/bundle.new")
        bundle_dir, new = sh(f"{remote_dir}/bundle"), sh(f"{remote_dir}/bundle.new")
        r = t.run(f"rm -rf {bundle_dir} && mv {new} {bundle_dir}")
        if not r.ok:
            raise RemoteError(f"{t.name}: installing the bundle failed: {r.stderr}")
    venv = f"{remote_dir}/venv"
    source, index_args = wheelhouse_on_host(t, settings, remote_dir, console)
    marker = f"{meta['key']} {source}"
    installed = t.run(f"cat {sh(venv + '/.lab-wheel')} 2>/dev/null").stdout.strip()
    if installed != marker:
        console.print(f"{t.name}: installing the lab ({meta['wheel']}) into {venv} from {source} ...")
        r = t.run(
            f"python3 -m venv {sh(venv)} && {sh(venv + '/bin/pip')} install -q --upgrade --force-reinstall "
            f"--no-cache-dir {index_args} {sh(remote_dir + '/bundle/wheel/' + meta['wheel'])} && "
            f"printf '%s\\n' {shlex.quote(marker)} > {sh(venv + '/.lab-wheel')}",
            timeout=1800,
        )
        if not r.ok:
            raise RemoteError(f"{t.name}: installing the lab failed:\n{r.stderr[-2000:]}")
    return meta


def wheelhouse_on_host(t: SshShell, settings: Settings, remote_dir: str, console: Console) -> tuple[str, str]:
    """Push the dependency wheelhouse when the host's python3 fits it. Returns (where the lab's dependencies
    come from, pip's index arguments): the wheelhouse with no index, or the host's own package index."""
    there = t.run("python3 -c 'import sys, platform; print(sys.implementation.cache_tag, platform.machine())'")
    if there.stdout.strip() != python_tag():
        console.print(
            f"{t.name}: python3 there is {there.stdout.strip() or 'missing'}, here {python_tag()}: "
            "its pip resolves the dependencies from its own package index"
        )
        return "the host's package index", ""
    key, local = make_wheelhouse(settings.cache_dir)
    dest = f"{remote_dir}/wheelhouse/{key}"
    if not t.run(f"test -f {sh(dest + '/requirements.txt')}").ok:
        console.print(f"{t.name}: pushing the dependency wheelhouse {key} ...")
        t.run(f"rm -rf {sh(dest + '.new')}")
        t.put_tree(local, f"{dest}.new")
        t.run(f"rm -rf {sh(dest)} && mv {sh(dest + '.new')} {sh(dest)}")
    return f"wheelhouse {key}", f"--no-index --find-links {sh(dest)} -r {sh(dest + '/requirements.txt')}"


def lab_command(t: SshShell, remote_dir: str, meta: dict[str, str], args: list[str], report: str) -> str:
    env = {
        "LAB_CACHE_DIR": f"{remote_dir}/cache",
        "LAB_ENGINE__PREBUILT": f"{remote_dir}/bundle/engine",
        "LAB_HOST_NAME": t.name,
        "LAB_PARAMS_FILE": f"{remote_dir}/params.yaml",
        "LAB_RUN_ID_FILE": f"{remote_dir}/runs/{report}",
    }
    if meta.get("model"):
        env["LAB_MODEL"] = f"{remote_dir}/bundle/models/{meta['model']}"
    if meta.get("mmproj"):
        env["LAB_MMPROJ"] = f"{remote_dir}/bundle/models/{meta['mmproj']}"
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    lab, runs = sh(f"{remote_dir}/venv/bin/lab"), sh(f"{remote_dir}/runs")
    return f"cd {sh(remote_dir)} && {exports} {lab} {shlex.join(args)} --runs-dir {runs}"


def absolute_dir(t: SshShell, remote_dir: str) -> str:
    """Create remote_dir and return its absolute path (SFTP does not expand ~)."""
    r = t.run(f"mkdir -p {sh(remote_dir)} && cd {sh(remote_dir)} && pwd")
    if not r.ok:
        raise RemoteError(f"{t.name}: cannot create {remote_dir}: {r.stderr.strip()}")
    return r.stdout.strip()


@dataclass
class Deployment:
    """How `lab` runs on the host: from the pushed bundle, or in the pushed container image."""

    meta: dict[str, str]  # bundle.json (empty for the image)
    image: ImageRef | None = None
    docker_host: str | None = None
    container: str = ""
    model: HostModel | None = None  # a host file the image mounts (the bundle opens it where it is)

    @property
    def kind(self) -> str:
        return "bundle" if self.image is None else "docker"

    def command(self, t: SshShell, remote_dir: str, args: list[str], room: CleanRoom | None, report: str) -> str:
        """`lab <args>` on the host, from the bundle or in the image; in a clean room held by the host's shell
        around the whole command when asked (the same for both: the container cannot reach the host's services).
        The lab writes the id of the run it opens to `report` (a name in the host's runs folder)."""
        if self.image is None:
            cmd = lab_command(t, remote_dir, self.meta, args, report)
        else:
            env = {"LAB_RUN_ID_FILE": f"/work/catalog/runs/{report}"}
            cmd = lab_in_container(t, remote_dir, self.image, args, self.container, self.docker_host, self.model, env)
        return cmd if room is None else wrap(cmd, room)

    def record(self, t: SshShell, remote_dir: str, local: Path, room: CleanRoom | None, output: str) -> None:
        """What the host ran, into the local run folder: the bundle's git state or the image, and the clean room.
        A resumed run keeps its first session's record; a later session's clean room is added to
        `clean_room_resumed`."""
        if self.image is None:
            if not (local / "git" / "bundle").exists():
                t.get_tree(f"{remote_dir}/bundle/lab-git", local / "git" / "bundle")
        elif not (local / "git" / "image.json").exists():
            (local / "git" / "image.json").write_text(json.dumps(self.image.provenance(), indent=2) + "\n")
            # the image carries its revision but no diff: the checkout it was pushed from, dirty or not
            snapshot_git(LocalShell(), REPO_ROOT, local / "git" / "pushed-from")
        if room is not None:
            where = f"on the host, around the {'container' if self.image is not None else 'lab'}"
            run = RunFolder.open(local)
            results, record = run.manifest().results, parse(output, room, where)
            if "clean_room" in results and run.manifest().resumed_utc:
                run.add_results(clean_room_resumed=[*results.get("clean_room_resumed", []), record])
            else:
                run.add_results(clean_room=record)

    def stop(self, t: SshShell) -> None:
        if self.image is not None:  # a bundle run's server dies with it (PR_SET_PDEATHSIG); a container may not
            stop_container(t, self.container, self.docker_host)


def deploy(
    t: SshShell,
    settings: Settings,
    remote_dir: str,
    console: Console,
    via: str = "auto",
    image: str = IMAGE,
    docker_host: str | None = None,
) -> Deployment:
    """Push the pinned build: the container image when asked (or, with `auto`, when this machine has the image
    and the host has Docker), otherwise the bundle."""
    if via not in ("auto", "bundle", "docker"):
        raise UsageError(f"--via must be auto, bundle or docker, got {via!r}")
    if via != "bundle":
        ref = local_image(image)
        has_docker = host_has_docker(t, docker_host)
        if via == "docker" and (ref is None or not has_docker):
            why = f"no local image {image} (docker compose build)" if ref is None else f"{t.name} has no Docker"
            raise RemoteError(f"--via docker: {why}")
        if ref is not None and has_docker:
            push_image(t, ref, docker_host, console)
            return Deployment({}, ref, docker_host, f"prefill-lab-{uuid.uuid4().hex[:12]}")
        console.print(
            f"{t.name}: pushing the bundle ({'no local image ' + image if ref is None else 'no Docker there'})"
        )
    return Deployment(push(t, settings, remote_dir, console))


@dataclass(frozen=True)
class RemoteRun:
    """What `run_remote` runs on a host: `lab <args>` (or the host's incomplete run `resume`), from `remote_dir`,
    deployed `via` the bundle or the container `image` (its Docker at `docker_host`), in a clean room `room` held
    by the host's shell, with `--model` a file here copied there once when `push`."""

    args: list[str]
    remote_dir: str
    resume: str | None = None
    via: str = "auto"
    image: str = IMAGE
    docker_host: str | None = None
    room: CleanRoom | None = None
    push: bool = False


def run_remote(t: SshShell, settings: Settings, run: RemoteRun, console: Console) -> RemoteResult:
    """Push, run `lab <args>` on the host, fetch the run folder (complete or not) into settings.runs_dir.
    A clean room is held by the host's shell around the whole command, from the bundle and the image alike
    (lab.measure.cleanroom.wrap); its record lands in the fetched run's results. `--model` names a file on the
    host, checked there first (lab.remote.modelcheck); with `push` (and always for pretrained:NAME and tiny:ARCH)
    a file here, copied there once (lab.remote.modelpush), what the push did landing in the run's results."""
    resume = run.resume
    if resume is not None:
        check_run_id(resume, "--resume")
    remote_dir = absolute_dir(t, run.remote_dir)
    args, host_model, pushed = host_model_args(t, settings, run, remote_dir, console)
    how = deploy(t, settings, remote_dir, console, run.via, run.image, run.docker_host)
    if host_model is not None and how.image is not None:  # mounted where the container's lab is told it is
        how.model = host_model
        args = with_model(args, host_model.mount)
    put_params(t, remote_dir, settings)
    report = f".lab-run-{uuid.uuid4().hex[:12]}"  # where the host's lab says which run it opened
    cmd = how.command(t, remote_dir, [*args, *(["--resume", resume] if resume else [])], run.room, report)
    console.print(f"{t.name}: lab {' '.join(args)}" + (f" --resume {resume}" if resume else "") + f" ({how.kind})")
    error, output, ctrl_c = run_there(t, cmd)
    if ctrl_c.interrupted:
        console.print(f"{t.name}: interrupted: stopping the run there, then fetching what it wrote")
    try:
        if error:  # a cut connection may also just end the command (exit -1): make sure nothing is left running
            how.stop(t)
        run_id = resume or reported_run(t, remote_dir, report)
        if run_id is None:
            return RemoteResult(t.name, None, "failed", error or "no run folder was created", ctrl_c.interrupted)
        local = fetch(t, f"{remote_dir}/runs/{run_id}", settings.runs_dir, run_id, resumed=resume is not None)
        how.record(t, remote_dir, local, run.room, output)
    except Exception as e:
        if not error or isinstance(e, LabError) or not isinstance(e, network_errors()):
            raise
        raise RemoteError(
            f"{error.splitlines()[0]}; reconnecting failed ({type(e).__name__}: {e}): what the run wrote stays there"
        ) from e
    return fetched_result(t, local, pushed, error, ctrl_c.interrupted)


def host_model_args(
    t: SshShell, settings: Settings, run: RemoteRun, remote_dir: str, console: Console
) -> tuple[list[str], HostModel | None, Pushed | None]:
    """The command's args with the model the host measures (its `--model` pushed first when asked), that model as
    checked there (None: no `--model`), and what the push did (None: no push)."""
    args, resume = run.args, run.resume
    model = model_arg(args) or (resumed_model(t, remote_dir, resume) if resume else None)
    pushed = None
    if model and (run.push or model.startswith(NAMED)) and resume is None:
        here = local_model(model, settings)  # checked here before anything is pushed
        pushed = push_model(t, here, remote_dir, settings.cache_dir, console)
        console.print(f"{t.name}: {pushed.describe(here.name)}")
        model = pushed.model.path
        args = with_model(args, model)
    host_model = pushed.model if pushed else None  # checked there as it landed
    if host_model is None and model:
        host_model = check_host_model(t, model, remote_dir)  # before anything is pushed
    if host_model is not None:
        console.print(f"{t.name}: --model {host_model.path} ({host_model.arch}, sha256 {host_model.sha256[:12]})")
    return args, host_model, pushed


def params_to_push(settings: Settings) -> Path:
    """The params file these settings read (LAB_PARAMS_FILE, else ./params.yaml), which the host's lab reads as
    its own. None read here is refused in one line, before anything is pushed: the host would measure the
    defaults without a word."""
    read = settings.params_read
    if read is None or read.sha256 is None:
        where = f" (no {read.path.name} in {read.path.parent})" if read is not None else ""
        raise RemoteError(
            f"no params file here to push{where}: run fab from the lab's checkout, or name the file with "
            "LAB_PARAMS_FILE (an empty one for the defaults)"
        )
    return read.path


def put_params(t: SshShell, remote_dir: str, settings: Settings) -> None:
    """The params file in force here, on the host as remote_dir/params.yaml."""
    t.put(params_to_push(settings), f"{remote_dir}/params.yaml")


def fetched_result(t: SshShell, local: Path, pushed: Pushed | None, error: str, interrupted: bool) -> RemoteResult:
    """The fetched run's result, what a model push did recorded in it; a run the host's process left `running`
    (it died without a word, e.g. SIGKILL) failed."""
    if pushed is not None:
        RunFolder.open(local).add_results(model_push=pushed.record())
    m = RunFolder.open(local).manifest()
    if m.status == "running":
        RunFolder.open(local).fail(f"remote run ended without finishing ({error or 'unknown cause'})")
        m = RunFolder.open(local).manifest()
    return RemoteResult(t.name, local, m.status, error or m.reason, interrupted)


def run_there(t: SshShell, cmd: str) -> tuple[str, str, CtrlC]:
    """Run the host's command with a pty: (what went wrong, or "", what it printed, the Ctrl-C it saw)."""
    error, output, ctrl_c = "", "", CtrlC(t)
    try:
        with ctrl_c:
            r = t.run(cmd, pty=True)
        output = r.stdout + r.stderr
        if not r.ok:
            error = f"exit {r.exited}: {output.strip()[-1500:]}"
    except KeyboardInterrupt:  # outside invoke's wait, so no ^C reached the host: hang up instead
        ctrl_c.interrupted = True
        t.hang_up()
    except ConnectionLost as e:
        error = str(e)
    except Exception as e:  # a dropped connection: fetch what is there on a fresh connection
        error = f"connection lost: {type(e).__name__}: {e}"
    return ("interrupted (Ctrl-C)" if ctrl_c.interrupted else error), output, ctrl_c


def reported_run(t: SshShell, remote_dir: str, report: str) -> str | None:
    """The run the host's lab said it opened for this command (None: it opened none), checked as a run id."""
    path = sh(f"{remote_dir}/runs/{report}")
    said = t.run(f"cat {path} 2>/dev/null; rm -f {path}").stdout.strip()
    return check_run_id(said, f"{t.name}: the run its lab reported") if said else None


def resumed_model(t: SshShell, remote_dir: str, run_id: str) -> str | None:
    """The host file an incomplete run on the host measured through a container's mount (a resumed run keeps
    its own params, and its container needs the mount again); None for any other run."""
    manifest = f"{remote_dir}/runs/{check_run_id(run_id, '--resume')}/manifest.json"
    r = t.run(f"cat {sh(manifest)}")
    try:
        model = (json.loads(r.stdout).get("model") or {}) if r.ok else {}
    except ValueError:
        return None
    return str(model["path"]) if model.get("seen_as") and model.get("path") else None


def snapshot(t: SshShell, dest: Path, remote_checkout: str | None) -> dict[str, str]:
    """uname, lscpu, free, df ... of the host, and the git state of a lab checkout there (if any)."""
    t.run("true")  # connect (and verify the host key) before anything is written
    summary = snapshot_host(t, dest / "host")
    if remote_checkout:
        snapshot_git(t, remote_checkout, dest / "git")
    return summary
