"""The DVC side, for real: a lab project with run folders pushed from one clone and pulled into a second
(local-directory remote and an SSH remote on a real sshd), `dvc repro` in both gives identical catalog
tables and reports; a second repro is a no-op; a report param reruns only the report stage; an SSH remote
with an unknown host key is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.core.runs import RunFolder
from lab.dvc_hostkeys import install_pth

from sshd import Sshd, start_sshd

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def sh(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, ok: bool = True) -> str:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env or project_env(), timeout=600)
    if ok:
        assert r.returncode == 0, f"{' '.join(cmd)} failed in {cwd}:\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


def project_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "COLUMNS": "200", **extra}  # fmt: skip


def dvc(*args: str, cwd: Path, env: dict[str, str] | None = None, ok: bool = True) -> str:
    return sh([sys.executable, "-m", "dvc", *args], cwd, env, ok)


def make_project(dst: Path) -> Path:
    """A fresh lab project: this repo's pipeline, params, DVC config and code, in a new git repository."""
    dst.mkdir()
    for name in ("dvc.yaml", "params.yaml", ".dvcignore", ".gitignore"):
        shutil.copyfile(REPO / name, dst / name)
    shutil.copytree(REPO / "lab", dst / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    (dst / ".dvc").mkdir()
    for name in ("config", ".gitignore"):
        shutil.copyfile(REPO / ".dvc" / name, dst / ".dvc" / name)
    (dst / "catalog" / "runs").mkdir(parents=True)
    for name in ("catalog/.gitignore", "catalog/runs/.gitignore", "catalog/runs/.gitkeep"):
        shutil.copyfile(REPO / name, dst / name)
    sh(["git", "init", "-q", "-b", "main"], dst)
    sh(["git", "add", "-A"], dst)
    sh(["git", "commit", "-qm", "lab project"], dst)
    return dst


def lab(*args: str, cwd: Path) -> str:
    return sh([str(BIN / "lab"), *args], cwd)


def tree_bytes(root: Path, *dirs: str) -> dict[str, bytes]:
    out = {}
    for d in dirs:
        for p in sorted((root / d).rglob("*")):
            if p.is_file():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """Clone A with four runs: a small sweep, two rebuild labs, and one interrupted run."""
    install_pth()
    a = make_project(tmp_path_factory.mktemp("colleague") / "a")
    lab("sweep", "--Ls", "256,512", "--news", "16", "--reps", "1", cwd=a)
    lab("rebuild", "exact", cwd=a)
    lab("rebuild", "cost", cwd=a)
    broken = RunFolder.create(a / "catalog" / "runs", "sweep", "vm", {})
    broken.update(status="incomplete", reason="interrupted by SIGTERM")
    lab("catalog", "track", cwd=a)
    sh(["git", "add", "catalog/runs"], a)
    sh(["git", "commit", "-qm", "runs"], a)
    return a


def clone(origin: Path, name: str) -> Path:
    b = origin.parent / name
    sh(["git", "clone", "-q", str(origin), str(b)], origin.parent)
    return b


def test_pull_a_colleagues_run_local_remote(origin: Path) -> None:
    remote = origin.parent / "remote"
    dvc("remote", "modify", "--local", "local", "url", str(remote), cwd=origin)
    dvc("push", cwd=origin)
    b = clone(origin, "b-local")
    dvc("remote", "modify", "--local", "local", "url", str(remote), cwd=b)
    assert not any(p.is_dir() for p in (b / "catalog" / "runs").iterdir())  # only .dvc files came with git
    dvc("pull", "-R", "catalog/runs", cwd=b)
    assert tree_bytes(origin, "catalog/runs") == tree_bytes(b, "catalog/runs")

    dvc("repro", cwd=origin)
    out = dvc("repro", cwd=b)
    assert "Running stage 'ingest'" in out and "Running stage 'report'" in out
    same = tree_bytes(origin, "catalog/tables", "reports")
    assert same == tree_bytes(b, "catalog/tables", "reports")  # identical tables and charts
    assert (origin / "catalog" / "metrics.json").read_bytes() == (b / "catalog" / "metrics.json").read_bytes()
    assert any(k.endswith("index.html") for k in same) and any(k.endswith(".png") for k in same)

    ls = lab("catalog", "ls", cwd=b)
    assert "incomplete" in ls
    metrics = dvc("metrics", "show", cwd=b)
    assert "median_abs_fake_vs_estimate" in metrics and "span_cases" not in metrics  # no span run here

    out = dvc("repro", cwd=b)
    assert "Running stage" not in out, out  # a no-op: nothing ran (how long it took is this machine's business)

    params = (b / "params.yaml").read_text().replace("width: 520", "width: 600")
    (b / "params.yaml").write_text(params)
    out = dvc("repro", cwd=b)
    assert "Running stage 'report'" in out and "Running stage 'ingest'" not in out, out


def test_pull_a_colleagues_run_ssh_remote_with_host_key_check(origin: Path, tmp_path: Path) -> None:
    server: Sshd = start_sshd(tmp_path)
    try:
        url = f"ssh://{server.user}@{server.address}:{server.port}{tmp_path / 'ssh-remote'}"
        env = project_env(LAB_SSH_KNOWN_HOSTS=str(server.known_hosts))
        for repo in (origin,):
            dvc("remote", "add", "--local", "-f", "ssh", url, cwd=repo)
            dvc("remote", "modify", "--local", "ssh", "keyfile", str(server.client_key), cwd=repo)
        dvc("push", "-r", "ssh", cwd=origin, env=env)
        b = clone(origin, "b-ssh")
        dvc("remote", "add", "--local", "-f", "ssh", url, cwd=b)
        dvc("remote", "modify", "--local", "ssh", "keyfile", str(server.client_key), cwd=b)

        wrong = server.write_wrong_known_hosts(tmp_path / "wrong_known_hosts")
        wrong_env = project_env(LAB_SSH_KNOWN_HOSTS=str(wrong))
        refused = dvc("pull", "-R", "catalog/runs", "-r", "ssh", cwd=b, env=wrong_env, ok=False)
        assert "not trusted" in refused, refused
        unknown = dvc("pull", "-r", "ssh", cwd=b, env=project_env(LAB_SSH_KNOWN_HOSTS=str(tmp_path / "none")), ok=False)
        assert "not trusted" in unknown, unknown
        assert not any(p.is_dir() for p in (b / "catalog" / "runs").iterdir())

        dvc("pull", "-R", "catalog/runs", "-r", "ssh", cwd=b, env=env)
        assert tree_bytes(origin, "catalog/runs") == tree_bytes(b, "catalog/runs")
        dvc("repro", cwd=origin)
        dvc("repro", cwd=b)
        assert tree_bytes(origin, "catalog/tables", "reports") == tree_bytes(b, "catalog/tables", "reports")
    finally:
        server.stop()


def test_run_folders_stay_out_of_git_until_tracked_and_then_only_their_dvc_files(tmp_path: Path) -> None:
    """`git add -A` between a run and `lab catalog track` used to commit the raw data into git."""
    install_pth()
    proj = make_project(tmp_path / "proj")
    lab("rebuild", "exact", cwd=proj)
    (run,) = [p for p in (proj / "catalog" / "runs").iterdir() if p.is_dir() and not p.name.startswith(".")]

    def untracked() -> list[str]:
        out = sh(["git", "status", "--porcelain", "--untracked-files=all", "catalog"], proj)
        return sorted(line[3:] for line in out.splitlines())

    assert untracked() == []  # the run folder exists, git does not see it
    lab("catalog", "track", cwd=proj)
    assert untracked() == [f"catalog/runs/{run.name}.dvc"], untracked()  # DVC sees it ignored already
    sh(["git", "add", "-A"], proj)
    staged = sh(["git", "diff", "--cached", "--name-only"], proj).split()
    assert not [f for f in staged if f.startswith(f"catalog/runs/{run.name}/")], staged
