"""A conversation in tokens through the real server's chat template and tokenizer (tiny model and projector):
an extending step shares the whole previous prompt and reply, an evicting step only what comes before the first
changed message, and a step beyond the context is refused by name."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.conversation.cache_setting import todays_setting
from lab.conversation.derive import StepTokens, derive_conversation, derive_tasks
from lab.conversation.load import ConversationError, load_conversation
from lab.conversation.prediction import policy_for, predict
from lab.conversation.rules import rules_for
from lab.conversation.synth import SynthConversation, synth_conversation
from lab.conversation.today import setting_overrides, today_step
from lab.core.gguf_io import read_gguf_metadata
from lab.core.runs import RunFolder
from lab.core.schemas import ConversationSample, ConversationStepResult
from lab.core.schemas.raw import CONVERSATION_CAUSES, CONVERSATION_SAMPLES, CONVERSATION_STEPS, CONVERSATION_TASKS
from lab.core.settings import load_settings
from lab.core.settings_server import ConversationSettings, ServerSettings
from lab.engine.build import EngineInfo
from lab.engine.server import LlamaServer, LogTail
from lab.engine.serverflags import read_defaults
from lab.models.resolve import resolve_projector

from conftest import ENGINES, EngineOf, interrupt_after_first_row, server_settings, thinking_conversation

pytestmark = pytest.mark.engine

LAB = str(Path(sys.executable).parent / "lab")


def todays_server(engine: EngineInfo, **conversation: object) -> ServerSettings:
    """The lab's test server run as users run that release's llama-server (its own defaults, read from its --help),
    with these conversation.* flags."""
    c, base = ConversationSettings.model_validate(conversation), server_settings()
    setting = todays_setting(c, base, read_defaults(engine.server, engine.lib_dir))
    return base.with_overrides(**setting_overrides(setting, c))


def derived(engine: EngineInfo, tiny_model: Path, trace: Path) -> list[StepTokens]:
    """The trace's one task in tokens, through that engine's chat template and tokenizer."""
    return derive_tasks(load_settings(), engine, tiny_model, load_conversation(trace), str(trace)).tasks["task000"]


def predicted_cache_n(engine: EngineInfo, model: Path, steps: list[StepTokens], **conversation: object) -> list[int]:
    """Each step's reuse as the policy model of that engine's server version predicts it, under its defaults and
    these conversation.* flags."""
    defaults = read_defaults(engine.server, engine.lib_dir)
    setting = todays_setting(ConversationSettings.model_validate(conversation), server_settings(), defaults)
    model_ = policy_for(read_gguf_metadata(model), setting, server_settings().ctx_size, {}, rules_for(defaults.version))
    return [p.reuse.cache_n for p in predict(steps, model_)]


def replay_today(srv: LlamaServer, steps: list[StepTokens], rep: int = 0) -> list[ConversationSample]:
    """One task's steps, in order, against `srv` (fresh: a replay starts from an empty cache)."""
    tail = LogTail(srv.log_path)
    tail.read()
    return [today_step(srv, tail, st, rep) for st in steps]


def test_steps_in_tokens_extend_and_diverge_where_the_agent_evicted(tmp_path: Path) -> None:
    trace = synth_conversation(SynthConversation(steps=6), tmp_path / "c.jsonl")
    steps = derive_conversation(load_settings(), trace)["task000"]
    first = steps[0]
    assert first.common == 0 and first.new == first.cells and first.images == 1
    for prev, s in itertools.pairwise(steps):
        held = prev.cells + len(prev.reply)
        assert s.previous == held and 0 < s.common <= held and s.new == s.cells - s.common
        if s.diverged:  # an eviction: reuse stops before the previous prompt's end
            assert s.common < prev.cells
        else:  # a pure extension: the previous prompt and its reply are all reusable
            assert s.common == held
    assert [s.step for s in steps if s.diverged] == [4]
    r = subprocess.run([LAB, "trace", "derive", str(trace)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "message 1" in r.stdout and "extends" in r.stdout, r.stderr + r.stdout
    r = subprocess.run([LAB, "trace", "derive", str(trace), "--json"], capture_output=True, text=True, timeout=300)
    records = json.loads(r.stdout)  # the records the table is printed from
    assert [(x["step"], x["common"], x["new"]) for x in records] == [(s.step, s.common, s.new) for s in steps]


def test_a_conversation_that_does_not_fit_the_context_is_refused_naming_the_step(tmp_path: Path) -> None:
    trace = synth_conversation(SynthConversation(steps=3), tmp_path / "c.jsonl")
    settings = load_settings(server={"ctx_size": 512}, sweep={"Ls": [64], "news": [16]})
    with pytest.raises(
        ConversationError,
        match=r"c.jsonl: task 'task000' step 2: \d+ prompt \+ \d+ reply tokens do not fit the context \(512\)",
    ):
        derive_conversation(settings, trace)


@pytest.mark.parametrize("release", ENGINES)
def test_todays_server_reuses_at_most_what_the_step_shares_and_falls_at_an_eviction(
    tmp_path: Path, engine_of: EngineOf, tiny_model: Path, release: str
) -> None:
    """The conversation replayed in order to a server run as users run it, on each supported release: its own
    numbers (prompt_n + cache_n) are the derived prompt, and its reuse never passes what the step shares with the
    one before; at the eviction it falls to the divergence point or below (a hybrid reuses only up to a
    checkpoint). The log lines the lab reads are there on each release (they moved to trace level later)."""
    settings, engine = load_settings(), engine_of(release)
    trace = synth_conversation(SynthConversation(steps=6), tmp_path / "c.jsonl")
    steps = derived(engine, tiny_model, trace)
    extra = ["--mmproj", str(resolve_projector(settings))]
    server = todays_server(engine)
    with LlamaServer(engine, tiny_model, server, tmp_path / "today.log", extra_args=extra) as srv:
        today = replay_today(srv, steps)
        log = srv.log_text()
    assert "created context checkpoint" in log and "updating prompt cache" in log  # llama-server's defaults
    for st, t in zip(steps, today, strict=True):
        assert t.ok and t.prompt_n is not None and t.cache_n is not None, t
        assert t.prompt_n + t.cache_n == st.cells, (st.step, t)  # the derivation is the server's own count
        assert t.cache_n <= st.common, (st.step, t)
        if st.step and not st.diverged:  # an extension: the held reply makes all it shares reusable
            assert t.cache_n == st.common, (st.step, t)
    evicted = next(t for st, t in zip(steps, today, strict=True) if st.diverged)
    assert evicted.cache_n is not None and evicted.cache_n <= steps[4].common < steps[3].cells
    # the user's own flags: no checkpoints and no RAM cache, and the server's log says so
    server = todays_server(engine, checkpoints=0, cache_ram_mib=0)
    with LlamaServer(engine, tiny_model, server, tmp_path / "own.log", extra_args=extra) as srv:
        own = replay_today(srv, steps[:3])
        log = srv.log_text()
    assert "created context checkpoint" not in log and "updating prompt cache" not in log
    assert [t.cache_n for t in own] == [t.cache_n for t in today[:3]]  # extensions reuse all they share anyway


@pytest.mark.parametrize("release", ENGINES)
def test_an_agent_that_drops_its_reasoning_is_served_from_context_checkpoints(
    tmp_path: Path, engine_of: EngineOf, tiny_model: Path, release: str
) -> None:
    """Each reply opens with reasoning the agent does not send back, so every next prompt departs from what the
    server holds right after the previous prompt. A hybrid then reuses only up to a context checkpoint: with
    llama-server's defaults the server's own log shows the restore and cache_n stops at the checkpoint (at most
    what the step shares); with checkpoints off it re-prefills the whole conversation every step. The policy
    model of that release's server predicts every step's reuse, both ways."""
    settings, engine = load_settings(), engine_of(release)
    trace = synth_conversation(SynthConversation(steps=4, reasoning_words=30), tmp_path / "c.jsonl")
    steps = derived(engine, tiny_model, trace)
    assert all(st.diverged and st.at_message == len(steps[k].messages) for k, st in enumerate(steps[1:]))
    extra = ["--mmproj", str(resolve_projector(settings))]
    server = todays_server(engine)
    with LlamaServer(engine, tiny_model, server, tmp_path / "today.log", extra_args=extra) as srv:
        today = replay_today(srv, steps)
    for st, t in zip(steps[1:], today[1:], strict=True):
        assert t.ok and t.checkpoint_restore and t.cache_n is not None, t
        assert 0 < t.cache_n <= st.common and t.prompt_n == st.cells - t.cache_n, (st.step, st.common, t)
    assert predicted_cache_n(engine, tiny_model, steps) == [t.cache_n for t in today]
    off = todays_server(engine, checkpoints=0)
    with LlamaServer(engine, tiny_model, off, tmp_path / "off.log", extra_args=extra) as srv:
        none = replay_today(srv, steps)
    assert [t.cache_n for t in none] == [0] * len(steps) and not any(t.checkpoint_restore for t in none)
    assert predicted_cache_n(engine, tiny_model, steps, checkpoints=0) == [0] * len(steps)


def test_a_conversation_replays_in_three_arms_with_intervals(tmp_path: Path) -> None:
    """`lab trace replay CONVERSATION`: every step in every arm and rep, the contract held (the optimum
    fabricated its prefix and prefilled only the new part, no cache prefilled it all), today's reuse from the
    server's own numbers, per-task totals and the realised share with intervals; then the catalog reads it."""
    trace = synth_conversation(SynthConversation(steps=5), tmp_path / "c.jsonl")
    runs = tmp_path / "runs"
    r = subprocess.run(
        [LAB, "trace", "replay", str(trace), "--reps", "2", "--runs-dir", str(runs)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    assert run.ready and run.manifest().experiment == "conversation"
    samples = run.read(CONVERSATION_SAMPLES)
    assert sorted((s.step, s.rep, s.arm) for s in samples) == sorted(
        (k, rep, a) for k in range(5) for rep in range(2) for a in ("today", "optimum", "no_cache")
    )
    assert all(s.ok for s in samples), [s.reason for s in samples if not s.ok]
    steps = {s.step: s for s in run.read(CONVERSATION_STEPS)}
    for s in samples:
        st = steps[s.step]
        assert s.prompt_n is not None and s.cache_n is not None
        if s.arm == "no_cache":
            assert (s.cache_n, s.prompt_n) == (0, st.prompt_cells)
        elif s.arm == "optimum":
            assert s.prompt_n == st.new and abs(s.cache_n - st.common) <= 2 * st.images  # image markers as text
            assert s.n_out == st.reply_tokens and s.decode_ms is not None  # the reply decoded at its depth
        else:
            assert s.prompt_n + s.cache_n == st.prompt_cells and s.cache_n <= st.common
    assert steps[4].diverged_at == 1 and all(steps[k].diverged_at is None for k in (1, 2, 3))
    assert steps[4].cause == "image evicted" and "msg 1: image evicted" in r.stdout  # why, in the step table
    (cause,) = run.read(CONVERSATION_CAUSES)  # and what it cost in each arm
    assert (cause.cause, cause.departures) == ("image evicted", 1) and cause.today_extra_s is not None
    whole = steps[4].no_cache_ms
    assert (
        cause.no_cache_s is not None
        and whole is not None
        and cause.no_cache_s.value == pytest.approx(whole.value / 1e3)
    )
    # each rep ran in servers of its own (the controls' one and today's): the intervals resample processes
    assert all(s.process == s.rep for s in samples)
    assert (run.path / "logs" / "server.log").read_text().count("server is listening") == 2
    for st in steps.values():
        for iv in (st.today_ms, st.optimum_ms, st.no_cache_ms):
            assert iv is not None and iv.n == 2 and iv.lo <= iv.value <= iv.hi and iv.processes == 2
        assert st.order in ("holds", "violated")
    (task,) = run.read(CONVERSATION_TASKS)
    assert task.n_steps == 5 and task.realised is not None and task.today_s is not None
    assert task.decode_s is not None and task.tool_s == pytest.approx(sum(st.tool_s or 0 for st in steps.values()))
    assert "share of the optimum's saving" in r.stdout
    ingest = subprocess.run(
        [LAB, "catalog", "ingest", "--runs-dir", str(runs), "--catalog-dir", str(tmp_path / "catalog")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ingest.returncode == 0, ingest.stderr
    assert (tmp_path / "catalog" / "tables" / "conversation_steps.parquet").exists()
    headline = subprocess.run(
        [LAB, "catalog", "headline", "--catalog-dir", str(tmp_path / "catalog")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert headline.returncode == 0 and "conversation task000 (5 steps), prefill no cache" in headline.stdout
    out = tmp_path / "reports"
    report = subprocess.run(
        [LAB, "report", "--catalog-dir", str(tmp_path / "catalog"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr
    svg = (out / "conversation.svg").read_text()  # one panel per task, titled with its totals; the divergence, why
    assert "task000: prefill s, no cache" in svg and "of the saving" in svg and "image evicted" in svg


@pytest.mark.parametrize("swa_full", [False, True], ids=["window", "swa-full"])
def test_a_sliding_window_conversation_says_what_today_s_window_kept(
    tmp_path: Path, iswa_model: Path, swa_full: bool
) -> None:
    """The tiny gemma3 (a window of 128) replays a text-only conversation in all three arms; per step the lab
    predicts from the policy model whether the step departs beyond what today's window cache keeps, and
    today's server's own log agrees (a departure restores a context checkpoint or re-processes the whole
    prompt, nothing else does); with --swa-full
    (conversation.swa_full) nothing departs, and the run records what each mode's caches hold."""
    trace = synth_conversation(SynthConversation(steps=5, reasoning_words=700), tmp_path / "c.jsonl", shots=False)
    runs = tmp_path / "runs"
    env = {**os.environ, "COLUMNS": "200", "LAB_CONVERSATION__SWA_FULL": "true" if swa_full else "false"}
    cmd = [LAB, "trace", "replay", str(trace), "--reps", "1", "--model", str(iswa_model), "--runs-dir", str(runs)]
    r = subprocess.run(
        [*cmd, "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert r.returncode == 0, r.stderr + r.stdout
    out = json.loads(r.stdout)  # --json: the records the tables are printed from, and the run folder
    run = RunFolder.open(Path(out["run"]))
    samples = run.read(CONVERSATION_SAMPLES)
    assert len(samples) == 5 * 3 and all(s.ok for s in samples), [s.reason for s in samples if not s.ok]
    steps = run.read(CONVERSATION_STEPS)
    assert [ConversationStepResult.model_validate(x) for x in out["steps"]] == steps and len(out["tasks"]) == 1
    assert steps[0].window_departure is None and all(st.window_departure is not None for st in steps[1:])
    for st in steps[1:]:  # the prediction, held by the log: a departure needs a checkpoint, or all of it again
        assert st.full_reprocesses + st.checkpoint_restores == int(bool(st.window_departure)), st
    # the policy model predicts what today's server reused and what it logged holding
    assert [st.predicted_cache_n for st in steps] == [st.today_cache_n for st in steps]
    for logged, predicted in [(st.checkpoint_mib, st.predicted_checkpoint_mib) for st in steps] + [
        (st.ram_cache_mib, st.predicted_ram_cache_mib) for st in steps
    ]:
        assert (logged is None) == (predicted is None) and (logged is None or predicted == pytest.approx(logged, 0.1))
    departures = [st.step for st in steps if st.window_departure]
    assert departures if not swa_full else not departures  # the agent drops its long reasoning: beyond the window
    today = run.manifest().results["today_server"]
    assert today["swa_full"] is swa_full and today["kv_mib"] > 0
    assert today["swa_cells"] == (today["kv_cells"] if swa_full else 768)  # pad(128 + 512, 256)


def test_an_interrupted_conversation_replay_resumes_with_its_whole_reps(tmp_path: Path) -> None:
    """SIGTERM once the first rep is written: the run is incomplete; --resume measures only the missing reps, so
    no rep is measured twice and none is lost."""
    trace = synth_conversation(SynthConversation(steps=3, shot_every=9), tmp_path / "c.jsonl")
    runs = tmp_path / "runs"
    cmd = [LAB, "trace", "replay", str(trace), "--reps", "3", "--runs-dir", str(runs)]
    interrupt_after_first_row(cmd, f"*/raw/{CONVERSATION_SAMPLES.file}", runs, tmp_path, timeout=600)
    (folder,) = [p for p in runs.iterdir() if p.is_dir()]
    run = RunFolder.open(folder)
    assert run.manifest().status == "incomplete" and not run.ready
    first = {(s.rep, s.step, s.arm): s.t_utc for s in run.read(CONVERSATION_SAMPLES)}
    assert first and {rep for rep, _, _ in first} < {0, 1, 2}
    resume = [LAB, "trace", "replay", "--resume", folder.name, "--runs-dir", str(runs)]
    r = subprocess.run(resume, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr + r.stdout
    assert run.ready and run.manifest().status == "complete"
    after = run.read(CONVERSATION_SAMPLES)
    assert sorted((s.rep, s.step, s.arm) for s in after) == sorted(
        (rep, k, a) for rep in range(3) for k in range(3) for a in ("today", "optimum", "no_cache")
    )
    assert all(first[(s.rep, s.step, s.arm)] == s.t_utc for s in after if (s.rep, s.step, s.arm) in first)


def test_today_s_server_can_be_a_binary_of_the_user_s_own(tmp_path: Path, engine_of: EngineOf) -> None:
    """--today-server: another llama-server (here the newest release's build) replays today's arm while the lab's
    arms run the pin's patched build; the run records that server's version and path, its defaults are that
    version's and so are the rules its reuse is predicted with. A path that is no executable is one line, and
    nothing is created."""
    latest = engine_of("latest")
    trace = synth_conversation(SynthConversation(steps=4, reasoning_words=30), tmp_path / "c.jsonl")
    runs = tmp_path / "runs"
    cmd = [LAB, "trace", "replay", str(trace), "--reps", "1", "--arms", "today,optimum", "--runs-dir", str(runs)]
    r = subprocess.run(
        [*cmd, "--engine", "pin", "--today-server", str(latest.server), "--json"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(json.loads(r.stdout)["run"]))
    m = run.manifest()
    assert m.engine["release"] == "pin" and "465b1f0e7" in m.engine["source"]["commit"]  # the lab's own arms
    today = m.results["today_server"]
    assert "0c1e57098" in today["version"] and today["binary"] == str(latest.server)
    assert today["setting"]["checkpoint_min_step"] == 8192  # that server's own default
    samples = run.read(CONVERSATION_SAMPLES)
    assert all(s.ok for s in samples) and {s.arm for s in samples} == {"today", "optimum"}
    steps = run.read(CONVERSATION_STEPS)
    assert [st.predicted_cache_n for st in steps] == [st.today_cache_n for st in steps]
    bad = subprocess.run([*cmd, "--today-server", str(tmp_path / "nope")], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "not an executable file" in bad.stderr.strip().splitlines()[-1], bad.stderr
    assert len(list(runs.iterdir())) == 1


def test_derive_says_what_reasoning_preserve_does_to_each_departure(
    tmp_path: Path, engine_of: EngineOf, tiny_model: Path
) -> None:
    """An agent that sends its reasoning back (`reasoning_content`) to a template that keeps it only when asked:
    on the newest server (--reasoning-preserve on by default) every step extends the one before; without it each
    departs at the previous reply. On the pin (no such flag) nothing is said."""
    trace, template = thinking_conversation(tmp_path)
    settings = load_settings(server={"extra_args": ["--chat-template-file", str(template)]})
    conversation = load_conversation(trace)
    steps = derive_tasks(settings, engine_of("latest"), tiny_model, conversation, str(trace)).tasks["t"]
    for st in steps[1:]:
        assert not st.diverged and st.common == st.previous, st  # the reasoning kept: the reply is reused whole
        assert st.common_unpreserved is not None and st.common_unpreserved < st.common, st
        assert st.preserve_effect == f"{st.common_unpreserved} without, {st.common} with"
    pin = derive_tasks(settings, engine_of("pin"), tiny_model, conversation, str(trace)).tasks["t"]
    assert all(st.common_unpreserved is None and st.preserve_effect == "-" for st in pin)
