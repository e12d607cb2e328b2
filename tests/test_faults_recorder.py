"""The fault suite of `lab trace record`: the real recorder (a `lab` process) between a hostile upstream (a real
aiohttp server that misbehaves on request) and agents that misbehave (real httpx clients). After each case the
trace loads and holds every exchange the agent received whole, counted, and nothing else."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from lab.conversation.load import load_conversation
from lab.engine.server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.faults]  # slow: real processes waiting out real timeouts

LAB = str(Path(sys.executable).parent / "lab")
BEHAVE = "X-Behave"  # which misbehaviour the upstream shows this request (forwarded like any header)
LIMITS = {"LAB_RECORD__MAX_REPLY_MIB": "1", "LAB_RECORD__MAX_REQUEST_MIB": "1", "LAB_RECORD__READ_TIMEOUT_S": "1.5"}


def sse(*events: dict[str, Any] | str) -> list[bytes]:
    return [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events]


def delta(content: str, finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    return {"object": "chat.completion.chunk", "choices": [choice]}


REPLY = "all done"
USAGE = {"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 2}}
STREAM = sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}, delta("all "), delta("done", "stop"))
BODY = {
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 11, "completion_tokens": 2},
}
DONE = sse("[DONE]")[0]


def tool_call(index: int) -> bytes:
    call = {"index": index, "id": "c", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    return sse({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})[0]


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


UNFINISHED = "the stream ended before choice 0's finish_reason"
UNPARSED = "an event that does not parse"
# streams that reach the agent byte for byte and are no complete step: (the upstream's bytes, the warning)
HOSTILE: dict[str, tuple[list[bytes], str]] = {
    "ends-mid-reply": (STREAM[:2], UNFINISHED),  # a clean end, no finish_reason, no [DONE]
    "done-mid-reply": ([*STREAM[:2], DONE], UNFINISHED),  # [DONE] ends the stream, not the reply
    "bad-event": ([*STREAM[:2], *sse("{not json"), *STREAM[2:], DONE], UNPARSED),
    "not-utf8": (
        [*STREAM[:2], b'data: {"choices": [{"index": 0, "delta": {"content": "\xff"}}]}\n\n', *STREAM[2:], DONE],
        "bytes that are not UTF-8",
    ),
    "negative-index": ([*STREAM[:2], tool_call(-1), *STREAM[2:], DONE], "a tool call index out of range (-1)"),
    "long-number": ([*STREAM[:2], *sse('{"n": ' + "1" * 5000 + "}"), *STREAM[2:], DONE], UNPARSED),
    "deep-nesting": ([*STREAM[:2], *sse(deep(100_000)), *STREAM[2:], DONE], UNPARSED),
    "index-2e6": ([*STREAM[:2], tool_call(2_000_000), *STREAM[2:], DONE], "a tool call index out of range (2000000)"),
    "index-2e9": (
        [*STREAM[:2], tool_call(2_000_000_000), *STREAM[2:], DONE],
        "a tool call index out of range (2000000000)",
    ),
    # further endings
    "choice-1-finishes": (
        [*STREAM[:2], *sse({"choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}]}), DONE],
        UNFINISHED,
    ),
    "garbage-after-finish": ([*STREAM, *sse("garbage"), DONE], UNPARSED),  # the agent's SDK fails on it
    "finish-without-blank-line": ([*STREAM[:2], STREAM[2][:-1]], UNFINISHED),  # SSE: an event ends at a blank line
    "reply-nested-400": (
        [*STREAM[:2], *sse({"choices": [{"index": 0, "delta": {"x": json.loads(deep(400))}}]}), *STREAM[2:], DONE],
        "cannot be written",
    ),
    "reply-lone-surrogate": ([*STREAM[:2], *sse(delta("\ud800")), *STREAM[2:], DONE], "cannot be written"),
    "empty-data": ([*STREAM[:2], b"data:\n\n", *STREAM[2:], DONE], UNPARSED),
}
# answers that reach the agent byte for byte and are no step: (the upstream's JSON body, the warning)
HOSTILE_BODIES: dict[str, tuple[bytes, str]] = {
    "body-without-finish": (
        json.dumps({**BODY, "choices": [{**BODY["choices"][0], "finish_reason": None}]}).encode(),
        "no finish_reason for choice 0",
    ),
    "body-without-choices": (json.dumps({**BODY, "choices": []}).encode(), "no assistant message"),
    "body-long-number": (json.dumps(BODY)[:-1].encode() + b', "n": ' + b"1" * 5000 + b"}", "no assistant message"),
    "body-deep-nesting": (
        json.dumps(BODY)[:-1].encode() + b', "n": ' + deep(100_000).encode() + b"}",
        "no assistant message",
    ),
}


@dataclass
class Upstream:
    """A real HTTP server answering chat completions well or, per request (`X-Behave`), badly."""

    url: str
    seen: list[str] = field(default_factory=list)  # the behaviours of the requests that reached it


async def _handle(request: web.Request, up: Upstream) -> web.StreamResponse:
    behave = request.headers.get(BEHAVE, "good")
    up.seen.append(behave)
    await request.read()
    if behave == "good":
        return web.json_response(BODY)
    if behave == "status-500":
        return web.json_response({"error": {"message": "out of memory"}}, status=500)
    if behave == "not-json":
        return web.Response(text="<html>proxy error</html>", content_type="text/html")
    if behave == "huge":  # a 2 MiB body: over the recorder's 1 MiB
        return web.json_response({**BODY, "pad": "x" * (2 << 20)})
    if behave in HOSTILE_BODIES:
        return web.Response(body=HOSTILE_BODIES[behave][0], content_type="application/json")
    if behave in ("silent", "slow"):  # silent: past the read timeout (1.5 s); slow: past the agent's (0.5 s) only
        await asyncio.sleep(3.0 if behave == "silent" else 1.0)
        return web.json_response(BODY)
    kind = "Text/Event-Stream; Charset=UTF-8" if behave == "odd-type" else "text/event-stream"
    out = web.StreamResponse(headers={"Content-Type": kind})
    await out.prepare(request)
    events = {
        **{name: chunks for name, (chunks, _) in HOSTILE.items()},
        "odd-type": [*STREAM, *sse(USAGE, "[DONE]")],
        "garbage-after-done": [*STREAM, DONE, *sse("garbage")],  # the agent's SDK stops reading at [DONE]
        "slow-stream": [*STREAM[:2], b"", *STREAM[2:], DONE],  # b"": a second's pause
        "stream": [*STREAM, *sse(USAGE, "[DONE]")],
        "linger": [*STREAM, *sse(USAGE, "[DONE]")],
        "cut": STREAM[:2],
        "error-event": [*STREAM[:2], *sse({"error": {"message": "the context is full", "code": 500}}, "[DONE]")],
        "silent-stream": STREAM[:1],
        "endless-line": [b"data: " + b"x" * (64 << 10) for _ in range(32)],  # 2 MiB, no newline
    }[behave]
    for e in events:
        await out.write(e)
        await asyncio.sleep(0.01 if e else 1.0)
    if behave == "linger":
        await asyncio.sleep(1.0)  # the stream ends a second after [DONE]
    elif behave == "silent-stream":
        await asyncio.sleep(3.0)
    elif behave == "cut":
        assert request.transport is not None
        request.transport.abort()
        return out
    await out.write_eof()
    return out


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    loop = asyncio.new_event_loop()
    port = free_port()
    up = Upstream(f"http://127.0.0.1:{port}")
    app = web.Application(client_max_size=8 << 20)

    async def handle(request: web.Request) -> web.StreamResponse:
        return await _handle(request, up)

    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield up
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)


@dataclass
class Rec:
    proc: subprocess.Popen[str]
    url: str
    trace: Path

    def stop(self, sig: int = signal.SIGINT) -> tuple[str, str]:
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, err
        return out, err

    def alive(self) -> bool:
        return self.proc.poll() is None


@contextmanager
def recording(upstream: str, trace: Path, *extra: str, host: str = "127.0.0.1") -> Iterator[Rec]:
    port = free_port()
    cmd = [LAB, "trace", "record", "--upstream", upstream, "--listen", str(port), "-o", str(trace), "--host", host]
    env = {**os.environ, **LIMITS}
    proc = subprocess.Popen([*cmd, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert banner.startswith("recording: "), proc.communicate()
        yield Rec(proc, f"http://127.0.0.1:{port}/v1", trace)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def ask(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


def chat(rec: Rec, text: str, behave: str = "good", timeout: float = 30.0, **headers: str) -> httpx.Response:
    with httpx.Client(timeout=timeout) as c:
        return c.post(f"{rec.url}/chat/completions", json=ask(text), headers={BEHAVE: behave, **headers})


def stream(rec: Rec, text: str, behave: str = "stream", hang_up_at_finish: bool = False) -> str:
    """The content the agent read from a stream; with `hang_up_at_finish` it closes once finish_reason arrives."""
    body = {**ask(text), "stream": True}
    content = ""
    with (
        httpx.Client(timeout=30) as c,
        c.stream("POST", f"{rec.url}/chat/completions", json=body, headers={BEHAVE: behave}) as r,
    ):
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                content += choice["delta"].get("content") or ""
                if hang_up_at_finish and choice.get("finish_reason"):
                    return content
    return content


def raw_stream(rec: Rec, text: str, behave: str, **headers: str) -> bytes:
    """Every byte the agent read of a stream (a stream cut short raises)."""
    body = {**ask(text), "stream": True}
    with (
        httpx.Client(timeout=30) as c,
        c.stream("POST", f"{rec.url}/chat/completions", json=body, headers={BEHAVE: behave, **headers}) as r,
    ):
        return b"".join(r.iter_raw())


def tasks(trace: Path) -> dict[str, list[tuple[int, str, str | None, float | None]]]:
    """Per task, (step, the request's text, the reply's content, its tool time) of every step."""
    return {
        task: [(s.step, s.request["messages"][0]["content"], (s.reply or {}).get("content"), s.tool_s) for s in steps]
        for task, steps in load_conversation(trace).items()
    }


def recorded(trace: Path) -> list[tuple[int, str, str | None]]:
    """(step, the request's text, the reply's content) of every step the trace loads with."""
    if not trace.exists():
        return []
    return [
        (s.step, s.request["messages"][0]["content"], (s.reply or {}).get("content"))
        for steps in load_conversation(trace).values()
        for s in steps
    ]


def test_an_agent_that_hangs_up_at_finish_reason_keeps_its_step_once(upstream: Upstream, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        assert stream(rec, "one", "linger", hang_up_at_finish=True) == REPLY
        time.sleep(1.5)  # the upstream's stream ends after the agent left
        assert chat(rec, "two").status_code == 200
        out, err = rec.stop()
    assert out == f"2 steps written to {trace}\n", err
    assert recorded(trace) == [(0, "one", REPLY), (1, "two", REPLY)]


def test_a_stream_the_upstream_cuts_is_not_recorded_and_the_retry_takes_its_step(
    upstream: Upstream, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        with pytest.raises(httpx.RemoteProtocolError):
            stream(rec, "one", "cut")
        assert stream(rec, "one") == REPLY
        _, err = rec.stop()
    assert "upstream cut the stream" in err and "step 0: no reply: not recorded" in err
    assert recorded(trace) == [(0, "one", REPLY)]


def test_a_stream_that_ends_cleanly_after_an_error_event_is_not_a_reply(upstream: Upstream, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        assert stream(rec, "one", "error-event") == "all "  # passed on as it came
        assert stream(rec, "one") == REPLY
        _, err = rec.stop()
    assert "the stream carried an error (the context is full): not recorded" in err
    assert recorded(trace) == [(0, "one", REPLY)]


def test_a_silent_upstream_ends_in_the_read_timeout_and_the_recorder_stays_up(
    upstream: Upstream, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        t0 = time.monotonic()
        r = chat(rec, "one", "silent")
        assert r.status_code == 504 and "sent nothing for 1.5 s" in r.json()["error"]["message"]
        with pytest.raises(httpx.RemoteProtocolError):
            stream(rec, "one", "silent-stream")  # a stream that goes silent is cut, not held open
        assert time.monotonic() - t0 < 2 * 3.0  # neither waited for the upstream's 3 s
        assert stream(rec, "one") == REPLY
        _, err = rec.stop()
    assert "ReadTimeout" in err
    assert recorded(trace) == [(0, "one", REPLY)]


def test_an_oversized_reply_is_a_502_or_passes_unrecorded_and_other_agents_go_on(
    upstream: Upstream, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        r = chat(rec, "one", "huge")
        assert r.status_code == 502 and "record.max_reply_mib (1 MiB)" in r.json()["error"]["message"]
        with httpx.Client(timeout=30) as c:  # a 2 MiB line with no newline: passed on whole, not assembled
            body = {**ask("two"), "stream": True}
            got = c.post(f"{rec.url}/chat/completions", json=body, headers={BEHAVE: "endless-line"})
        assert len(got.content) == 32 * ((64 << 10) + 6)
        assert chat(rec, "three").status_code == 200
        _, err = rec.stop()
    assert "over record.max_reply_mib (1 MiB), passed on: not recorded" in err
    assert recorded(trace) == [(0, "three", REPLY)]


def test_an_oversized_request_is_a_413_and_never_forwarded(upstream: Upstream, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    before = len(upstream.seen)
    with recording(upstream.url, trace) as rec:
        r = chat(rec, "x" * (2 << 20), "good")
        assert r.status_code == 413 and "record.max_request_mib (1 MiB)" in r.json()["error"]["message"]
        assert chat(rec, "small").status_code == 200
        rec.stop()
    assert upstream.seen[before:] == ["good"]
    assert recorded(trace) == [(0, "small", REPLY)]


def test_an_agent_that_gave_up_waiting_leaves_no_step_and_its_retry_is_recorded(
    upstream: Upstream, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        with pytest.raises(httpx.ReadTimeout):
            chat(rec, "one", "slow", timeout=0.5)
        assert chat(rec, "one").status_code == 200  # the retry, while the first is still being answered
        time.sleep(1.5)  # the slow answer arrives for an agent that left
        out, err = rec.stop()
    assert out == f"1 steps written to {trace}\n", err
    assert "the agent hung up before the answer" in err
    assert recorded(trace) == [(1, "one", REPLY)]  # step 0 never reached the agent: not in the trace


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Content-Type": "text/plain"}, 415),  # what a page may POST without a CORS preflight
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
        ({"Content-Type": "application/json", "Origin": "https://evil.example"}, 403),
    ],
)
def test_a_web_page_cannot_add_steps(upstream: Upstream, tmp_path: Path, headers: dict[str, str], status: int) -> None:
    trace = tmp_path / "t.jsonl"
    before = len(upstream.seen)
    with recording(upstream.url, trace) as rec:
        with httpx.Client(timeout=30) as c:
            r = c.post(f"{rec.url}/chat/completions", content=json.dumps(ask("injected")), headers=headers)
        assert r.status_code == status and r.json()["error"]["code"] == status
        assert chat(rec, "mine").status_code == 200
        rec.stop()
    assert upstream.seen[before:] == ["good"]
    assert recorded(trace) == [(0, "mine", REPLY)]


def test_beyond_loopback_it_warns_and_the_token_is_required(upstream: Upstream, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace, host="0.0.0.0") as rec:
        _, err = rec.stop()
    assert "listening on 0.0.0.0: anyone who reaches port" in err
    token = "s3cret-token-0123456789"
    with recording(upstream.url, trace, "--token", token, host="0.0.0.0") as rec:
        assert chat(rec, "anyone").status_code == 401
        assert chat(rec, "wrong", **{"X-Lab-Token": token[:-1]}).status_code == 401
        assert chat(rec, "mine", **{"X-Lab-Token": token}).status_code == 200
        out, err = rec.stop()
    assert token not in out + err and "anyone who reaches" not in err
    assert recorded(trace) == [(0, "mine", REPLY)]


def test_credentials_in_the_upstream_url_are_never_shown(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    upstream = f"http://user:hunter2@127.0.0.1:{free_port()}"  # nothing listens there
    with recording(upstream, trace) as rec:
        r = chat(rec, "one")
        assert r.status_code == 502 and "unreachable" in r.text and "hunter2" not in r.text
        out, err = rec.stop()
    assert "hunter2" not in out + err
    assert "http://***@127.0.0.1" in err


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT], ids=lambda s: s.name)
def test_however_the_recorder_ends_every_complete_exchange_is_in_the_trace(
    upstream: Upstream, tmp_path: Path, sig: int
) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        assert chat(rec, "one").status_code == 200
        time.sleep(0.1)  # the agent's own time: step 0's tool time
        assert stream(rec, "two") == REPLY
        assert chat(rec, "three").status_code == 200  # the final answer: no next request
        rec.proc.send_signal(sig)
        out, err = rec.proc.communicate(timeout=30)
    assert (rec.proc.returncode, out.splitlines()[-1:]) == (
        (-9, []) if sig == signal.SIGKILL else (0, [f"3 steps written to {trace}"])
    ), err
    steps = load_conversation(trace)["task000"]
    assert [(s.step, s.reply and s.reply["content"]) for s in steps] == [(0, REPLY), (1, REPLY), (2, REPLY)]
    tool = [s.tool_s for s in steps]
    assert tool[0] is not None and tool[0] >= 0.1 and tool[1] is not None and tool[2] is None


def test_a_torn_last_line_is_left_out_and_append_sets_it_aside(upstream: Upstream, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        chat(rec, "one")
        chat(rec, "two")
        rec.stop()
    whole = trace.read_bytes()
    trace.write_bytes(whole + b'{"task_id": "task000", "step": 2, "request": {"messages": [{"role": "us')
    assert recorded(trace) == [(0, "one", REPLY), (1, "two", REPLY)]  # with a warning, not a refusal
    with recording(upstream.url, trace, "--append") as rec:
        chat(rec, "three")
        _, err = rec.stop()
    assert "its last line was cut mid-write" in err
    assert recorded(trace) == [(0, "one", REPLY), (1, "two", REPLY), (2, "three", REPLY)]
    (aside,) = tmp_path.glob("t.jsonl.torn-*")
    assert aside.read_bytes().startswith(b'{"task_id": "task000", "step": 2')


def test_an_error_status_and_a_body_that_is_not_json_pass_on_unrecorded(upstream: Upstream, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        r = chat(rec, "one", "status-500")
        assert (r.status_code, r.json()) == (500, {"error": {"message": "out of memory"}})  # unchanged
        r = chat(rec, "one", "not-json")
        assert (r.status_code, r.text) == (200, "<html>proxy error</html>")
        assert chat(rec, "one").status_code == 200
        _, err = rec.stop()
    assert "status 500: not recorded" in err and "no assistant message: not recorded" in err
    assert recorded(trace) == [(0, "one", REPLY)]


def test_an_agent_that_hangs_up_mid_stream_leaves_no_step(upstream: Upstream, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        body = {**ask("one"), "stream": True}
        with (
            httpx.Client(timeout=30) as c,
            c.stream("POST", f"{rec.url}/chat/completions", json=body, headers={BEHAVE: "linger"}) as r,
        ):
            next(r.iter_raw())  # the first chunk, then gone
        time.sleep(1.5)
        assert stream(rec, "one") == REPLY
        _, err = rec.stop()
    assert "the agent hung up during the stream" in err
    assert recorded(trace) == [(0, "one", REPLY)]


@pytest.mark.parametrize("behave", list(HOSTILE))
def test_a_stream_that_is_no_whole_reply_reaches_the_agent_unchanged_and_is_not_recorded(
    upstream: Upstream, tmp_path: Path, behave: str
) -> None:
    trace = tmp_path / "t.jsonl"
    sent, why = HOSTILE[behave]
    with recording(upstream.url, trace) as rec:
        t0 = time.monotonic()
        assert raw_stream(rec, "one", behave) == b"".join(sent)  # every byte, none cut
        assert time.monotonic() - t0 < 5.0  # bounded: no index or number from the upstream costs its size
        assert stream(rec, "one") == REPLY
        _, err = rec.stop()
    assert f"task 'task000' step 0: {why}" in err and ": not recorded" in err, err
    assert "Traceback" not in err, err
    assert recorded(trace) == [(0, "one", REPLY)]


@pytest.mark.parametrize("behave", list(HOSTILE_BODIES))
def test_an_answer_that_is_no_whole_reply_reaches_the_agent_unchanged_and_is_not_recorded(
    upstream: Upstream, tmp_path: Path, behave: str
) -> None:
    trace = tmp_path / "t.jsonl"
    body, why = HOSTILE_BODIES[behave]
    with recording(upstream.url, trace) as rec:
        r = chat(rec, "one", behave)
        assert (r.status_code, r.content) == (200, body)
        assert chat(rec, "one").status_code == 200
        _, err = rec.stop()
    assert f"task 'task000' step 0: {why}: not recorded" in err, err
    assert "Traceback" not in err, err
    assert recorded(trace) == [(0, "one", REPLY)]


@pytest.mark.parametrize("behave", ["odd-type", "garbage-after-done"])
def test_a_whole_stream_is_recorded_whatever_its_type_is_spelled_and_whatever_follows_done(
    upstream: Upstream, tmp_path: Path, behave: str
) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        assert stream(rec, "one", behave) == REPLY
        _, err = rec.stop()
    assert recorded(trace) == [(0, "one", REPLY)], err


MESSAGES = '"messages": [{"role": "user", "content": "q"}]'


@pytest.mark.parametrize(
    "request_body",
    [
        '{"n": ' + "1" * 5000 + "}",
        deep(100_000),
        "{" + MESSAGES + ', "n": ' + deep(400) + "}",  # parses, but nests too deep to write
        '{"messages": [{"role": "user", "content": "\\ud800"}]}',  # parses, but no UTF-8 holds it
    ],
    ids=["long-number", "deep-nesting", "nested-400", "lone-surrogate"],
)
def test_a_request_that_does_not_parse_or_nests_too_deep_is_forwarded_and_not_recorded(
    upstream: Upstream, tmp_path: Path, request_body: str
) -> None:
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        with httpx.Client(timeout=30) as c:
            r = c.post(
                f"{rec.url}/chat/completions", content=request_body, headers={"Content-Type": "application/json"}
            )
        assert (r.status_code, r.json()) == (200, BODY)
        assert chat(rec, "one").status_code == 200
        _, err = rec.stop()
    assert "not recorded" in err and "Traceback" not in err, err
    assert recorded(trace) == [(0, "one", REPLY)]


def test_a_side_request_during_a_step_is_a_side_task_of_its_own(upstream: Upstream, tmp_path: Path) -> None:
    """An agent that asks for a title while its step streams: the title is no step between the agent's two."""
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        side = threading.Timer(0.3, lambda: chat(rec, "title"))
        side.start()
        assert stream(rec, "one", "slow-stream") == REPLY  # the title is asked and answered meanwhile
        side.join()
        time.sleep(0.2)
        assert chat(rec, "two").status_code == 200
        _, err = rec.stop()
    got = tasks(trace)
    assert sorted(got) == ["task000", "task000~side1"], err
    assert [x[:3] for x in got["task000"]] == [(0, "one", REPLY), (1, "two", REPLY)]
    tool = got["task000"][0][3]
    assert tool is not None and tool >= 0.2  # the agent's own time after step 0, not the title's
    assert got["task000~side1"] == [(0, "title", REPLY, None)]


def test_two_agents_without_a_task_header_at_once_are_never_one_task(upstream: Upstream, tmp_path: Path) -> None:
    """Each overlap makes a side task; the first says once that each agent wants an X-Lab-Task of its own."""
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        for text in ("a", "c"):
            first = threading.Thread(target=stream, args=(rec, text, "slow-stream"))
            first.start()
            time.sleep(0.3)
            assert stream(rec, chr(ord(text) + 1), "slow-stream") == REPLY
            first.join()
        _, err = rec.stop()
    got = {task: [x[:3] for x in steps] for task, steps in tasks(trace).items()}
    assert got == {
        "task000": [(0, "a", REPLY), (1, "c", REPLY)],
        "task000~side1": [(0, "b", REPLY), (1, "d", REPLY)],
    }, err
    assert err.count("X-Lab-Task") == 1 and "task000~side1" in err and "an X-Lab-Task per agent" in err, err


def test_a_request_after_the_reply_reached_the_agent_is_the_next_step_though_the_stream_lingers(
    upstream: Upstream, tmp_path: Path
) -> None:
    """An agent that reads its stream to finish_reason and asks again while the upstream has not ended the stream
    (its connection still open): the request is the task's next step, not a side task; the first step's tool
    time is 0 (its reply was settled after the next request came)."""
    trace = tmp_path / "t.jsonl"
    with recording(upstream.url, trace) as rec:
        body = {**ask("one"), "stream": True}
        with (
            httpx.Client(timeout=30) as c,
            c.stream("POST", f"{rec.url}/chat/completions", json=body, headers={BEHAVE: "linger"}) as r,
        ):
            lines = r.iter_lines()
            for line in lines:
                if line.startswith("data: {") and any(x.get("finish_reason") for x in json.loads(line[6:])["choices"]):
                    break
            time.sleep(0.1)  # the agent's own time
            assert chat(rec, "two").status_code == 200  # the first stream still open: it lingers a second
            assert "data: [DONE]" in list(lines)
        _, err = rec.stop()
    assert tasks(trace) == {"task000": [(0, "one", REPLY, 0.0), (1, "two", REPLY, None)]}, err
    assert "X-Lab-Task" not in err, err


@pytest.mark.parametrize("task", [b"\xff\xfe", b"mine~side1", b"x" * 200])
def test_a_task_header_that_is_no_plain_name_is_forwarded_and_not_recorded(
    upstream: Upstream, tmp_path: Path, task: bytes
) -> None:
    """The name is refused for the trace, not the request: the agent gets its answer, the trace no step."""
    trace = tmp_path / "t.jsonl"
    before = len(upstream.seen)
    with recording(upstream.url, trace) as rec:
        with httpx.Client(timeout=30) as c:
            r = c.post(f"{rec.url}/chat/completions", json=ask("one"), headers={"X-Lab-Task": task})
        assert (r.status_code, r.json()) == (200, BODY)
        assert chat(rec, "two").status_code == 200
        _, err = rec.stop()
    assert upstream.seen[before:] == ["good", "good"]
    assert err.count("X-Lab-Task") == 1 and "up to 128 printable ASCII characters but ~" in err, err
    assert "forwarded, not recorded" in err and "Traceback" not in err, err
    assert recorded(trace) == [(0, "two", REPLY)]


def test_a_task_flag_that_is_no_plain_name_is_one_line_before_anything_is_written(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    cmd = [LAB, "trace", "record", "--upstream", "http://127.0.0.1:9", "--listen", str(free_port()), "-o", str(trace)]
    r = subprocess.run([*cmd, "--task", "mine~side1"], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr.count("\n")) == (2, "", 1), r.stderr
    assert "--task 'mine~side1': up to 128 printable ASCII characters but ~" in r.stderr
    assert not trace.exists()
