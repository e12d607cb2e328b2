"""Trace format, synthetic traces and `lab replay-trace` against the real server."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.core.runs import RunFolder
from lab.core.schemas import TraceStep, TraceStepResult
from lab.core.schemas.raw import TRACE_STEPS, TRACE_TASKS
from lab.engine.imagegrid import TINY_GEOMETRY
from lab.experiments.trace import TraceError, check_replayable, load_trace, synth_trace, write_trace

from conftest import interrupt_after_first_row

pytestmark = pytest.mark.engine

LAB = str(Path(sys.executable).parent / "lab")
REPO = Path(__file__).resolve().parent.parent


def test_synth_is_deterministic_and_valid(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_trace(synth_trace(3, 5, seed=4), a)
    write_trace(synth_trace(3, 5, seed=4), b)
    assert a.read_bytes() == b.read_bytes()
    steps = load_trace(a)
    assert len({s.task_id for s in steps}) == 3
    for task in {s.task_id for s in steps}:
        ts = [s for s in steps if s.task_id == task]
        assert [s.step for s in ts] == list(range(len(ts)))
        # the prior depth grows by at least the previous step's new text
        assert all(b.prior_depth() > a.prior_depth() + (a.only_new or 0) for a, b in itertools.pairwise(ts))


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("{not json", "Expecting property name"),
        ('{"task_id": "t", "step": 0, "new_text": "x"}', "give either L, or depth and only_new"),
        ('{"task_id": "t", "step": 0, "L": 5, "depth": 9, "only_new": 4, "new_text": "x"}', "give either L"),
        ('{"task_id": "t", "step": -1, "L": 5, "new_text": "x"}', "step"),
        ('{"task_id": "t", "step": 0, "depth": 3, "only_new": 4, "new_text": "x"}', "only_new (4) > depth (3)"),
        ('{"task_id": "t", "step": 0, "L": 5, "new_text": ""}', "new_text"),
    ],
)
def test_bad_trace_lines_are_named(tmp_path: Path, line: str, needle: str) -> None:
    path = tmp_path / "t.jsonl"
    good = '{"task_id": "t", "step": 9, "L": 10, "new_text": "ok"}'
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(TraceError, match=r"t\.jsonl:2: ") as e:
        load_trace(path)
    assert needle in str(e.value)


def test_duplicate_step_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    step = '{"task_id": "t", "step": 1, "L": 10, "new_text": "ok"}\n'
    path.write_text(step + step)
    with pytest.raises(TraceError, match="duplicate step 1"):
        load_trace(path)


def test_screenshot_without_projector_names_the_step(tmp_path: Path) -> None:
    steps = [
        TraceStep(task_id="t", step=0, L=100, new_text="a"),
        TraceStep(task_id="t", step=1, L=200, new_text="b", screenshot="shot.png"),
    ]
    with pytest.raises(TraceError, match=r"task 't' step 1 has a screenshot \(shot\.png\) but no vision projector"):
        check_replayable(steps, 8192, has_vision=False, trace=tmp_path / "t.jsonl")
    with pytest.raises(TraceError, match="does not fit"):
        check_replayable([TraceStep(task_id="t", step=0, L=9000, new_text="a")], 8192, False, tmp_path / "t")


def test_replay_trace_end_to_end(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    r = subprocess.run([LAB, "trace", "synth", "-o", str(trace), "--tasks", "2", "--steps", "3"], cwd=REPO)
    assert r.returncode == 0
    runs = tmp_path / "runs"
    r2 = subprocess.run(
        [LAB, "replay-trace", str(trace), "--runs-dir", str(runs)], capture_output=True, text=True, cwd=REPO
    )
    assert r2.returncode == 0, r2.stderr + r2.stdout
    run = RunFolder.open(Path(r2.stdout.strip().splitlines()[-1]))
    assert run.ready and run.manifest().experiment == "trace_replay"
    assert (run.path / "raw" / "trace.jsonl").read_bytes() == trace.read_bytes()
    steps = run.read(TRACE_STEPS)
    trace_steps = load_trace(trace)
    assert len(steps) == len(trace_steps)
    for res, st in zip(steps, trace_steps, strict=True):
        assert res.ok, res.reason
        assert st.prior_depth() == res.L and res.cache_n == res.L and res.prompt_n == res.new_tokens
        assert res.measured_opt_prefill_s is not None and res.measured_opt_prefill_s > 0
    for task in run.read(TRACE_TASKS):
        mine = [s for s in steps if s.task_id == task.task_id]
        opt = sum(s.measured_opt_prefill_s or 0 for s in mine)
        dec = sum(s.baseline_decode_s or 0 for s in mine)
        exe = sum(s.baseline_exec_s or 0 for s in mine)
        assert task.opt_wall_s == pytest.approx(opt + dec + exe)
    lines = [json.loads(x) for x in run.table_path(TRACE_STEPS).read_text().splitlines()]
    assert all("measured_opt_prefill_s" in x for x in lines)  # the field a downstream simulator reads


def test_replay_trace_with_screenshots(tmp_path: Path) -> None:
    trace = tmp_path / "shots" / "trace.jsonl"
    r = subprocess.run(
        [LAB, "trace", "synth", "-o", str(trace), "--tasks", "1", "--steps", "3", "--start-depth", "300",
         "--screenshots"], capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    steps = [json.loads(x) for x in trace.read_text().splitlines()]
    assert all(s["screenshot"].startswith("trace_screenshots/") for s in steps)  # relative to the trace
    r = subprocess.run(
        [LAB, "replay-trace", str(trace), "--runs-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    results = run.read(TRACE_STEPS)
    assert len(results) == 3 and all(x.ok for x in results), [x.reason for x in results]
    sizes = [(320, 200), (640, 400), (1280, 800)]
    for x, size in zip(results, sizes, strict=True):
        img = TINY_GEOMETRY.tokens(*size)[0]  # the tiny projector's geometry
        assert x.image_tokens == img and x.encode_ms is not None
        assert x.cache_n == x.L and x.prompt_n == x.new_tokens  # new_tokens = image tokens + text tokens
        assert x.new_tokens > img


def test_resume_keeps_the_runs_own_settings(tmp_path: Path) -> None:
    """An interrupted replay resumes with the server settings it was started with, whatever today's config says."""
    trace = tmp_path / "trace.jsonl"
    subprocess.run([LAB, "trace", "synth", "-o", str(trace), "--tasks", "3", "--steps", "6"], cwd=REPO, check=True)
    runs = tmp_path / "runs"
    cmd = [LAB, "replay-trace", str(trace), "-t", "1", "-c", "12288", "--runs-dir", str(runs)]
    interrupt_after_first_row(cmd, "*/raw/steps.jsonl", runs, REPO)
    (run_dir,) = (p for p in runs.iterdir() if p.is_dir())
    run = RunFolder.open(run_dir)
    assert run.manifest().status == "incomplete", run.manifest()
    done_before = len(run.read(TRACE_STEPS, tolerate_torn_tail=True))
    assert done_before < len(load_trace(trace))
    env = {**os.environ, "LAB_SERVER__THREADS": "2", "LAB_SERVER__CTX_SIZE": "16384"}
    r = subprocess.run([LAB, "replay-trace", "--resume", run_dir.name, "--runs-dir", str(runs)],
                       capture_output=True, text=True, cwd=REPO, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    m = run.manifest()
    assert run.ready and len(m.resumed_utc) == 1
    assert (m.server_config["threads"], m.server_config["n_ctx"]) == (1, 12288), m.server_config
    assert m.params["server"]["threads"] == 1
    steps = run.read(TRACE_STEPS)
    assert len(steps) == len(load_trace(trace)) and all(s.ok for s in steps)
    assert len({(s.task_id, s.step) for s in steps}) == len(steps)  # none measured twice


def test_steps_measured_several_times_carry_their_interval(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    subprocess.run([LAB, "trace", "synth", "-o", str(trace), "--tasks", "1", "--steps", "2"], cwd=REPO, check=True)
    r = subprocess.run([LAB, "trace", "replay", str(trace), "--reps", "3", "--runs-dir", str(tmp_path / "runs"),
                        "--json"], capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    out = json.loads(r.stdout)  # --json: the records the tables are printed from, and the run folder
    run = RunFolder.open(Path(out["run"]))
    assert run.manifest().params["reps"] == 3
    assert [TraceStepResult.model_validate(x) for x in out["steps"]] == run.read(TRACE_STEPS)
    assert len(out["tasks"]) == 1 and out["tasks"][0]["n_steps"] == 2
    for s in run.read(TRACE_STEPS):
        assert s.ok and s.reps == 3 and s.measured_ci is not None and s.measured_ci.n == 3
        assert s.measured_ci.lo <= (s.measured_opt_prefill_s or 0) <= s.measured_ci.hi
