"""Conversation traces before anything runs: the synthetic one evicts as it says, and a bad trace is one line
naming the step (not chat JSON, an image that does not load) while a good one loads with its images inlined."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.conversation.load import ConversationError, images, is_conversation, load_conversation
from lab.conversation.shapes import load_trace
from lab.conversation.synth import EVICTED_SHOT, SynthConversation, synth_conversation
from lab.core.errors import LabError
from lab.engine.png import make_png

pytestmark = pytest.mark.fast


def lines(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_the_synthetic_conversation_extends_and_evicts(tmp_path: Path) -> None:
    out = synth_conversation(SynthConversation(steps=8), tmp_path / "c.jsonl")
    again = synth_conversation(SynthConversation(steps=8), tmp_path / "d.jsonl").read_text()
    assert out.read_text() == again.replace("d_screenshots", "c_screenshots")  # deterministic per seed
    assert is_conversation(out)
    steps = load_conversation(out)["task000"]
    assert [s.step for s in steps] == list(range(8))
    for prev, now in itertools.pairwise(steps):  # each request repeats the last one and its reply...
        held = [*prev.request["messages"], prev.reply]
        changed = [i for i, (a, b) in enumerate(zip(held, now.request["messages"], strict=False)) if a != b]
        if now.step == 4:  # ...except where the agent evicted: the two oldest screenshots leave the context
            assert changed and changed[0] == 1
            assert EVICTED_SHOT in json.dumps(now.request["messages"][1])
        elif now.step in (1, 2, 3):
            assert not changed
    shots = [p for s in steps for m in s.request["messages"] for p in images(m)]
    assert shots and all(p["image_url"]["url"].startswith("data:image/png;base64,") for p in shots)
    assert (tmp_path / "c_screenshots" / "task000_step0.png").exists()  # written as files, read back inline


def shot(url: str) -> list[dict]:  # type: ignore[type-arg]
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]


def step(messages: list[dict], k: int = 0) -> str:  # type: ignore[type-arg]
    return json.dumps({"task_id": "t", "step": k, "request": {"messages": messages}})


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("{not json", "bad JSON row: Expecting property name"),
        (json.dumps({"task_id": "t", "step": 0, "request": {}}), "non-empty `messages` list"),
        (step([{"role": "bot", "content": "hi"}]), "messages[0]: role"),
        (
            step(shot("gone.png"), 1),
            "does not load",
        ),
        (
            step(shot("cut.png"), 1),
            "does not load",
        ),
        (
            step(shot("https://x/y.png"), 1),
            "offline",
        ),
    ],
)
def test_a_bad_step_is_one_line_naming_it(tmp_path: Path, line: str, needle: str) -> None:
    (tmp_path / "cut.png").write_bytes(make_png(64, 32)[:-30])  # a truncated PNG: its header reads, its data not
    trace = tmp_path / "t.jsonl"
    trace.write_text(step([{"role": "user", "content": "fine"}]) + "\n" + line + "\n")
    with pytest.raises(ConversationError) as e:
        load_conversation(trace)
    msg = str(e.value)
    assert msg.startswith(f"{trace}:2") and needle in msg and "\n" not in msg, msg


def test_a_missing_trace_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConversationError, match=r"nope.jsonl: no such conversation trace$"):
        load_conversation(tmp_path / "nope.jsonl")


def test_a_duplicate_step_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(step([{"role": "user", "content": "a"}]) + "\n" + step([{"role": "user", "content": "b"}]) + "\n")
    with pytest.raises(ConversationError, match=r"t.jsonl:2: task 't' step 0: a duplicate step"):
        load_conversation(trace)


def test_a_text_only_conversation_for_a_model_without_a_projector(tmp_path: Path) -> None:
    lab = str(Path(sys.executable).parent / "lab")
    out = tmp_path / "t.jsonl"
    r = subprocess.run([lab, "trace", "synth", "--conversation", "--text-only", "--steps", "4", "-o", str(out)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    steps = load_conversation(out)["task000"]
    assert len(steps) == 4 and not [p for s in steps for m in s.request["messages"] for p in images(m)]
    assert not (tmp_path / "t_screenshots").exists()
    r = subprocess.run([lab, "trace", "synth", "--text-only", "-o", str(tmp_path / "x.jsonl")],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "--text-only: only with --conversation" in r.stderr, r.stderr
    assert not (tmp_path / "x.jsonl").exists()


DEEP = b"[" * 100_000 + b"]" * 100_000
FINE = step([{"role": "user", "content": "fine"}]).encode()


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (DEEP + b"\n", 1),
        (FINE + b"\n" + DEEP + b"\n", 2),
        (b'{"task_id": "t\xff", "step": 0}\n', 1),
        (FINE + b"\n\n" + FINE[:-2] + b'\xff"}\n', 3),
    ],
    ids=["deep-first", "deep-second", "not-utf8-first", "not-utf8-third"],
)
def test_a_line_no_parser_reads_is_one_error_naming_file_and_line(tmp_path: Path, data: bytes, line: int) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(data)
    load = load_conversation if is_conversation(trace) else load_trace  # as the replay and tune choose
    with pytest.raises(ConversationError, match=rf"^{trace}:{line}: ") as e:
        load(trace)
    assert "\n" not in str(e.value)


def test_a_torn_tail_no_parser_reads_is_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(FINE + b"\n" + DEEP)
    assert [s.step for s in load_conversation(trace)["t"]] == [0]
    err = capsys.readouterr().err
    assert f"{trace}: its last line was cut mid-write ({len(DEEP)} bytes, no newline): left out" in err


def test_a_trace_over_the_bound_is_refused_unread(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(FINE + b"\n")
    with trace.open("r+b") as fh:
        fh.truncate(513 << 20)  # sparse: no disk spent
    for read in (is_conversation, load_conversation):
        with pytest.raises(LabError, match=rf"^{trace}: .*over the limit of 512 MiB"):
            read(trace)
