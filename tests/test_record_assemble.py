"""The recorder's pure parts: a reply assembled from constructed stream chunks, and the trace's step
numbering and tool times (no server; `test_record.py` runs the real thing)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from lab.conversation.assemble import StreamAssembler, assemble, reply_of_body
from lab.conversation.load import load_conversation
from lab.conversation.log import ConversationLog, RecordError
from lab.conversation.record import upstream_url
from lab.core.schemas import ConversationStep

pytestmark = pytest.mark.fast


def sse(*chunks: dict[str, Any] | str) -> bytes:
    return b"".join(f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n".encode() for c in chunks)


def delta(d: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": None}], **extra}


def split_everywhere(raw: bytes) -> list[list[bytes]]:
    """The stream cut at every byte (inside lines, events and UTF-8 characters), and one byte at a time."""
    return [[raw[:i], raw[i:]] for i in range(len(raw) + 1)] + [[raw[i : i + 1] for i in range(len(raw))]]


def test_content_is_concatenated_however_the_bytes_arrive() -> None:
    raw = sse(
        delta({"role": "assistant", "content": None}),
        delta({"content": "Grüße"}),
        delta({"content": ", 世界"}),
        delta({}, usage=None),
        {"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 19, "completion_tokens": 3}},
        "[DONE]",
    )
    for parts in split_everywhere(raw):
        reply = assemble(parts)
        assert reply.message == {"role": "assistant", "content": "Grüße, 世界"}
        assert (reply.prompt_tokens, reply.completion_tokens) == (19, 3)


def test_tool_calls_are_merged_by_index() -> None:
    call = {"type": "function", "function": {"name": "ls", "arguments": ""}}
    raw = sse(
        delta({"role": "assistant", "content": None, "tool_calls": [{"index": 0, "id": "call_a", **call}]}),
        delta({"tool_calls": [{"index": 1, "id": "call_b", **call, "function": {"name": "cat", "arguments": ""}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": '}}]}),
        delta({"tool_calls": [{"index": 1, "function": {"arguments": '{"file": "a"}'}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '"/tmp"}'}}]}),
        delta({}, timings={"prompt_n": 40, "predicted_n": 17}),
        "[DONE]",
    )
    reply = assemble([raw])
    assert reply.message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "ls", "arguments": '{"path": "/tmp"}'}},
            {"id": "call_b", "type": "function", "function": {"name": "cat", "arguments": '{"file": "a"}'}},
        ],
    }
    # no usage: llama-server's timings
    assert (reply.prompt_tokens, reply.completion_tokens) == (40, 17)


def test_the_final_usage_wins_over_timings_and_other_choices_are_ignored() -> None:
    other = {"choices": [{"index": 1, "delta": {"content": "not this"}}]}
    final = delta({}, usage={"prompt_tokens": 5, "completion_tokens": 2}, timings={"prompt_n": 4, "predicted_n": 9})
    a = StreamAssembler()
    a.feed(b": keep-alive comment\r\nevent: message\r\n")
    a.feed(sse(delta({"content": "ok"}), other, "{torn json", final).replace(b"\n", b"\r\n"))
    a.close()  # no [DONE], and the last event had its blank line
    assert not a.done
    reply = a.reply()
    assert reply.message == {"role": "assistant", "content": "ok"}
    assert (reply.prompt_tokens, reply.completion_tokens) == (5, 2)


def test_a_stream_without_deltas_or_counts_has_no_reply() -> None:
    reply = assemble([sse({"error": {"message": "boom"}}, "[DONE]")])
    assert reply.message is None and reply.prompt_tokens is None and reply.completion_tokens is None
    # the last event need not end with a blank line
    assert assemble([b'data: {"choices": [{"index": 0, "delta": {"content": "x"}}]}']).message == {
        "role": "assistant",
        "content": "x",
    }


def test_a_json_body_gives_choice_zero_and_its_usage() -> None:
    message = {"role": "assistant", "content": "hi", "tool_calls": []}
    body = {"choices": [{"index": 0, "message": message}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    reply = reply_of_body(body)
    assert (reply.message, reply.prompt_tokens, reply.completion_tokens) == (message, 3, 1)
    reply = reply_of_body({"choices": [{"message": message}], "timings": {"prompt_n": 7, "predicted_n": 2}})
    assert (reply.prompt_tokens, reply.completion_tokens) == (7, 2)
    assert reply_of_body({"error": "x"}).message is None and reply_of_body(None).message is None


def row(task: str, step: int) -> ConversationStep:
    return ConversationStep(task_id=task, step=step, request={"messages": [{"role": "user", "content": "q"}]})


def written(path: Path) -> list[tuple[str, int, float | None]]:
    """The trace's lines in order: a step as (task, step, None), its tool time as (task, step, tool_s)."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [(x["task_id"], x["step"], None if "request" in x else x["tool_s"]) for x in lines]


def test_a_step_is_written_at_once_and_its_tool_time_when_the_next_request_comes(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "trace.jsonl"
    log = ConversationLog.open(path)
    assert log.begin("a", now=10.0) == 0
    log.finish(row("a", 0), ended=11.0)
    assert written(path) == [("a", 0, None)]  # on disk as soon as the agent has its reply
    assert log.begin("b", now=11.5) == 0  # another task's request changes nothing for task a
    assert log.begin("a", now=13.5) == 1
    assert written(path) == [("a", 0, None), ("a", 0, 2.5)]
    log.abandon("a", 1)  # the upstream failed: nothing written, the retry gets the same number
    assert log.begin("a", now=14.0) == 1
    log.finish(row("a", 1), ended=15.0)
    log.finish(row("b", 0), ended=15.0)
    assert written(path)[2:] == [("a", 1, None), ("b", 0, None)]  # the last steps: no tool time (yet)
    assert log.written == 3
    tasks = load_conversation(path)
    assert [(s.step, s.tool_s) for s in tasks["a"]] == [(0, 2.5), (1, None)]


def test_overlapping_requests_keep_their_arrival_numbers(tmp_path: Path) -> None:
    log = ConversationLog.open(tmp_path / "t.jsonl")
    first, second = log.begin("a", now=1.0), log.begin("a", now=1.1)
    log.abandon("a", first)  # a later request took a number: no gap is closed, none reused
    assert (first, second, log.begin("a", now=1.2)) == (0, 1, 2)
    log.finish(row("a", 1), ended=2.0)  # step 2 arrived before step 1 ended: the agent did not wait for it
    log.finish(row("a", 2), ended=2.5)
    assert written(tmp_path / "t.jsonl") == [("a", 1, None), ("a", 1, 0.0), ("a", 2, None)]


def test_an_existing_trace_needs_append_and_must_be_a_conversation(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(row("a", 0).model_dump_json() + "\n" + row("a", 4).model_dump_json() + "\n")
    with pytest.raises(RecordError, match=r"t\.jsonl exists: pass --append"):
        ConversationLog.open(path)
    log = ConversationLog.open(path, append=True)
    assert (log.begin("a", now=0.0), log.begin("b", now=0.0)) == (5, 0)
    path.write_text('{"task_id": "t", "step": 0, "L": 5, "new_text": "x"}\n')
    with pytest.raises(RecordError, match=r"t\.jsonl:1: not a conversation step: request"):
        ConversationLog.open(path, append=True)


@pytest.mark.parametrize(
    ("base", "path", "query", "url"),
    [
        ("http://h:1", "/v1/chat/completions", "", "http://h:1/v1/chat/completions"),
        ("http://h:1/", "/v1/models", "a=1", "http://h:1/v1/models?a=1"),
        ("http://h:1/v1", "/v1/chat/completions", "", "http://h:1/v1/chat/completions"),
        ("http://h:1/v1/", "/health", "", "http://h:1/v1/health"),
    ],
)
def test_the_upstream_url(base: str, path: str, query: str, url: str) -> None:
    assert upstream_url(base, path, query) == url


def test_an_unterminated_line_is_assembled_in_linear_time_and_bounded() -> None:
    """A long line arriving in small pieces costs its length, not its length squared: four times the bytes take
    about four times as long (a copy of the whole line per piece would take sixteen). Best of three each."""

    def feed_time(n: int) -> float:
        best = float("inf")
        for _ in range(3):
            a, piece = StreamAssembler(), b"x" * 256
            t0 = time.perf_counter()
            for _ in range(n // 256):
                a.feed(piece)
            a.feed(b"\n\n")
            best = min(best, time.perf_counter() - t0)
        return best

    small, large = feed_time(256 << 10), feed_time(1 << 20)
    assert large / small < 10, f"4x the bytes took {large / small:.1f}x as long"
    bounded = StreamAssembler(limit=1000)
    bounded.feed(sse(delta({"content": "x" * 2000})))
    assert bounded.overflow and bounded.reply().message is None and not bounded._partial
