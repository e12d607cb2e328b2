"""The recorder's pure parts: a reply assembled from constructed stream chunks, and the trace's step
numbering and tool times (no server; `test_record.py` runs the real thing)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from lab.conversation.assemble import StreamAssembler, assemble, reply_of_body
from lab.conversation.exchange import side_task, upstream_url
from lab.conversation.load import load_conversation
from lab.conversation.log import ConversationLog, RecordError
from lab.core.errors import LabError
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
    a.feed(sse(delta({"content": "ok"}), other, final).replace(b"\n", b"\r\n"))
    a.close()  # no [DONE], and the last event had its blank line
    assert not a.done
    reply = a.reply()
    assert reply.message == {"role": "assistant", "content": "ok"}
    assert (reply.prompt_tokens, reply.completion_tokens) == (5, 2)
    assert a.flaw is None


def test_a_stream_without_deltas_or_counts_has_no_reply() -> None:
    reply = assemble([sse({"error": {"message": "boom"}}, "[DONE]")])
    assert reply.message is None and reply.prompt_tokens is None and reply.completion_tokens is None
    # an event ends at a blank line: one the stream ends before is never dispatched (the SSE spec; the OpenAI SDK)
    for tail in (b"", b"\n"):
        assert assemble([b'data: {"choices": [{"index": 0, "delta": {"content": "x"}}]}' + tail]).message is None


def test_a_json_body_gives_choice_zero_and_its_usage() -> None:
    message = {"role": "assistant", "content": "hi", "tool_calls": []}
    body = {"choices": [{"index": 0, "message": message}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    reply = reply_of_body(body)
    assert (reply.message, reply.prompt_tokens, reply.completion_tokens) == (message, 3, 1)
    reply = reply_of_body({"choices": [{"message": message}], "timings": {"prompt_n": 7, "predicted_n": 2}})
    assert (reply.prompt_tokens, reply.completion_tokens) == (7, 2)
    assert reply_of_body({"error": "x"}).message is None and reply_of_body(None).message is None


def test_a_reply_is_whole_only_once_choice_zero_has_its_finish_reason() -> None:
    message = {"role": "assistant", "content": "hi"}
    assert reply_of_body({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}).finished
    for choice in ({"finish_reason": None}, {}, {"finish_reason": ""}, {"finish_reason": 1}, {"index": 1}):
        assert not reply_of_body({"choices": [{"message": message, **choice}]}).finished, choice
    whole = sse(delta({"content": "hi"}), {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    assert assemble([whole]).finished and assemble([whole + sse("[DONE]")]).finished
    assert not assemble([sse(delta({"content": "hi"}), "[DONE]")]).finished  # [DONE] ends the stream, not the reply
    other = {"choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}]}
    assert not assemble([sse(delta({"content": "hi"}), other)]).finished


def flaw_of(*raw: bytes) -> str | None:
    a = StreamAssembler()
    for r in raw:
        a.feed(r)
    a.close()
    return a.flaw


def call(index: Any, **extra: Any) -> dict[str, Any]:
    return delta({"tool_calls": [{"index": index, "id": "c", "function": {"name": "f"}, **extra}]})


@pytest.mark.parametrize(
    ("raw", "flaw"),
    [
        (sse(delta({"content": "a"}), "{torn", delta({"content": "b"})), "an event that does not parse (Expecting"),
        (sse(delta({"content": "a"}), "[1, 2]"), "an event that is not a JSON object"),
        (b"data:\n\n", "an event that does not parse"),  # the OpenAI SDK parses an empty data field, and fails
        (b'data: {"n": ' + b"1" * 5000 + b"}\n\n", "an event that does not parse (Exceeds the limit"),
        (b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n", "an event that does not parse (nested too deep)"),
        (sse(delta({"a": json.loads('{"a": ' * 100 + "{}" + "}" * 100)})), "a delta nested too deep"),
        (b'data: {"content": "\xff"}\n\n', "bytes that are not UTF-8"),
        (b'data: {"content": "\xc3', "bytes that are not UTF-8"),  # cut inside a character
        (sse(call(-1)), "a tool call index out of range (-1)"),
        (sse(call(128)), "a tool call index out of range (128)"),
        (sse(call(2_000_000_000)), "a tool call index out of range (2000000000)"),
        (sse(call(1.0)), "a tool call index out of range (1.0)"),
        (sse(*[delta({"tool_calls": [{"id": f"c{i}"}]}) for i in range(129)]), "a tool call index out of range (128)"),
    ],
    ids=[
        "torn",
        "not-an-object",
        "empty-data",
        "long-number",
        "deep",
        "deep-delta",
        "not-utf8",
        "cut-utf8",
        "negative-index",
        "index-128",
        "index-2e9",
        "float-index",
        "129-calls",
    ],
)
def test_a_stream_that_does_not_parse_is_flawed_and_never_raises(raw: bytes, flaw: str) -> None:
    for parts in ([raw], [raw[i : i + 7] for i in range(0, len(raw), 7)]):
        got = flaw_of(*parts)
        assert got is not None and got.startswith(flaw), got


def test_nothing_after_done_is_read_and_the_first_flaw_stays() -> None:
    """The OpenAI SDK stops reading at [DONE]: garbage after it is no flaw."""
    a = StreamAssembler()
    a.feed(sse({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}))
    a.feed(sse("[DONE]") + b"data: garbage\xff\n\n")
    a.close()
    assert (a.flaw, a.finished, a.reply().message) == (None, True, {"role": "assistant", "content": "ok"})
    assert flaw_of(sse(call(-1), "{torn")) == "a tool call index out of range (-1)"


def test_lines_end_at_cr_lf_or_crlf_however_split() -> None:
    """The SSE spec's three line ends, as the OpenAI SDK reads them: a CRLF split between two reads is one."""
    events = [delta({"content": "a"}), delta({"content": "b"}), "[DONE]"]
    for end in (b"\r", b"\r\n", b"\n"):
        raw = sse(*events).replace(b"\n", end)
        for parts in split_everywhere(raw):
            a = StreamAssembler()
            for part in parts:
                a.feed(part)
            a.close()
            assert (a.flaw, a.done, a.reply().message) == (None, True, {"role": "assistant", "content": "ab"}), parts
    a = StreamAssembler()
    a.feed(b'data: {"choices": [{"index": 0,\r')
    a.feed(b'\ndata: "delta": {"content": "x"}}]}\r\n\r\n')  # one event, two data lines
    a.close()
    assert (a.flaw, a.reply().message) == (None, {"role": "assistant", "content": "x"})


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


def test_many_deltas_are_assembled_in_linear_time() -> None:
    """A long reply in many deltas costs its length, not its length squared: four times the deltas take about
    four times as long (a copy of the content so far per delta would take sixteen). Best of three each."""

    def feed_time(n: int) -> float:
        one = sse(delta({"content": "x" * 256}))
        best = float("inf")
        for _ in range(3):
            a = StreamAssembler()
            t0 = time.perf_counter()
            for _ in range(n):
                a.feed(one)
            reply = a.reply()
            best = min(best, time.perf_counter() - t0)
        assert reply.message is not None and len(reply.message["content"]) == 256 * n
        return best

    small, large = feed_time(2500), feed_time(10_000)
    assert large / small < 10, f"4x the deltas took {large / small:.1f}x as long"


def test_a_task_busy_with_a_request_gets_the_first_free_side_task() -> None:
    assert side_task("a", set()) == "a"
    assert side_task("a", {"b", "a~side1"}) == "a"
    assert side_task("a", {"a"}) == "a~side1"
    assert side_task("a", {"a", "a~side1", "a~side3"}) == "a~side2"


def test_a_step_that_cannot_be_written_leaves_the_trace_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    log = ConversationLog.open(path)
    assert log.begin("a", now=0.0) == 0
    bad = row("a", 0)
    bad.reply = {"role": "assistant", "content": "\ud800"}
    with pytest.raises(ValueError, match="surrogates not allowed"):
        log.finish(bad, ended=1.0)
    assert not path.exists()  # not even an empty trace
    log.abandon("a", 0)
    assert log.begin("a", now=0.0) == 0
    log.finish(row("a", 0), ended=1.0)
    before = path.read_bytes()
    assert log.begin("a", now=2.0) == 1
    bad = row("a", 1)
    bad.reply = {"role": "assistant", "content": "\ud800"}
    with pytest.raises(ValueError, match="surrogates not allowed"):
        log.finish(bad, ended=3.0)
    assert path.read_bytes() == before + b'{"task_id":"a","step":0,"tool_s":1.0}\n'
    assert log.written == 1


def test_a_side_task_gets_no_tool_time(tmp_path: Path) -> None:
    """A side task's requests are no loop of the agent's: the time between them is no tool time."""
    path = tmp_path / "t.jsonl"
    log = ConversationLog.open(path)
    assert log.begin("a~side1", now=0.0) == 0
    log.finish(row("a~side1", 0), ended=1.0, loop=False)
    assert log.begin("a~side1", now=5.0) == 1
    assert written(path) == [("a~side1", 0, None)]


def test_append_ends_a_whole_last_line_that_lacks_its_newline(tmp_path: Path) -> None:
    """A last line that is whole but for its newline is kept and ended: the next row is a line of its own."""
    path = tmp_path / "t.jsonl"
    path.write_text(row("a", 0).model_dump_json() + "\n" + row("a", 1).model_dump_json())
    log = ConversationLog.open(path, append=True)
    assert log.begin("a", now=0.0) == 2
    log.finish(row("a", 2), ended=1.0)
    assert written(path) == [("a", 0, None), ("a", 1, None), ("a", 2, None)]
    assert [s.step for s in load_conversation(path)["a"]] == [0, 1, 2]
    assert not list(tmp_path.glob("t.jsonl.torn-*"))


def test_appends_within_a_second_each_set_their_torn_tail_aside(tmp_path: Path) -> None:
    """Three appends within a second (two of them share one at least), each after a tear: each tail in a file of
    its own, the trace its whole lines."""
    path = tmp_path / "t.jsonl"
    whole = row("a", 0).model_dump_json() + "\n"
    cuts = ['{"task_id": "a", "st', '{"task_id": "a", "step": 1, "requ', '{"task_id": "a", "step": 1, "request": {']
    t0 = time.monotonic()
    for cut in cuts:
        path.write_text(whole + cut)
        assert ConversationLog.open(path, append=True).begin("a", now=0.0) == 1
        assert path.read_text() == whole
    assert time.monotonic() - t0 < 1.0
    assert sorted(p.read_text() for p in tmp_path.glob("t.jsonl.torn-*")) == sorted(cuts)


@pytest.mark.parametrize(
    "bad",
    [b"[" * 100_000 + b"]" * 100_000 + b"\n", b'{"task_id": "a\xff", "step": 1}\n'],
    ids=["deep-nesting", "not-utf8"],
)
def test_append_to_a_trace_with_a_line_no_parser_reads_is_one_line(tmp_path: Path, bad: bytes) -> None:
    path = tmp_path / "t.jsonl"
    before = (row("a", 0).model_dump_json() + "\n").encode() + bad
    path.write_bytes(before)
    with pytest.raises(LabError, match=rf"^{path}:2: ") as e:
        ConversationLog.open(path, append=True)
    assert "\n" not in str(e.value) and path.read_bytes() == before
