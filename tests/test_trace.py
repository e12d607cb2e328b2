"""Traces of step shapes: the format, synthetic traces, and the one replay (`lab trace replay`) measuring them
against the real server: the optimum arm (and no cache, when asked), never today's."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from labcli import lab, one_line_error

from lab.conversation.load import ConversationError
from lab.conversation.shapes import check_replayable, load_trace, synth_trace, write_trace
from lab.core.runs import RunFolder
from lab.core.schemas import ConversationStepResult, TraceStep
from lab.core.schemas.raw import CONVERSATION_SAMPLES, CONVERSATION_STEPS, CONVERSATION_TASKS
from lab.engine.imagegrid import TINY_GEOMETRY

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
    with pytest.raises(ConversationError, match=r"t\.jsonl:2: ") as e:
        load_trace(path)
    assert needle in str(e.value)


def test_duplicate_step_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    step = '{"task_id": "t", "step": 1, "L": 10, "new_text": "ok"}\n'
    path.write_text(step + step)
    with pytest.raises(ConversationError, match="duplicate step 1"):
        load_trace(path)


def test_screenshot_without_projector_names_the_step(tmp_path: Path) -> None:
    steps = [
        TraceStep(task_id="t", step=0, L=100, new_text="a"),
        TraceStep(task_id="t", step=1, L=200, new_text="b", screenshot="shot.png"),
    ]
    with pytest.raises(
        ConversationError, match=r"task 't' step 1 has a screenshot \(shot\.png\) but no vision projector"
    ):
        check_replayable(steps, 8192, has_vision=False, trace=tmp_path / "t.jsonl")
    with pytest.raises(ConversationError, match="does not fit"):
        check_replayable([TraceStep(task_id="t", step=0, L=9000, new_text="a")], 8192, False, tmp_path / "t")


def synth(trace: Path, *args: str) -> None:
    r = lab("trace", "synth", "-o", str(trace), *args)
    assert r.returncode == 0, r.stderr


def test_a_step_shape_trace_replays_in_the_optimum_arm(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    synth(trace, "--tasks", "2", "--steps", "3")
    r = lab("trace", "replay", str(trace), "--reps", "2", "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    m = run.manifest()
    assert run.ready and m.experiment == "conversation" and m.params["shapes"] and m.params["arms"] == ["optimum"]
    # `lab show RUN`: the closing tables again, from what the run stored: what the run printed at its end
    shown = lab("show", run.path.name, "--runs-dir", str(tmp_path / "runs"))
    assert shown.returncode == 0 and "optimum" in shown.stdout, shown.stderr
    assert r.stdout.endswith(shown.stdout + str(run.path) + "\n")
    assert (run.path / "raw" / "trace.jsonl").read_bytes() == trace.read_bytes()
    assert {s.arm for s in run.read(CONVERSATION_SAMPLES)} == {"optimum"}
    steps, shapes = run.read(CONVERSATION_STEPS), load_trace(trace)
    assert [(s.task_id, s.step) for s in steps] == [(x.task_id, x.step) for x in shapes]
    for res, shape in zip(steps, shapes, strict=True):
        assert res.common == shape.prior_depth() and res.cache_n == res.common and res.prompt_n == res.new
        assert res.optimum_ms is not None and res.optimum_ms.n == 2 and res.today_ms is None and res.no_cache_ms is None
        assert res.baseline_exec_s == shape.baseline_exec_s and res.trace_only_new == shape.only_new
    for task in run.read(CONVERSATION_TASKS):
        mine = [x for x in shapes if x.task_id == task.task_id]
        recorded = sum((x.baseline_decode_s or 0) + (x.baseline_exec_s or 0) for x in mine)
        assert task.optimum_s is not None and task.opt_wall_s is not None and task.realised is None
        assert task.opt_wall_s.value == pytest.approx(task.optimum_s.value + recorded)
        assert task.opt_wall_s.lo == pytest.approx(task.optimum_s.lo + recorded)
    # the task table's opt_wall: every column with `lab show RUN --wide`
    wide = lab("show", run.path.name, "--runs-dir", str(tmp_path / "runs"), "--wide")
    assert wide.returncode == 0 and "opt_wall" in wide.stdout and "opt_wall" not in r.stdout, wide.stderr


def test_no_cache_when_asked_and_never_today(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    synth(trace, "--tasks", "1", "--steps", "2", "--start-depth", "600")
    runs = tmp_path / "runs"
    r = lab("trace", "replay", str(trace), "--arms", "today,optimum", "--runs-dir", str(runs))
    one_line_error(r, 2, "--arms today: today's server replays recorded prompts")
    assert not runs.exists()
    r = lab("trace", "replay", str(trace), "--arms", "optimum,no_cache", "--reps", "2", "--runs-dir", str(runs))
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    for res in run.read(CONVERSATION_STEPS):
        assert res.optimum_ms is not None and res.no_cache_ms is not None and res.today_ms is None
        assert res.no_cache_ms.value > res.optimum_ms.value  # the whole depth prefilled against the new part


def test_a_step_shape_trace_with_screenshots(tmp_path: Path) -> None:
    trace = tmp_path / "shots" / "trace.jsonl"
    synth(trace, "--tasks", "1", "--steps", "3", "--start-depth", "300", "--screenshots")
    steps = [json.loads(x) for x in trace.read_text().splitlines()]
    assert all(s["screenshot"].startswith("trace_screenshots/") for s in steps)  # relative to the trace
    r = lab("trace", "replay", str(trace), "--reps", "1", "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    results = run.read(CONVERSATION_STEPS)
    assert len(results) == 3 and all(x.optimum_ms is not None for x in results)
    sizes = [(320, 200), (640, 400), (1280, 800)]
    for x, size in zip(results, sizes, strict=True):
        img = TINY_GEOMETRY.tokens(*size)[0]  # the tiny projector's geometry
        assert x.images == 1 and x.screenshot is not None and x.new > img  # new: image tokens + text tokens
        assert x.cache_n == x.common and x.prompt_n == x.new


def test_resume_keeps_the_runs_own_settings(tmp_path: Path) -> None:
    """An interrupted replay resumes with the server settings it was started with, whatever today's config says,
    keeping its whole reps."""
    trace = tmp_path / "trace.jsonl"
    synth(trace, "--tasks", "2", "--steps", "4")
    runs = tmp_path / "runs"
    cmd = [LAB, "trace", "replay", str(trace), "--reps", "4", "-t", "1", "-c", "12288", "--runs-dir", str(runs)]
    interrupt_after_first_row(cmd, f"*/raw/{CONVERSATION_SAMPLES.file}", runs, REPO)
    (run_dir,) = (p for p in runs.iterdir() if p.is_dir())
    run = RunFolder.open(run_dir)
    assert run.manifest().status == "incomplete", run.manifest()
    before = {s.rep for s in run.read(CONVERSATION_SAMPLES, tolerate_torn_tail=True)}
    assert 0 < len(before) < 4
    env = {**os.environ, "LAB_SERVER__THREADS": "2", "LAB_SERVER__CTX_SIZE": "16384"}
    r = subprocess.run([LAB, "trace", "replay", "--resume", run_dir.name, "--runs-dir", str(runs)],
                       capture_output=True, text=True, cwd=REPO, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    m = run.manifest()
    assert run.ready and len(m.resumed_utc) == 1
    assert (m.server_config["threads"], m.server_config["n_ctx"]) == (1, 12288), m.server_config
    assert m.params["server"]["threads"] == 1
    samples = run.read(CONVERSATION_SAMPLES)
    assert len(samples) == 4 * 8 and len({(s.rep, s.task_id, s.step) for s in samples}) == len(samples)


def test_json_prints_the_records_the_tables_are_printed_from(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    synth(trace, "--tasks", "1", "--steps", "2")
    r = lab("trace", "replay", str(trace), "--reps", "3", "--runs-dir", str(tmp_path / "runs"), "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    out = json.loads(r.stdout)  # --json: the records the tables are printed from, and the run folder
    run = RunFolder.open(Path(out["run"]))
    assert run.manifest().params["reps"] == 3
    assert [ConversationStepResult.model_validate(x) for x in out["steps"]] == run.read(CONVERSATION_STEPS)
    assert len(out["tasks"]) == 1 and out["tasks"][0]["n_steps"] == 2
    for s in run.read(CONVERSATION_STEPS):
        assert s.optimum_ms is not None and s.optimum_ms.n == 3 and s.optimum_ms.lo <= s.optimum_ms.value


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b"[" * 100_000 + b"]" * 100_000 + b"\n", 1),
        (b'{"task_id": "t", "step": 0, "L": 5, "new_text": "ok"}\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n", 2),
        (b'{"task_id": "t\xff", "step": 0, "L": 5, "new_text": "ok"}\n', 1),
        (b'{"task_id": "t", "step": 0, "request": {"messages": [{"role": "user", "content": "\xff"}]}}\n', 1),
    ],
    ids=["deep", "deep-second", "not-utf8", "not-utf8-conversation"],
)
def test_a_trace_line_no_parser_reads_is_one_line_before_any_run(tmp_path: Path, data: bytes, line: int) -> None:
    trace, runs = tmp_path / "t.jsonl", tmp_path / "runs"
    trace.write_bytes(data)
    r = lab("trace", "replay", str(trace), "--runs-dir", str(runs))
    one_line_error(r, 1, f"{trace}:{line}: ")
    assert not runs.exists()
