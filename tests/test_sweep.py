"""`lab sweep` end to end on the real patched server and tiny model: the run folder, the agreement fields,
refusal of bad params, and interrupt/crash + resume with no duplicated or lost point."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from labcli import lab

from lab.core.runs import RunFolder
from lab.core.schemas import SweepPoint
from lab.core.schemas.raw import PREFILL_TPS, SWEEP_FILLS, SWEEP_POINTS, SWEEP_SAMPLES
from lab.core.settings import SweepSettings
from lab.core.stats import verdict
from lab.experiments.sweep.grid import GridPoint
from lab.experiments.sweep.points import decided
from lab.experiments.sweep.server import summarize_server

pytestmark = pytest.mark.engine

LAB = str(Path(sys.executable).parent / "lab")
REPO = Path(__file__).resolve().parent.parent


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([LAB, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def only_run(runs: Path) -> RunFolder:
    found = [p for p in runs.iterdir() if p.is_dir()]
    assert len(found) == 1, found
    return RunFolder.open(found[0])


def wait_for_points(run_dir: Path, n: int, proc: subprocess.Popen[str], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    points = run_dir / "raw" / f"{SWEEP_POINTS.file}"
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if points.exists() and points.read_text().count("\n") >= n:
            return
        time.sleep(0.1)
    raise AssertionError("sweep made no progress")


def check_complete(run: RunFolder, Ls: list[int], news: list[int], reps: int, arms: int = 2) -> list[SweepPoint]:
    assert run.ready and run.manifest().status == "complete"
    points = run.read(SWEEP_POINTS)
    samples = run.read(SWEEP_SAMPLES)
    assert sorted((p.L, p.new) for p in points) == sorted((L, n) for L in Ls for n in news)  # none lost or doubled
    assert Counter(s.point for s in samples) == {p.point: reps * arms for p in points}
    assert Counter((s.point, s.arm, s.rep) for s in samples).most_common(1)[0][1] == 1
    return points


def test_sweep_writes_a_complete_run_folder(tmp_path: Path) -> None:
    r = lab("sweep", "--Ls", "128,512,1024", "--news", "32", "--reps", "2", "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr + r.stdout
    run = only_run(tmp_path)
    assert r.stdout.strip().splitlines()[-1] == str(run.path)  # the path is the last line
    # `lab show RUN`: the closing tables again, from what the run stored: what the run printed at its end
    shown = lab("show", run.path.name, "--runs-dir", str(tmp_path))
    assert shown.returncode == 0 and "through llama-server" in shown.stdout, shown.stderr
    assert r.stdout.endswith(shown.stdout + str(run.path) + "\n")
    points = check_complete(run, [128, 512, 1024], [32], 2)
    m = run.manifest()
    assert m.engine["source"]["commit"] == "465b1f0e7" and len(m.engine["patch_sha256"]) == 64
    assert m.model["sha256"] and m.server_config["memory"] == "hybrid" and m.server_config["n_rs_seq"] == 0
    assert m.params["sweep"]["Ls"] == [128, 512, 1024]
    # the host-noise guard: the host's state before, and what it did over the run, printed and recorded
    assert "smt" in m.results["host_state"] and m.results["host_noise"]["seconds"] > 0
    assert set(m.results["host_noise"]["server_ctx_switches"]) == {"voluntary", "nonvoluntary"}
    assert "host noise over the run:" in r.stdout
    assert "…" not in r.stdout  # written to a pipe, as in a log: every table at its width, no number cut
    for f in ("host/uname.txt", "host/lscpu.txt", "git/git_diff.patch", "git/engine.patch", "logs/server.log"):
        assert (run.path / f).exists(), f
    assert "seq_fake_prefix" in (run.path / "git" / "engine.patch").read_text()
    assert (run.path / "raw" / "driver.cpp").exists() and (run.path / "raw" / "inproc_driver.json").exists()
    assert m.results["plan"]["predicted_s"] > 0 and m.results["plan"]["actual_s"] > 0  # predicted vs actual
    # no sweep of this model measured here before: the bound alone, the prediction after the first processes
    assert "plan: at most" in r.stdout and "predicted after the run's first processes" in r.stdout
    assert m.results["plan"]["said"] is False
    tps = run.read(PREFILL_TPS)
    # the estimate: the driver's chunk per rep; llama-bench once at the two smallest L, the cross-check
    assert sorted((t.depth, t.rep if t.rep is not None else -1, t.tool) for t in tps) == sorted(
        [(L, rep, "lab-inproc-driver") for L in (128, 512, 1024) for rep in (0, 1)]
        + [(L, -1, "llama-bench") for L in (128, 512)]
    )
    fills = run.read(SWEEP_FILLS)  # two cumulative passes: per L a segment, the step's chunk, a 512-token chunk
    assert sorted((f.fill_pass, f.kind, f.L, f.new or 0) for f in fills) == sorted(
        (n, k, L, new)
        for n in range(2)
        for k, new in (("fill", 0), ("chunk", 32), ("chunk", 512))
        for L in (128, 512, 1024)
    )
    assert {s.warm for s in run.read(SWEEP_SAMPLES) if s.arm == "genuine"} == {"restore"}
    # the two reps ran in two server (and driver) processes, each point's rep 0 in the first: every interval
    # resamples processes; the second process read the depth-L states the first saved, and made a fill pass
    assert {(s.rep, s.process) for s in run.read(SWEEP_SAMPLES)} == {(0, 0), (1, 1)}
    assert {(f.fill_pass, f.process) for f in fills} == {(0, 0), (1, 1)}
    assert (run.path / "logs" / "server.log").read_text().count("server is listening") == 2
    for p in points:
        assert p.processes == 2 and p.fake_vs_genuine_ci is not None and p.fake_vs_genuine_ci.processes == 2
        assert p.fake.n_ok == 2 and p.genuine.n_ok == 2 and p.genuine_warm == "restore", p
        # no direct baseline reps (the default): the fill passes re-prefill in one process, which is not the
        # server's place: the step and its speedup in one process, paired by pass, and no server ratio mixed in
        assert p.baseline.n_ok == 0 and p.baseline_source == "" and p.baseline_fill.n_ok == 2
        assert p.fill_step_ci is not None and p.fill_speedup_ci is not None and p.fill_speedup_ci.processes == 2
        assert p.fill_speedup_ci.value > 1 and p.fake_vs_baseline_ci is None
        assert (p.bench_check_ci is not None) == (p.L in (128, 512))
        assert p.opt_prefill_ms == pytest.approx(32 / p.prefill_tps * 1e3)
        # every ratio carries its interval, and the verdicts come from the intervals
        ci = p.fake_vs_genuine_ci
        assert ci is not None and ci.n == 2 and ci.lo <= ci.value <= ci.hi and p.reps == 2
        assert p.fake_vs_estimate_ci is not None
        # fake / estimate's split: the server's share paired by rep, the batch-size effect paired by fill pass
        assert p.genuine_vs_estimate_ci is not None and p.genuine_vs_estimate_ci.n == 2
        assert p.batch_effect_ci is not None and p.batch_effect_ci.n == 2 and p.batch_effect_ci.value > 0
        assert p.fake.median_lo_ms is not None and p.fake.median_lo_ms <= p.fake.median_ms <= p.fake.median_hi_ms
        assert p.genuine_verdict == verdict(p.fake_vs_genuine_ci, SweepSettings().tolerance)  # from the interval
        assert p.n_kv_padded == (p.L + 32 + 255) // 256 * 256
        assert p.measurable == (p.L >= 256)
    assert any("below the 256-column floor" in d for d in next(p for p in points if p.L == 128).diagnostics)
    for s in run.read(SWEEP_SAMPLES):
        if s.arm == "fake":
            assert (s.cache_n, s.prompt_n) == (s.L, s.new) and s.fake_ms is not None and s.fake_ms > 0


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["--Ls", "0,512"], "sweep.Ls"),
        (["--reps", "0"], "sweep.reps"),
        (["--Ls", "20000", "--ctx-size", "8192"], "server.ctx_size"),
    ],
)
def test_invalid_params_refused_before_anything_starts(tmp_path: Path, args: list[str], key: str) -> None:
    r = lab("sweep", *args, "--runs-dir", str(tmp_path))
    assert r.returncode == 2
    assert key in r.stderr
    assert not any(tmp_path.iterdir())  # nothing was started


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_interrupted_sweep_resumes_without_duplicates(tmp_path: Path, how: str) -> None:
    Ls, news, reps = [512, 768, 1024, 1536], [16], 2
    proc = start("sweep", "--Ls", ",".join(map(str, Ls)), "--news", "16", "--reps", "2", "--runs-dir", str(tmp_path))
    run_dir = _wait_run_dir(tmp_path, proc)
    wait_for_points(run_dir, 1, proc)
    proc.send_signal(getattr(signal, how))
    proc.communicate(timeout=60)
    run = RunFolder.open(run_dir)
    assert not run.ready
    m = run.manifest()
    if how == "SIGTERM":
        assert (m.status, m.reason) == ("incomplete", "interrupted by SIGTERM")
    else:
        assert m.status == "running"  # a hard kill leaves no chance to say more; resume still works
    done_before = len(run.read(SWEEP_POINTS, tolerate_torn_tail=True))
    assert 1 <= done_before < len(Ls)
    r = lab("sweep", "--resume", run_dir.name, "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr + r.stdout
    check_complete(RunFolder.open(run_dir), Ls, news, reps)
    assert len(RunFolder.open(run_dir).manifest().resumed_utc) == 1
    assert r.stdout.strip().splitlines()[-1] == str(run_dir)


def test_server_crash_leaves_run_incomplete_then_resumes(tmp_path: Path) -> None:
    proc = start("sweep", "--Ls", "512,1024,1536", "--news", "16", "--reps", "2", "--runs-dir", str(tmp_path))
    run_dir = _wait_run_dir(tmp_path, proc)
    wait_for_points(run_dir, 1, proc)
    server_pid = _child_server_pid(proc.pid)
    os.kill(server_pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err, err  # one clear line, not a traceback
    assert "llama-server died" in err.strip().splitlines()[-1], err
    m = RunFolder.open(run_dir).manifest()
    assert m.status == "incomplete" and "died" in m.reason, m.reason
    r = lab("sweep", "--resume", str(run_dir), "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr + r.stdout
    check_complete(RunFolder.open(run_dir), [512, 1024, 1536], [16], 2)


def test_resume_refuses_a_complete_run(tmp_path: Path) -> None:
    r = lab("sweep", "--Ls", "256", "--news", "8", "--reps", "1", "--runs-dir", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    run = only_run(tmp_path)
    # --json: nothing but the records the tables are printed from, and the run folder
    out = json.loads(r.stdout)
    assert out["run"] == str(run.path) and set(out) == {"run", "points", "summary"}
    assert [SweepPoint.model_validate(p) for p in out["points"]] == run.read(SWEEP_POINTS)
    before = (run.path / "manifest.json").read_text()
    r = lab("sweep", "--resume", run.path.name, "--runs-dir", str(tmp_path))
    assert r.returncode == 1 and "complete" in r.stderr
    assert (run.path / "manifest.json").read_text() == before
    assert json.loads(before)["status"] == "complete"


def _wait_run_dir(root: Path, proc: subprocess.Popen[str], timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        dirs = [p for p in root.iterdir() if p.is_dir()] if root.exists() else []
        if dirs:
            return dirs[0]
        time.sleep(0.1)
    raise AssertionError("no run folder appeared")


def _child_server_pid(parent: int) -> int:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[3]) == parent and b"llama-server" in cmdline:
            return int(stat.parent.name)
    raise AssertionError("no llama-server child found")


def test_sweep_image_axis(tmp_path: Path) -> None:
    r = lab(
        "sweep",
        "--Ls",
        "512",
        "--news",
        "16",
        "--reps",
        "1",
        "--images",
        "none,320x200",
        "--arms",
        "baseline,fake,genuine,estimate",
        "--runs-dir",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr + r.stdout
    run = only_run(tmp_path)
    assert run.ready
    points = {p.image: p for p in run.read(SWEEP_POINTS)}
    assert set(points) == {None, "320x200"}
    img = points["320x200"]
    assert (img.image_tokens, img.image_positions) == (10 * 6 + 2, 10)  # 320x200 -> 10x6 merged patches
    assert img.encode_ms is not None and img.lm_ms is not None and img.opt_prefill_ms is not None
    assert img.n_kv_padded == 768  # L + image tokens + text tokens, padded: L counts cells, not positions
    samples = [s for s in run.read(SWEEP_SAMPLES) if s.image == "320x200"]
    assert {s.arm for s in samples if s.ok} == {"baseline", "fake", "genuine"}, [s.reason for s in samples]
    fake = next(s for s in samples if s.arm == "fake")
    assert (fake.cache_n, fake.prompt_n) == (512, 62 + 16) and fake.encode_ms is not None
    base = next(s for s in samples if s.arm == "baseline")
    assert base.prompt_n == 512 + 62 + 16 and base.encode_ms is not None  # the baseline includes the encode


def test_adaptive_reps_stop_when_decided_or_at_max(tmp_path: Path) -> None:
    """A point keeps getting reps until its verdicts are decided and fake/genuine is as narrow as the target:
    an unreachable target runs every point to max_reps; a loose one stops at min_reps."""
    runs = tmp_path / "runs"
    r = lab("sweep", "--Ls", "512", "--news", "16", "--min-reps", "2", "--max-reps", "4", "--target", "0.000001",
            "--arms", "fake,genuine", "--runs-dir", str(runs / "a"))  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    (point,) = only_run(runs / "a").read(SWEEP_POINTS)
    assert point.reps == 4 and point.baseline.n_ok == 0 and point.opt_prefill_ms is None  # arms chosen
    assert "fake vs genuine hit:" in r.stdout
    r = lab("sweep", "--Ls", "512", "--news", "16", "--min-reps", "3", "--max-reps", "9", "--target", "0.9",
            "--processes", "3", "--arms", "fake,genuine", "--runs-dir", str(runs / "b"),
            env={"LAB_SWEEP__TOLERANCE": "0.9"})  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    (point,) = only_run(runs / "b").read(SWEEP_POINTS)
    samples = only_run(runs / "b").read(SWEEP_SAMPLES)
    assert {s.arm for s in samples} == {"fake", "genuine"} and len(samples) == 2 * point.reps
    # the point stopped at the first rep count from min_reps on whose samples decide it (else at max_reps):
    # replayed from the stored samples, so the check holds however fast or noisy this machine is
    sw = SweepSettings(Ls=[512], news=[16], min_reps=3, max_reps=9, target=0.9, tolerance=0.9, arms=["fake", "genuine"])
    stops = [
        k
        for k in range(3, 10)
        if decided(summarize_server(GridPoint(512, 16), [x for x in samples if x.rep < k], [], 0.9), sw)
    ]
    assert point.reps == min(stops, default=9), (point.reps, stops)


def test_plan_without_rates_calibrates_here_and_measures_nothing(tmp_path: Path) -> None:
    """--plan with no rates: the driver times chunks at two depths after a warm-up pass, the rates are fitted to
    them (with --n-out, the server times a few generated tokens at two depths too), and the plan is printed; no
    run folder is made. --budget then picks the reps."""
    runs = tmp_path / "runs"
    r = lab("sweep", "--plan", "--Ls", "512,1024", "--news", "16", "--n-out", "8", "--runs-dir", str(runs))
    assert r.returncode == 0, r.stderr + r.stdout
    out = " ".join(r.stdout.split())  # the table wraps its cells
    assert "calibration: chunks of 16 at depths 512, 1024" in out and "total" in out, r.stdout
    assert "decode: the server's generated tokens at depths L = 512, 1024" in out, r.stdout
    assert "fake: decode" in r.stdout and "8 tokens generated at depth" in r.stdout, r.stdout
    assert not runs.exists()
    r = lab("arms", "--plan", "--budget", "0s", "--Ls", "512,1024", "--news", "16", "--runs-dir", str(runs))
    assert r.returncode == 2 and "one rep of this grid already takes about" in r.stderr, r.stderr + r.stdout
    assert not runs.exists()
