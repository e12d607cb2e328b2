"""One target host: push the bundle, snapshot it, run a lab experiment there and fetch the run folder.

Layout on the host (remote_dir, default ~/prefill-lab): bundle/ (the pushed bundle), venv/ (the lab from
the bundle's wheel), cache/, runs/. The experiment runs with a pty, so a dropped connection hangs it up:
the run's guard turns SIGHUP into `status: incomplete`, its llama-server dies with it (PR_SET_PDEATHSIG),
the clean room restarts the host's service, and what was written is fetched on the next connection.
"""

from __future__ import annotations

import json
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from lab.engine.build import build_engine
from lab.engine.models import resolve_model
from lab.instrument import build_instrument
from lab.remote.bundle import make_bundle
from lab.remote.connect import SshTarget
from lab.runs import RunFolder
from lab.settings import Settings
from lab.snapshot import snapshot_host


@dataclass
class RemoteResult:
    host: str
    run: Path | None  # the local copy under runs_dir
    status: str
    message: str = ""


def push(t: SshTarget, settings: Settings, remote_dir: str, console: Console) -> dict[str, str]:
    """Make (cached) and push the bundle if the host lacks this exact one; install the lab in a venv."""
    engine = build_engine(settings.engine, settings.cache_dir, flavor="release", quiet=True)
    instrument = build_instrument(engine, settings.cache_dir).binary  # so `fab profile` needs no compiler there
    model = resolve_model(settings) if settings.model is None else None  # the tiny default travels along
    bundle = make_bundle(engine, settings.cache_dir, model, instrument)
    meta: dict[str, str] = json.loads((bundle / "bundle.json").read_text())
    have = t.run(f"cat {remote_dir}/bundle/bundle.json 2>/dev/null")
    if have.ok and json.loads(have.stdout or "{}").get("key") == meta["key"]:
        console.print(f"{t.name}: bundle {meta['key']} already there")
    else:
        console.print(f"{t.name}: pushing bundle {meta['key']} ...")
        t.run(f"rm -rf {remote_dir}/bundle.new")
        t.put_tree(bundle, f"{remote_dir}/bundle.new")
        r = t.run(f"rm -rf {remote_dir}/bundle && mv {remote_dir}/bundle.new {remote_dir}/bundle")
        if not r.ok:
            raise RuntimeError(f"{t.name}: installing the bundle failed: {r.stderr}")
    venv = f"{remote_dir}/venv"
    installed = t.run(f"cat {venv}/.lab-wheel 2>/dev/null").stdout.strip()
    if installed != meta["key"]:
        console.print(f"{t.name}: installing the lab ({meta['wheel']}) into {venv} ...")
        r = t.run(
            f"python3 -m venv {venv} && {venv}/bin/pip install -q --upgrade --force-reinstall --no-cache-dir "
            f"{remote_dir}/bundle/wheel/{meta['wheel']} && echo {meta['key']} > {venv}/.lab-wheel",
            timeout=1800,
        )
        if not r.ok:
            raise RuntimeError(f"{t.name}: installing the lab failed:\n{r.stderr[-2000:]}")
    return meta


def lab_command(t: SshTarget, remote_dir: str, meta: dict[str, str], args: list[str]) -> str:
    env = {
        "LAB_CACHE_DIR": f"{remote_dir}/cache",
        "LAB_ENGINE__PREBUILT": f"{remote_dir}/bundle/engine",
        "LAB_HOST_NAME": t.name,
        "LAB_PARAMS_FILE": f"{remote_dir}/params.yaml",
    }
    if meta.get("model"):
        env["LAB_MODEL"] = f"{remote_dir}/bundle/models/{meta['model']}"
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return f"cd {remote_dir} && {exports} {remote_dir}/venv/bin/lab {shlex.join(args)} --runs-dir {remote_dir}/runs"


def list_runs(t: SshTarget, remote_dir: str) -> set[str]:
    r = t.run(f"ls -1 {remote_dir}/runs 2>/dev/null")
    return {x.strip() for x in r.stdout.splitlines() if x.strip()}


def absolute_dir(t: SshTarget, remote_dir: str) -> str:
    """Create remote_dir and return its absolute path (SFTP does not expand ~)."""
    r = t.run(f"mkdir -p {remote_dir} && cd {remote_dir} && pwd")
    if not r.ok:
        raise RuntimeError(f"{t.name}: cannot create {remote_dir}: {r.stderr.strip()}")
    return r.stdout.strip()


def run_remote(
    t: SshTarget, settings: Settings, remote_dir: str, args: list[str], console: Console, resume: str | None = None
) -> RemoteResult:
    """Push, run `lab <args>` on the host, fetch the run folder (complete or not) into settings.runs_dir."""
    remote_dir = absolute_dir(t, remote_dir)
    meta = push(t, settings, remote_dir, console)
    params = Path("params.yaml")
    if params.exists():
        t.put(params, f"{remote_dir}/params.yaml")
    else:
        t.run(f"touch {remote_dir}/params.yaml")
    before = list_runs(t, remote_dir)
    cmd = lab_command(t, remote_dir, meta, [*args, *(["--resume", resume] if resume else [])])
    console.print(f"{t.name}: lab {' '.join(args)}" + (f" --resume {resume}" if resume else ""))
    error = ""
    try:
        r = t.run(cmd, pty=True)
        if not r.ok:
            error = f"exit {r.exited}: {(r.stdout + r.stderr).strip()[-1500:]}"
    except Exception as e:  # a dropped connection: fetch what is there on a fresh connection
        error = f"connection lost: {type(e).__name__}: {e}"
    run_id = resume or next(iter(sorted(list_runs(t, remote_dir) - before)), None)
    if run_id is None:
        return RemoteResult(t.name, None, "failed", error or "no run folder was created")
    local = fetch(t, f"{remote_dir}/runs/{run_id}", settings.runs_dir / run_id)
    bundle_git = settings.runs_dir / run_id / "git" / "bundle"
    t.get_tree(f"{remote_dir}/bundle/lab-git", bundle_git)  # what the pushed lab was built from
    m = RunFolder.open(local).manifest()
    if m.status == "running":  # the remote process died without a word (e.g. SIGKILL)
        RunFolder.open(local).fail(f"remote run ended without finishing ({error or 'unknown cause'})")
        m = RunFolder.open(local).manifest()
    return RemoteResult(t.name, local, m.status, error or m.reason)


def fetch(t: SshTarget, remote: str, local: Path) -> Path:
    """Replace the local copy of a run folder with the host's (a resumed run only grows)."""
    tmp = local.with_name(f".{local.name}.fetch")
    shutil.rmtree(tmp, ignore_errors=True)
    t.get_tree(remote, tmp)
    if local.exists():
        shutil.rmtree(local)
    tmp.rename(local)
    return local


def snapshot(t: SshTarget, dest: Path, remote_checkout: str | None) -> dict[str, str]:
    """uname, lscpu, free, df ... of the host, and the git state of a lab checkout there (if any)."""
    t.run("true")  # connect (and verify the host key) before anything is written
    summary = snapshot_host(t, dest / "host")
    if remote_checkout:
        (dest / "git").mkdir(parents=True, exist_ok=True)
        for name, cmd in (("commit.txt", "rev-parse HEAD"), ("status.txt", "status --porcelain"),
                          ("git_diff.patch", "diff HEAD --no-color")):  # fmt: skip
            r = t.run(f"git -C {remote_checkout} {cmd}")
            (dest / "git" / name).write_text(r.stdout if r.ok else f"unavailable ({r.exited}): {r.stderr}")
    return summary
