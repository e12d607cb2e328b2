"""`fab -H nuc16 ...` against a real target host: an OpenSSH server in its own network namespace (reached over
a veth pair, no route beyond it) with its own host key and home, and an ssh config alias `nuc16`. The engine
bundle is pushed into its own directory, a sweep is measured there, fetched into catalog/runs/ and dvc-added;
unknown and changed host keys are refused; a connection cut mid-run leaves an incomplete local copy and no
server running there, and the rerun resumes; `fab profile` runs in a clean room; and `-H nuc16,nuc16b` (a
second sshd, on loopback) runs in parallel."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from labcli import lab

from lab.core.hashing import file_sha256
from lab.core.runs import RunFolder
from lab.core.schemas.raw import SWEEP_POINTS, SWEEP_SAMPLES

from sshd import Sshd, alias, cut_mid_sweep, fab, fab_cmd, fab_env, start_sshd

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def host_b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A second target host (its own sshd, host key and home) for the parallel tests."""
    server = start_sshd(tmp_path_factory.mktemp("nuc16b"))
    yield server
    server.stop()


def ssh_config(server: Sshd, path: Path, known_hosts: Path) -> Path:
    path.write_text(alias("nuc16", server, known_hosts))
    return path


def remote_dir(host: Sshd) -> Path:
    return host.home / "prefill-lab"  # the tasks' default ~/prefill-lab there


def test_unknown_and_changed_host_keys_are_refused(host: Sshd, project: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    r = fab(project, ssh_config(host, tmp_path / "c1", empty), "snapshot", "--out", str(tmp_path / "s1"))
    assert r.returncode == 1 and "unknown host key" in r.stderr, r.stderr
    wrong = host.write_wrong_known_hosts(tmp_path / "wrong")
    r = fab(project, ssh_config(host, tmp_path / "c2", wrong), "snapshot", "--out", str(tmp_path / "s2"))
    assert r.returncode == 1 and "CHANGED" in r.stderr, r.stderr
    assert not (tmp_path / "s1").exists() and not (tmp_path / "s2").exists()
    r = fab(project, ssh_config(host, tmp_path / "c3", host.known_hosts), "snapshot", "--out", str(tmp_path / "s3"))
    assert r.returncode == 0, r.stderr
    assert "Linux" in (tmp_path / "s3" / "host" / "uname.txt").read_text()
    assert (tmp_path / "s3" / "host" / "lscpu.txt").read_text().strip()


def test_measure_pushes_runs_fetches_and_dvc_adds(host: Sshd, project: Path, tmp_path: Path) -> None:
    config = ssh_config(host, tmp_path / "config", host.known_hosts)
    rdir = remote_dir(host)
    r = fab(project, config, "measure", "--ls", "256", "--news", "16", "--reps", "1", "--remote-dir", str(rdir))
    assert r.returncode == 0, r.stdout + r.stderr
    local = project / r.stdout.strip().splitlines()[-1]  # the last line: the run folder (absolute stays absolute)
    run = RunFolder.open(local)
    m = run.manifest()
    assert run.ready and m.host == "nuc16" and "_nuc16_sweep_" in m.run_id
    assert (local / "host" / "lscpu.txt").exists() and (local / "git" / "bundle" / "commit.txt").exists()
    assert (rdir / "bundle" / "bundle.json").exists() and (rdir / "venv" / "bin" / "lab").exists()
    # nuc16 has no route anywhere: the lab's dependencies came from the pushed wheelhouse, pinned as here
    assert "from wheelhouse" in r.stdout, r.stdout
    assert len(list((rdir / "wheelhouse").glob("*/requirements.txt"))) == 1
    assert local.with_name(local.name + ".dvc").exists()  # dvc add
    assert str(rdir / "bundle" / "engine") in m.engine["server"]  # the pushed build measured there
    # a second push of the same build is a no-op
    r = fab(project, config, "push", "--remote-dir", str(rdir))
    assert r.returncode == 0 and "already there" in r.stdout, r.stdout + r.stderr


def test_measure_a_model_that_is_only_on_the_host(host: Sshd, project: Path, tiny_model: Path, tmp_path: Path) -> None:
    """`--model` names a file on the host: checked there before anything is pushed (one line when it is missing or
    not a GGUF), measured there from the bundle, the run recording the host's path and the file's sha256."""
    config = ssh_config(host, tmp_path / "config", host.known_hosts)
    rdir = host.home / "fresh lab"  # nothing pushed there yet
    models = host.home / "srv models"
    models.mkdir(exist_ok=True)
    (models / "notes.gguf").write_text("not a model\n" * 8)
    measure = ("measure", "--via", "bundle", "--ls", "256", "--news", "16", "--reps", "1", "--remote-dir", str(rdir))
    for name, said in (("nope.gguf", "no such file"), ("notes.gguf", "not a GGUF file")):
        r = fab(project, config, *measure, "--model", str(models / name))
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.strip() == f"nuc16: --model {models / name}: {said}", r.stderr
        assert not (rdir / "bundle").exists() and not (rdir / "runs").exists()  # nothing pushed or started
    shutil.copyfile(tiny_model, models / "holo3.gguf")  # the host's own copy, under its own name
    r = fab(project, config, *measure, "--model", str(models / "holo3.gguf"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"--model {models / 'holo3.gguf'} (qwen35moe, sha256 {file_sha256(tiny_model)[:12]})" in r.stdout
    m = RunFolder.open(project / r.stdout.strip().splitlines()[-1]).manifest()
    assert m.model == {
        "path": str(models / "holo3.gguf"),
        "sha256": file_sha256(tiny_model),
        "size": tiny_model.stat().st_size,
    }
    assert m.params["model"] == str(models / "holo3.gguf")
    # another host's name for the same file: `lab compare` calls them one model, by its sha256
    shutil.copyfile(tiny_model, models / "renamed.gguf")
    r2 = fab(project, config, *measure, "--model", str(models / "renamed.gguf"))
    assert r2.returncode == 0, r2.stdout + r2.stderr
    a, b = (project / x.stdout.strip().splitlines()[-1] for x in (r, r2))
    compared = lab("compare", str(a), str(b), "--json", cwd=project)
    assert compared.returncode == 0, compared.stderr
    assert json.loads(compared.stdout)["same_model"] is True
    shown = lab("compare", str(a), str(b), cwd=project)
    assert f"the same model, sha256 {file_sha256(tiny_model)[:12]}" in " ".join(shown.stdout.split())


def test_arms_run_there_with_the_bundled_driver(host: Sshd, project: Path, tmp_path: Path) -> None:
    config = ssh_config(host, tmp_path / "config", host.known_hosts)
    rdir = remote_dir(host)
    r = fab(project, config, "arms", "--ls", "300", "--news", "16", "--reps", "2", "--arms", "fake,genuine",
            "--remote-dir", str(rdir))  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    local = project / r.stdout.strip().splitlines()[-1]
    run = RunFolder.open(local)
    assert run.ready and "_nuc16_sweep_" in run.manifest().run_id  # `lab arms`: the sweep in one process
    # compiled here, run there: the host needs no compiler
    assert str(rdir / "bundle" / "engine") in (local / "raw" / "inproc_driver.json").read_text()
    samples = run.read(SWEEP_SAMPLES)
    assert len(samples) == 2 * 2 and {s.where for s in samples} == {"inproc"}


def _servers_under(path: Path) -> list[int]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes()
            state = (cmdline.parent / "stat").read_text().split()[2]
        except OSError:
            continue
        if b"llama-server" in text and str(path).encode() in text and state != "Z":
            pids.append(int(cmdline.parent.name))
    return pids


def test_connection_cut_mid_run_leaves_incomplete_and_resumes(host: Sshd, project: Path, tmp_path: Path) -> None:
    config = ssh_config(host, tmp_path / "config", host.known_hosts)
    rdir = remote_dir(host)
    before = set((rdir / "runs").glob("*"))
    proc = subprocess.Popen(
        fab_cmd(config, "nuc16", "measure", "--ls", "256,512,768,1024", "--news", "16", "--reps", "2",
                "--remote-dir", str(rdir)), cwd=project, env=fab_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    run_dir, out, err = cut_mid_sweep(host, proc, rdir / "runs", before)
    local = project / "catalog" / "runs" / run_dir.name
    m = RunFolder.open(local).manifest()
    assert m.status == "incomplete", (m.status, m.reason, out, err)
    assert (local / "raw" / "rounds.jsonl").read_text()  # what was measured came back
    time.sleep(1)
    assert _servers_under(rdir) == []  # the remote llama-server went down with the run

    r = fab(project, config, "measure", "--resume", run_dir.name, "--remote-dir", str(rdir))
    assert r.returncode == 0, r.stdout + r.stderr
    run = RunFolder.open(local)
    assert run.ready and len(run.manifest().resumed_utc) == 1
    assert len(run.read(SWEEP_POINTS)) == 4


def test_profile_runs_in_a_clean_room_on_the_host(host: Sshd, project: Path, tmp_path: Path) -> None:
    config = ssh_config(host, tmp_path / "config", host.known_hosts)
    marks = host.home / "service"
    r = fab(project, config, "profile", "--chunk", "128", "--depths", "0,256", "--processes", "2", "--reps", "1",
            "--clean-room-stop", f"mkdir -p {marks} && touch {marks}/stopped",
            "--clean-room-start", f"touch {marks}/started")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    local = project / r.stdout.strip().splitlines()[-1]
    run = RunFolder.open(local)
    assert run.ready and "_nuc16_profile_" in run.manifest().run_id
    assert (local / "raw" / "profile_nodes.parquet").stat().st_size > 0
    assert local.with_name(local.name + ".dvc").exists()
    # the bundled instrument ran there (no compiler needed), and the host's service was stopped and restarted
    assert str(remote_dir(host) / "bundle" / "engine") in (local / "raw" / "instrument.json").read_text()
    assert (marks / "stopped").exists() and (marks / "started").exists()
    # one clean room for the bundle and the image: the host's shell holds it; its record is a result
    m = run.manifest()
    cr = m.results["clean_room"]
    assert (cr["stop_rc"], cr["start_rc"], cr["where"]) == (0, 0, "on the host, around the lab"), cr
    assert "clean_room" not in m.params


def test_measure_screenshots_with_the_bundled_projector_and_the_params_file_in_force(
    host: Sshd, project: Path, tmp_path: Path
) -> None:
    """Image steps over the bundle path (the bundle carries the tiny projector), with the params file named by
    LAB_PARAMS_FILE (not ./params.yaml) pushed to the host."""
    params = tmp_path / "my-params.yaml"
    params.write_text("# pushed from LAB_PARAMS_FILE\nsweep:\n  bench_reps: 1\n")
    config = ssh_config(host, tmp_path / "config", host.known_hosts)
    rdir = remote_dir(host)
    r = fab(project, config, "measure", "--ls", "256", "--news", "16", "--reps", "1", "--images", "320x200",
            "--via", "bundle", "--remote-dir", str(rdir), env={"LAB_PARAMS_FILE": str(params)})  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    run = RunFolder.open(project / r.stdout.strip().splitlines()[-1])
    assert (rdir / "params.yaml").read_text() == params.read_text()
    m = run.manifest()
    assert m.params["sweep"]["bench_reps"] == 1 and m.params["sweep"]["images"] == ["320x200"]
    (point,) = run.read(SWEEP_POINTS)
    assert point.image == "320x200" and point.fake.n_ok == 1 and point.encode_ms is not None, point
    assert m.params["mmproj"] and "bundle/models/tiny-mmproj" in m.params["mmproj"]


def test_hosts_run_in_parallel_keyed_by_host(host: Sshd, host_b: Sshd, project: Path, tmp_path: Path) -> None:
    """`fab -H nuc16,nuc16b measure`: both hosts at once (nuc16b gets its bundle while nuc16 is measuring), one
    run folder per host, each fetched and dvc-added, and a summary keyed by host."""
    config = tmp_path / "config"
    config.write_text(alias("nuc16", host, host.known_hosts) + alias("nuc16b", host_b, host_b.known_hosts))
    runs = project / "catalog" / "runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    r = fab(project, config, "measure", "--ls", "256,512", "--news", "16", "--reps", "2", hosts="nuc16,nuc16b")
    assert r.returncode == 0, r.stdout + r.stderr
    new = sorted(p for p in set(runs.iterdir()) - before if p.is_dir())
    assert sorted(p.name.split("_")[1] for p in new) == ["nuc16", "nuc16b"], new
    for p in new:
        run = RunFolder.open(p)
        assert run.ready and len(run.read(SWEEP_POINTS)) == 2
        assert p.with_name(p.name + ".dvc").exists()
        assert f"  {run.manifest().host:<6}  ok      {p.relative_to(project)}" in r.stdout, r.stdout
    # parallel, not one after the other: nuc16b's bundle landed before nuc16's sweep finished
    run_a = next(p for p in new if "_nuc16_" in p.name)
    ready_a = (remote_dir(host) / "runs" / run_a.name / ".ready").stat().st_ctime
    bundle_b = (remote_dir(host_b) / "bundle" / "bundle.json").stat().st_ctime
    assert bundle_b < ready_a, (bundle_b, ready_a)


def test_a_failing_host_does_not_stop_the_others(host: Sshd, host_b: Sshd, project: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    config = tmp_path / "config"
    config.write_text(alias("stranger", host_b, empty) + alias("nuc16", host, host.known_hosts))
    out = tmp_path / "snap"
    r = fab(project, config, "snapshot", "--out", str(out), hosts="stranger,nuc16")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "stranger" in r.stderr and "failed on 1 host(s): stranger" in r.stderr, r.stderr
    assert "unknown host key" in r.stdout, r.stdout  # the per-host summary says why
    assert "Linux" in (out / "host" / "uname.txt").read_text()  # nuc16 went on


def test_a_pretrained_model_is_pushed_once_resumably_and_measured_there(
    host: Sshd, project: Path, tmp_path: Path
) -> None:
    """`--model pretrained:NAME --push-model`: fetched here, copied to the host once (its sha256 checked there),
    measured there; a second run pushes nothing, and a cut copy is resumed where it stopped."""
    from lab.models.pretrained import _spec

    config = ssh_config(host, tmp_path / "config", host.known_hosts)
    rdir = host.home / "push lab"
    spec = _spec("gemma3-270m-q4_k_m")
    measure = (
        "measure",
        "--via",
        "bundle",
        "--model",
        "pretrained:gemma3-270m-q4_k_m",
        "--push-model",
        "--ls",
        "256",
        "--news",
        "16",
        "--reps",
        "1",
        "--remote-dir",
        str(rdir),
    )

    def run() -> tuple[str, dict[str, Any], dict[str, Any]]:
        r = fab(project, config, *measure)
        assert r.returncode == 0, r.stdout + r.stderr
        m = RunFolder.open(project / r.stdout.strip().splitlines()[-1]).manifest()
        assert m.model["sha256"] == spec.sha256 and m.model["path"].startswith(str(rdir / "models"))
        return r.stdout, m.model, m.results["model_push"]

    out, model, push = run()
    copy = Path(model["path"])
    assert f"pushed {spec.file}:" in out and push["sent_bytes"] == copy.stat().st_size and push["resumed_at"] == 0
    out, _, push = run()  # the host has it: nothing pushed, the time it took to say so measured
    assert "already there" in out and "nothing pushed" in out and push["sent_bytes"] == 0, out
    assert push["seconds"] < 60
    half = copy.stat().st_size // 2
    with copy.open("r+b") as f:  # a transfer cut half way
        f.truncate(half)
    out, model, push = run()
    assert push["resumed_at"] == half and push["sent_bytes"] == copy.stat().st_size - half, push
    assert f"resumed at {half / (1 << 20):.1f} MiB" in out
