"""`lab trace tune` on the tiny hybrid: the grid predicted by the policy model, the defaults and a candidate from the
front measured in the three-arm replay, the recommendation as flags; `--plan` alone; bad input refused in one line
with nothing created."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from labcli import lab, one_line_error

from lab.conversation.synth import SynthConversation, synth_conversation
from lab.core.runs import RunFolder
from lab.core.schemas.raw import CONVERSATION_SAMPLES, TUNE_SETTINGS

from conftest import interrupt_after_first_row, thinking_conversation

pytestmark = pytest.mark.engine
LAB = str(Path(sys.executable).parent / "lab")


@pytest.fixture
def rates(tmp_path: Path) -> dict[str, str]:
    """The host's rates given, not calibrated: the test measures the tune, not the calibration."""
    f = tmp_path / "rates.yaml"
    f.write_text(yaml.safe_dump({"flat_ms_per_token": 0.2, "attn_ms_per_token_per_1k": 0.05}))
    return {"LAB_SWEEP__RATES": str(f)}


def test_tune_measures_the_defaults_and_the_front_and_recommends_flags(tmp_path: Path, rates: dict[str, str]) -> None:
    trace = synth_conversation(SynthConversation(steps=4, reasoning_words=30), tmp_path / "c.jsonl")
    runs = tmp_path / "runs"
    r = lab("trace", "tune", str(trace), "--reps", "2", "--candidates", "1", "--runs-dir", str(runs), env=rates)
    assert r.returncode == 0, r.stderr + r.stdout
    assert r.stdout.index("plan: 2 reps x (2 settings x 1 tasks") < r.stdout.index("the predicted front")
    assert "for llama.cpp 465b1f0e7 (pin: llama-cpp-python 0.3.27): llama-server ... --ctx-checkpoints" in r.stdout
    assert "x the plan)" in r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    # `lab show RUN`: the closing tables again, from what the run stored: what the run printed at its end
    shown = lab("show", run.path.name, "--runs-dir", str(runs))
    assert shown.returncode == 0 and "x the plan)" in shown.stdout, shown.stderr
    assert r.stdout.endswith(shown.stdout + str(run.path) + "\n")
    rows = run.read(TUNE_SETTINGS)
    measured = [x for x in rows if x.role != "grid"]
    assert [x.role for x in measured] == ["defaults", "candidate"] and len(rows) > 16
    assert measured[1].on_front and all(x.within_budget for x in rows)
    for x in measured:  # the policy model predicted every step's reuse under both settings
        assert x.measured_steps == 2 * 4 and x.predicted_exact == x.measured_steps, x
        assert x.today_s is not None and x.realised is not None and x.realised.n == 2
    assert measured[1].vs_defaults is not None and measured[1].verdict in ("agree", "disagree", "undecided")
    # the difference split: the steps whose measured reuse differs from the defaults', and the rest
    c = measured[1]
    assert c.differing_steps is not None and 0 <= c.differing_steps <= 4
    assert c.vs_defaults_differing is not None and c.vs_defaults_alike is not None
    assert measured[0].vs_defaults is None and measured[0].differing_steps is None
    best = next(x for x in rows if x.recommended)
    if best.recommended_as == "defaults":  # nothing decided better, nor the same with less memory
        assert best is measured[0] and "the defaults kept" in r.stdout
        assert c.verdict != "disagree" or c.vs_defaults.value < 0
    else:
        assert best.recommended_as in ("gain", "less memory") and f"on the {best.differing_steps} steps" in r.stdout
    assert sum(x.recommended for x in rows) == 1 and {x.server_version for x in rows} == {best.server_version}
    samples = run.read(CONVERSATION_SAMPLES)
    assert {(s.arm, s.setting) for s in samples} == {
        ("today", measured[0].key),
        ("today", measured[1].key),
        ("optimum", ""),
        ("no_cache", ""),
    }
    results = run.manifest().results
    assert results["recommended"] == next(x.flags for x in rows if x.recommended) and results["took_s"] > 0
    ingest = lab("catalog", "ingest", "--runs-dir", str(runs), "--catalog-dir", str(tmp_path / "catalog"))
    assert ingest.returncode == 0, ingest.stderr
    assert (tmp_path / "catalog" / "tables" / "tune_settings.parquet").exists()


def test_plan_alone_creates_nothing(tmp_path: Path, rates: dict[str, str]) -> None:
    trace = synth_conversation(SynthConversation(tasks=1, steps=3, reasoning_words=30), tmp_path / "c.jsonl")
    runs = tmp_path / "runs"
    r = lab("trace", "tune", str(trace), "--plan", "--ram", "1MiB", "--runs-dir", str(runs), env=rates)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "the predicted front" in r.stdout and "plan: 12 reps x (" in r.stdout and not runs.exists()


def test_bad_input_is_refused_in_one_line(tmp_path: Path, rates: dict[str, str]) -> None:
    runs = tmp_path / "runs"
    trace = synth_conversation(SynthConversation(tasks=1, steps=2), tmp_path / "c.jsonl")
    one_line_error(lab("trace", "tune", str(trace), "--ram", "4 potatoes", "--runs-dir", str(runs)), 2, "not a size")
    shapes = tmp_path / "shapes.jsonl"
    assert lab("trace", "synth", "-o", str(shapes), "--tasks", "1", "--steps", "2").returncode == 0
    r = lab("trace", "tune", str(shapes), "--runs-dir", str(runs), env=rates)
    one_line_error(r, 2, "a trace of step shapes has no prompts")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "t0", "step": "one"}\n')
    one_line_error(lab("trace", "tune", str(bad), "--runs-dir", str(runs), env=rates), 1, "bad.jsonl:1:")
    assert not runs.exists()


def test_an_interrupted_tune_resumes_with_its_own_settings(tmp_path: Path, rates: dict[str, str]) -> None:
    """SIGTERM once the first rep is written: --resume measures the settings the run chose, not a new choice
    under other flags, and only the reps missing."""
    trace = synth_conversation(SynthConversation(tasks=1, steps=3, reasoning_words=30), tmp_path / "c.jsonl")
    runs = tmp_path / "runs"
    cmd = [LAB, "trace", "tune", str(trace), "--reps", "3", "--candidates", "1", "--runs-dir", str(runs)]
    env = {**os.environ, **rates}
    interrupt_after_first_row(cmd, f"*/raw/{CONVERSATION_SAMPLES.file}", runs, tmp_path, env, timeout=600)
    (folder,) = [p for p in runs.iterdir() if p.is_dir()]
    run = RunFolder.open(folder)
    assert run.manifest().status == "incomplete"
    first = {(s.rep, s.step, s.arm, s.setting): s.t_utc for s in run.read(CONVERSATION_SAMPLES)}
    resume = [LAB, "trace", "tune", "--resume", folder.name, "--candidates", "3", "--runs-dir", str(runs)]
    r = subprocess.run(resume, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    assert run.manifest().status == "complete"
    after = run.read(CONVERSATION_SAMPLES)
    settings = {s.setting for s in after if s.arm == "today"}
    assert len(settings) == 2  # the defaults and the one candidate the run chose
    assert len(after) == len({(s.rep, s.step, s.arm, s.setting) for s in after}) == 3 * 3 * (2 + 2)
    assert all(first[k] == s.t_utc for s in after if (k := (s.rep, s.step, s.arm, s.setting)) in first)


def test_on_the_newest_the_tune_weighs_reasoning_preserve_and_names_its_version(tmp_path: Path) -> None:
    """An agent that sends its reasoning back, to a template that keeps it only with --reasoning-preserve: on the
    newest release the grid weighs the flag both ways (each as its server renders the prompts), the defaults here
    turned off; both renderings measured are predicted exactly, and the recommendation names llama.cpp 0c1e57098."""
    trace, template = thinking_conversation(tmp_path, steps=4)
    runs = tmp_path / "runs"
    f = tmp_path / "rates.yaml"
    f.write_text(yaml.safe_dump({"flat_ms_per_token": 0.2, "attn_ms_per_token_per_1k": 0.05}))
    env = {
        "LAB_SWEEP__RATES": str(f),
        "LAB_SERVER__EXTRA_ARGS": json.dumps(["--chat-template-file", str(template)]),
        "LAB_CONVERSATION__REASONING_PRESERVE": "false",
    }
    cmd = ("trace", "tune", str(trace), "--engine", "latest", "--reps", "2", "--candidates", "1")
    r = lab(*cmd, "--runs-dir", str(runs), env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "for llama.cpp 0c1e57098 (latest: llama-cpp-python 0.3.36): llama-server ... " in r.stdout
    rows = RunFolder.open(Path(r.stdout.strip().splitlines()[-1])).read(TUNE_SETTINGS)
    assert {x.reasoning_preserve for x in rows} == {True, False}
    measured = [x for x in rows if x.role != "grid"]
    assert measured[0].reasoning_preserve is False and "--no-reasoning-preserve" in measured[0].flags
    assert measured[1].reasoning_preserve is True  # keeping the reasoning reuses each reply whole: the front's
    for x in measured:
        assert x.measured_steps == 2 * 4 and x.predicted_exact == x.measured_steps, x
    kept = [x for x in rows if x.reasoning_preserve]
    dropped = {x.key.removesuffix("-nopreserve"): x for x in rows if not x.reasoning_preserve}
    assert all(x.predicted_reused > dropped[x.key].predicted_reused for x in kept if x.key in dropped)
