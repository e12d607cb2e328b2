"""Hostile and broken target hosts: `fab -H nuc16 ...` against a real OpenSSH server in its own network namespace.

A host cannot delete or rewrite a local run: the run fetched is the one the host's lab reports for this command,
a local folder of that id that is not this run's earlier copy is refused, and a resume only adds (what only the
local copy has stays, a shorter answer changes nothing). Ctrl-C stops the host's run, fetches it and exits 130,
a second one hangs up a run that does not stop. A silent host ends `fab` after the keepalive's bound. Every
ProxyJump hop's host key is checked against known_hosts.

A hostile host here is the real one with its lab replaced by a script (`hostile_lab`), or its run folder edited
between two commands: what a host that runs something else than the pushed lab could answer."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.core.runs import Manifest, RunFolder

from sshd import Sshd, alias, fab, fab_cmd, fab_env, start_sshd

pytestmark = [pytest.mark.slow, pytest.mark.faults]

SWEEP = ("measure", "--via", "bundle", "--ls", "256", "--news", "16", "--reps", "1")
MEDIUM_SWEEP = ("measure", "--via", "bundle", "--ls", "256,512,768,1024", "--news", "16", "--reps", "3")
LONG_SWEEP = ("measure", "--via", "bundle", "--ls", "256,512,768,1024,1536,2048", "--news", "16", "--reps", "5")  # cut
PROFILE = (
    "profile",
    "--via",
    "bundle",
    "--chunk",
    "128",
    "--depths",
    "0,128,256,384",
    "--processes",
    "3",
    "--reps",
    "1",
    "--threadpool",
    "off",
)


@pytest.fixture(scope="module")
def jump(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A bastion on loopback: nuc16 reached through it (ProxyJump)."""
    server = start_sshd(tmp_path_factory.mktemp("jump"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def rdir(host: Sshd, project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lab directory on nuc16, the bundle pushed and the lab installed there."""
    where = host.home / "prefill-lab"
    r = fab(project, ssh_config(host, tmp_path_factory.mktemp("push") / "config"), "push", "--via", "bundle",
            "--remote-dir", str(where))  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return where


def ssh_config(host: Sshd, path: Path, extra: str = "") -> Path:
    path.write_text(alias("nuc16", host, host.known_hosts) + extra)
    return path


@contextlib.contextmanager
def hostile_lab(rdir: Path, script: str) -> Iterator[None]:
    """The host's `lab` replaced by `script` for the block (the real one beside it, as lab.real)."""
    lab = rdir / "venv" / "bin" / "lab"
    real = lab.with_name("lab.real")
    shutil.copy2(lab, real)
    lab.write_text(script)
    lab.chmod(0o755)
    try:
        yield
    finally:
        os.replace(real, lab)


def plant_local_run(project: Path, run_id: str) -> Path:
    """A finished local run of the id a host is about to answer with."""
    local = project / "catalog" / "runs" / run_id
    (local / "raw").mkdir(parents=True)
    m = Manifest(run_id=run_id, experiment="sweep", host="nuc16", started_utc="2000-01-01T00:00:00Z", status="complete")
    (local / "manifest.json").write_text(m.model_dump_json(indent=2))
    (local / "raw" / "mine.txt").write_text("measured here\n")
    (local / ".ready").write_text("2000-01-01T00:00:01Z\n")
    return local


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def runs_here(project: Path) -> set[str]:
    runs = project / "catalog" / "runs"
    return {p.name for p in runs.iterdir()} if runs.exists() else set()


def one_line(err: str) -> str:
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def processes_under(path: Path, name: bytes) -> list[int]:
    """Live processes whose command line holds `name` and `path` (the host's lab or its llama-server)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes()
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if name in text and str(path).encode() in text and state != "Z":
            pids.append(int(cmdline.parent.name))
    return pids


def gone(rdir: Path, timeout: float = 30) -> bool:
    """No lab and no llama-server of the host's lab directory left running (within `timeout`)."""
    deadline = time.monotonic() + timeout
    while processes_under(rdir, b"venv/bin/lab") or processes_under(rdir, b"llama-server"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def new_run_on_host(
    runs: Path, before: set[Path], proc: subprocess.Popen[str], rows: str, timeout: float = 300
) -> Path:
    """The host's new run folder, once its raw file `rows` has something."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        for p in set(runs.glob("*")) - before:
            table = p / "raw" / rows
            if table.exists() and table.stat().st_size:
                return p
        time.sleep(0.1)
    raise AssertionError("the remote run made no progress")


def start_fab(project: Path, config: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(fab_cmd(config, "nuc16", *args), cwd=project, env=fab_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


# --- a host cannot delete or rewrite a local run ---------------------------------------------------------------

# after the real lab: a folder named like a local run appears on the host (sorting before the real one), and with
# `report` the lab says it opened that run
PLANT = """#!/bin/sh
"$0.real" "$@"; rc=$?
mkdir -p {runs}/{victim} && cp {manifest} {runs}/{victim}/manifest.json && echo host > {runs}/{victim}/host.txt
{report}
exit $rc
"""


def plant_script(rdir: Path, victim: Path, report: bool) -> str:
    fake = rdir / f"{victim.name}.json"
    m = Manifest.model_validate_json((victim / "manifest.json").read_text())
    fake.write_text(m.model_copy(update={"reason": "the host's"}).model_dump_json())
    said = f'[ -z "$LAB_RUN_ID_FILE" ] || echo {victim.name} > "$LAB_RUN_ID_FILE"' if report else ""
    return PLANT.format(runs=rdir / "runs", victim=victim.name, manifest=fake, report=said)


def test_the_run_fetched_is_the_one_the_lab_opened_not_a_new_name(
    host: Sshd, project: Path, rdir: Path, tmp_path: Path
) -> None:
    victim = plant_local_run(project, "2000-01-01_nuc16_sweep_00000a")
    mine = tree(victim)
    with hostile_lab(rdir, plant_script(rdir, victim, report=False)):
        r = fab(project, ssh_config(host, tmp_path / "config"), *SWEEP, "--remote-dir", str(rdir))
    assert r.returncode == 0, r.stdout + r.stderr
    local = project / r.stdout.strip().splitlines()[-1]
    assert local.name != victim.name and "_nuc16_sweep_" in local.name and RunFolder.open(local).ready
    assert tree(victim) == mine  # the local run the host named is untouched
    assert (rdir / "runs" / victim.name / "host.txt").exists()


def test_a_reported_run_named_like_a_local_one_is_refused(
    host: Sshd, project: Path, rdir: Path, tmp_path: Path
) -> None:
    victim = plant_local_run(project, "2000-01-01_nuc16_sweep_00000b")
    mine, before = tree(victim), runs_here(project)
    with hostile_lab(rdir, plant_script(rdir, victim, report=True)):
        r = fab(project, ssh_config(host, tmp_path / "config"), *SWEEP, "--remote-dir", str(rdir))
    assert r.returncode == 1, r.stdout + r.stderr
    said = one_line(r.stderr)
    assert said.startswith(f"nuc16: {victim.name} already exists here and is not this run's") and "not fetched" in said
    assert tree(victim) == mine and runs_here(project) == before  # nothing changed here
    assert (rdir / "runs" / victim.name / "host.txt").exists()  # and the host keeps its copy


# the real lab, stopped (SIGTERM: the run ends incomplete) once its profile's cycle 1 has started
STOP_IN_PROCESS_1 = """#!/bin/sh
touch {mark}
"$0.real" "$@" &
pid=$!
while kill -0 $pid 2>/dev/null; do
  for f in $(find {runs} -newer {mark} -name profile.part.jsonl 2>/dev/null); do
    if grep -qs '"kind":"fused","process":1' "$f"; then kill -TERM $pid; wait $pid; exit $?; fi
  done
  sleep 0.1
done
wait $pid
"""
FAILS = "#!/bin/sh\nexit 1\n"  # a host whose lab answers a resume with the run folder as it is


def test_a_resume_only_adds_and_a_shorter_answer_changes_nothing(
    host: Sshd, project: Path, rdir: Path, tiny_model: Path, tmp_path: Path
) -> None:
    """An interrupted profile with the model pushed from here and a clean room: the push and the first session's
    clean-room record are added here after the fetch. A host answering the resume with fewer rows or a missing
    file changes nothing here; the real resume adds what it measured and keeps what only this copy has."""
    config = ssh_config(host, tmp_path / "config")
    marks = host.home / "service"
    room = ("--clean-room-stop", f"mkdir -p {marks} && touch {marks}/stopped",
            "--clean-room-start", f"touch {marks}/started")  # fmt: skip
    with hostile_lab(rdir, STOP_IN_PROCESS_1.format(mark=rdir / ".mark", runs=rdir / "runs")):
        r = fab(project, config, *PROFILE, "--model", str(tiny_model), "--push-model", *room, "--remote-dir", str(rdir))
    assert r.returncode == 1 and "rerun with --resume" in r.stderr, r.stdout + r.stderr
    run_id = r.stderr.split("--resume ")[1].split()[0]
    local, there = project / "catalog" / "runs" / run_id, rdir / "runs" / run_id
    first = RunFolder.open(local).manifest()
    assert first.status == "incomplete" and first.results["model_push"] and first.results["clean_room"], first
    assert (local / "git" / "bundle" / "commit.txt").exists()

    backup = tmp_path / "backup"
    shutil.copytree(there, backup)
    resume = ("profile", "--via", "bundle", "--resume", run_id, *room, "--remote-dir", str(rdir))
    dump = there / "raw" / "profile.jsonl"
    for damage, said in (
        (lambda: dump.write_text("".join(dump.read_text().splitlines(keepends=True)[:-1])), "profile.jsonl is shorter"),
        (lambda: (there / "host" / "lscpu.txt").unlink(), "host/lscpu.txt is missing there"),
    ):
        damage()
        mine = tree(local)
        with hostile_lab(rdir, FAILS):
            r = fab(project, config, *resume)
        assert r.returncode == 1, r.stdout + r.stderr
        line = one_line(r.stderr)
        assert "does not continue the local copy" in line and said in line and "nothing changed here" in line, line
        assert tree(local) == mine
        shutil.rmtree(there)
        shutil.copytree(backup, there)

    r = fab(project, config, *resume)
    assert r.returncode == 0, r.stdout + r.stderr
    run = RunFolder.open(local)
    m = run.manifest()
    assert run.ready and m.status == "complete" and len(m.resumed_utc) == 1
    assert m.results["model_push"] == first.results["model_push"]  # added here, kept
    assert m.results["clean_room"] == first.results["clean_room"]  # the first session's
    assert [x["start_rc"] for x in m.results["clean_room_resumed"]] == [0]  # the second's
    assert (local / "raw" / "profile_nodes.parquet").stat().st_size  # what the resume measured, added
    # the profile's dump, a working file its lab removes on completion (now in the Parquet), goes here too
    assert not (local / "raw" / "profile.jsonl").exists() and not (there / "raw" / "profile.jsonl").exists()
    assert (local / "git" / "bundle" / "commit.txt").exists()


# --- Ctrl-C -------------------------------------------------------------------------------------------------------


def test_ctrl_c_stops_the_hosts_run_fetches_it_and_exits_130(
    host: Sshd, project: Path, rdir: Path, tmp_path: Path
) -> None:
    before = set((rdir / "runs").glob("*"))
    proc = start_fab(project, ssh_config(host, tmp_path / "config"), *LONG_SWEEP, "--remote-dir", str(rdir))
    run_dir = new_run_on_host(rdir / "runs", before, proc, "rounds.jsonl")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert one_line(err) == f"nuc16: interrupted; run incomplete; rerun with --resume {run_dir.name}"
    assert gone(rdir)
    local = project / "catalog" / "runs" / run_dir.name
    m = RunFolder.open(local).manifest()
    assert m.status == "incomplete" and not RunFolder.open(local).ready, (m.status, m.reason)
    assert (local / "raw" / "rounds.jsonl").read_text()  # what was measured came back


# the real lab with SIGINT blocked: a run that ^C does not stop (a hang-up does)
DEAF = f"""#!{sys.executable}
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGINT}})
os.execv(sys.argv[0] + ".real", [sys.argv[0] + ".real", *sys.argv[1:]])
"""


def test_a_second_ctrl_c_hangs_up_a_run_that_does_not_stop(
    host: Sshd, project: Path, rdir: Path, tmp_path: Path
) -> None:
    before = set((rdir / "runs").glob("*"))
    with hostile_lab(rdir, DEAF.replace(sys.executable, str(rdir / "venv" / "bin" / "python"))):
        proc = start_fab(project, ssh_config(host, tmp_path / "config"), *LONG_SWEEP, "--remote-dir", str(rdir))
        try:
            run_dir = new_run_on_host(rdir / "runs", before, proc, "rounds.jsonl")
            proc.send_signal(signal.SIGINT)
            time.sleep(3)
            assert proc.poll() is None  # ^C went down the pty, and the run goes on
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert one_line(err) == f"nuc16: interrupted; run incomplete; rerun with --resume {run_dir.name}"
    assert gone(rdir)
    assert RunFolder.open(project / "catalog" / "runs" / run_dir.name).manifest().status == "incomplete"


# --- a silent host --------------------------------------------------------------------------------------------------


def test_a_silent_host_ends_fab_after_the_keepalive_bound(
    host: Sshd, project: Path, rdir: Path, tmp_path: Path
) -> None:
    """The host's sshd stopped mid-run (SIGSTOP: the TCP connection stays up, nothing answers): with
    ServerAliveInterval 1 and ServerAliveCountMax 3, fab gives up within seconds, fetches what there is on a
    fresh connection and marks it incomplete; once the sshd goes on, the run is resumed and fetched whole."""
    config = ssh_config(host, tmp_path / "config", "  ServerAliveInterval 1\n  ServerAliveCountMax 3\n")
    before = set((rdir / "runs").glob("*"))
    proc = start_fab(project, config, *MEDIUM_SWEEP, "--remote-dir", str(rdir))
    stopped: list[int] = []
    try:
        run_dir = new_run_on_host(rdir / "runs", before, proc, "rounds.jsonl")
        stopped = host.sshd_processes()
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        silent = time.monotonic()
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - silent
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (out, err)
    assert "connection lost: no answer from nuc16 for 3 s" in out, out
    assert one_line(err) == f"nuc16: run incomplete; rerun with --resume {run_dir.name}"
    assert took < 30, took
    local = project / "catalog" / "runs" / run_dir.name
    assert RunFolder.open(local).manifest().status == "incomplete"

    assert gone(rdir, timeout=60)  # the sshd went on, saw the closed connection and hung up the run
    r = fab(project, config, "measure", "--resume", run_dir.name, "--remote-dir", str(rdir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert RunFolder.open(local).ready and RunFolder.open(local).manifest().status == "complete"


# --- ProxyJump ------------------------------------------------------------------------------------------------------


def test_every_proxyjump_hop_is_verified(host: Sshd, jump: Sshd, project: Path, tmp_path: Path) -> None:
    def config(jump_known: Path) -> Path:
        path = tmp_path / f"config-{jump_known.name}"
        path.write_text(alias("jump", jump, jump_known) + alias("nuc16", host, host.known_hosts) + "  ProxyJump jump\n")
        return path

    empty = tmp_path / "empty"
    empty.write_text("")
    wrong = jump.write_wrong_known_hosts(tmp_path / "wrong")
    for known, said in ((empty, "unknown host key"), (wrong, "the host key CHANGED")):
        out = tmp_path / f"snap-{known.name}"
        r = fab(project, config(known), "snapshot", "--out", str(out))
        assert r.returncode == 1, r.stdout + r.stderr
        assert one_line(r.stderr).startswith(f"nuc16: ProxyJump hop jump: {said}"), r.stderr
        assert not out.exists()
    logins = (jump.dir / "sshd.log").read_text().count("Accepted publickey")
    out = tmp_path / "snap"
    r = fab(project, config(jump.known_hosts), "snapshot", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Linux" in (out / "host" / "uname.txt").read_text()
    assert (jump.dir / "sshd.log").read_text().count("Accepted publickey") == logins + 1  # through the hop
