"""`lab trace record` between the official OpenAI client (the agent) and the lab's real llama-server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from lab.conversation.load import load_conversation
from lab.core.schemas import ConversationSample, ConversationStep, ConversationStepResult
from lab.core.settings import load_settings
from lab.engine.media import data_url
from lab.engine.png import make_png
from lab.engine.server import LlamaServer, free_port
from lab.models.resolve import resolve_projector

from conftest import ServerFactory

pytestmark = pytest.mark.engine

LAB = str(Path(sys.executable).parent / "lab")
REPO = Path(__file__).resolve().parent.parent
PARAMS: dict[str, Any] = {"model": "tiny", "max_tokens": 8, "temperature": 0, "seed": 7}


class Recorder:
    def __init__(self, proc: subprocess.Popen[str], base_url: str) -> None:
        self.proc, self.base_url = proc, base_url
        self.agent = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=120)

    def stop(self) -> tuple[str, str]:
        """SIGINT (Ctrl-C): what it printed after its banner, and on stderr."""
        self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return out, err


@contextmanager
def recording(upstream: str, trace: Path, *extra: str) -> Iterator[Recorder]:
    port = free_port()
    cmd = [LAB, "trace", "record", "--upstream", upstream, "--listen", str(port), "-o", str(trace), *extra]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert banner == f"recording: http://127.0.0.1:{port}/v1 -> {upstream}, trace {trace}\n", proc.communicate()
        yield Recorder(proc, f"http://127.0.0.1:{port}/v1")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def replay_once(trace: Path, runs: Path) -> tuple[Path, list[ConversationSample]]:
    """`lab trace replay TRACE --reps 1`: its run folder and samples."""
    r = subprocess.run(
        [LAB, "trace", "replay", str(trace), "--reps", "1", "--runs-dir", str(runs)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr + r.stdout
    run = Path(r.stdout.strip().splitlines()[-1])
    return run, [ConversationSample.model_validate_json(x) for x in (run / "raw" / "conversation_samples.jsonl").open()]


def steps(trace: Path) -> list[ConversationStep]:
    """The trace's steps (with their tool times, lines of their own), task by task."""
    return [s for task in load_conversation(trace).values() for s in task]


def test_a_three_turn_conversation_passes_through_and_is_recorded(server: LlamaServer, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    direct = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=120)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "List three colours."},
    ]
    sent: list[list[dict[str, Any]]] = []
    with recording(server.url, trace) as rec:
        # turn 1: not streamed; exactly what the server answers a direct call (greedy, same seed)
        sent.append([dict(m) for m in messages])
        first = rec.agent.chat.completions.with_raw_response.create(messages=messages, **PARAMS)
        assert first.status_code == 200
        r1 = first.parse()
        time.sleep(0.2)  # the agent's own time (a tool) before its next request

        # turn 2: streamed with usage; the chunks arrive as the server decodes them, not all at once. A longer reply
        # (48 tokens, about 0.1 s on the tiny model) so a client that waits a moment on a busy host does not find
        # them all queued, as if the proxy had buffered them
        messages += [{"role": "assistant", "content": r1.choices[0].message.content}, {"role": "user", "content": "?"}]
        sent.append([dict(m) for m in messages])
        pieces: list[str] = []
        arrived: list[float] = []
        stream = rec.agent.chat.completions.create(
            messages=messages, stream=True, stream_options={"include_usage": True}, **{**PARAMS, "max_tokens": 48}
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
                arrived.append(time.monotonic())
        streamed = "".join(pieces)
        assert len(pieces) >= 3 and arrived[-1] - arrived[0] > 0.02, "the stream was buffered"
        time.sleep(0.2)

        # turn 3: streamed without usage (the counts come from the final chunk's usage or timings)
        messages += [{"role": "assistant", "content": streamed}, {"role": "user", "content": "Thanks."}]
        sent.append([dict(m) for m in messages])
        third = "".join(
            c.choices[0].delta.content or ""
            for c in rec.agent.chat.completions.create(messages=messages, stream=True, **PARAMS)
            if c.choices
        )
        # every step is on disk as soon as the agent has its reply (its tool time follows as a line of its own)
        assert [s.step for s in steps(trace)] == [0, 1, 2]
        out, _ = rec.stop()
    assert out == f"3 steps written to {trace}\n"

    baseline = direct.chat.completions.create(messages=sent[0], **PARAMS)
    assert r1.choices[0].model_dump() == baseline.choices[0].model_dump()
    assert r1.usage == baseline.usage

    rows = steps(trace)
    assert [(s.task_id, s.step) for s in rows] == [("task000", 0), ("task000", 1), ("task000", 2)]
    assert [s.request["messages"] for s in rows] == sent
    assert [s.request.get("stream") for s in rows] == [None, True, True]
    assert [s.request["max_tokens"] for s in rows] == [8, 48, 8] and all(s.request["seed"] == 7 for s in rows)
    assert rows[0].reply == json.loads(first.text)["choices"][0]["message"]
    assert [s.reply["content"] if s.reply else None for s in rows] == [r1.choices[0].message.content, streamed, third]
    assert all(s.reply and s.reply["role"] == "assistant" for s in rows)
    assert r1.usage is not None
    assert (rows[0].prompt_tokens, rows[0].completion_tokens) == (r1.usage.prompt_tokens, r1.usage.completion_tokens)
    assert all(s.completion_tokens is not None and 0 < s.completion_tokens <= s.request["max_tokens"] for s in rows)
    assert all(s.prompt_tokens is not None and s.prompt_tokens > 0 for s in rows)
    assert rows[1].prompt_tokens is not None and rows[0].prompt_tokens is not None
    assert rows[2].prompt_tokens is not None and rows[2].prompt_tokens > rows[1].prompt_tokens > rows[0].prompt_tokens
    assert all(s.elapsed_s is not None and s.elapsed_s > 0 and s.started_utc for s in rows)
    assert [s.tool_s is not None and s.tool_s >= 0.2 for s in rows] == [True, True, False]
    assert rows[2].tool_s is None

    # the recorded conversation replays in the three arms, its recorded replies setting the decode lengths
    _, replayed = replay_once(trace, tmp_path / "runs")
    assert sorted((x.step, x.arm) for x in replayed) == sorted(
        (k, a) for k in range(3) for a in ("today", "optimum", "no_cache")
    )
    assert all(x.ok for x in replayed), [x.reason for x in replayed if not x.ok]
    n_out = {x.step: x.n_out for x in replayed if x.arm == "optimum"}
    assert n_out == {s.step: s.completion_tokens if (s.completion_tokens or 0) >= 2 else None for s in rows}

    # --append: the steps go on per task; X-Lab-Task picks the task (and never reaches the upstream)
    with recording(server.url, trace, "--append") as rec:
        with httpx.Client(timeout=60) as http:
            models = http.get(f"{rec.base_url}/models")
            assert models.status_code == 200
            assert models.json()["data"][0]["id"] == http.get(f"{server.url}/v1/models").json()["data"][0]["id"]
            garbled = {"content": b"{not json", "headers": {"Content-Type": "application/json"}}
            bad = http.post(f"{rec.base_url}/chat/completions", **garbled)
            assert bad.status_code == http.post(f"{server.url}/v1/chat/completions", **garbled).status_code
        rec.agent.chat.completions.create(messages=sent[0], **PARAMS)
        rec.agent.chat.completions.create(messages=sent[0], extra_headers={"X-Lab-Task": "other"}, **PARAMS)
        out, err = rec.stop()
    assert "the body is not a JSON object: forwarded, not recorded" in err
    assert out == f"2 steps written to {trace}\n"
    assert [(s.task_id, s.step) for s in steps(trace)[3:]] == [("task000", 3), ("other", 0)]
    assert server.alive()


def test_an_unreachable_upstream_is_a_502_and_the_recorder_stays_up(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    upstream = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with recording(upstream, trace) as rec:
        for _ in range(2):
            with pytest.raises(openai.InternalServerError) as e:
                rec.agent.chat.completions.create(messages=[{"role": "user", "content": "hi"}], **PARAMS)
            assert e.value.status_code == 502
            assert "unreachable" in e.value.message
            assert rec.proc.poll() is None
        out, err = rec.stop()
    assert out == f"0 steps written to {trace}\n"
    assert "ConnectError" in err
    assert not trace.exists()


def test_an_existing_trace_is_refused_in_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("")
    cmd = [LAB, "trace", "record", "--upstream", "http://127.0.0.1:9", "--listen", str(free_port()), "-o", str(trace)]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr == f"{trace} exists: pass --append to add to it, or choose another -o\n"
    assert r.stdout == "" and trace.read_text() == ""


EVICTED = "[an earlier screenshot, removed]"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "click",
            "description": "Click the screen at a point.",
            "parameters": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}},
        },
    }
]


def observe(messages: list[dict[str, Any]], k: int) -> None:
    """The agent's next observation (a screenshot every other step); it keeps the newest two screenshots and
    replaces older ones by a line of text: an eviction, two steps after every third screenshot."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": f"Step {k}: the window shows a form with {k} fields."}]
    if k % 2 == 0:
        parts.insert(0, {"type": "image_url", "image_url": {"url": data_url(make_png(320, 200, seed=k))}})
    messages.append({"role": "user", "content": parts})
    shots = [i for i, m in enumerate(messages) if any(p.get("type") == "image_url" for p in _parts(m))]
    for i in shots[:-2]:
        messages[i]["content"] = [
            {"type": "text", "text": EVICTED} if p["type"] == "image_url" else p for p in _parts(messages[i])
        ]


def _parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    return message["content"] if isinstance(message["content"], list) else []


def test_an_agent_loop_with_screenshots_and_an_eviction_is_recorded_and_replayed(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    """Six turns of the official client as a computer-use agent (screenshots as data URLs, the oldest evicted) through
    the recorder to a server with the vision projector; the trace then replays in three arms, and the replay finds
    the eviction where the agent made it: step 4 departs at message 1, and today's server reuses no more there than
    the step shares with the one before."""
    srv = start_server(extra_args=["--mmproj", str(resolve_projector(load_settings()))])
    trace = tmp_path / "agent.jsonl"
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You operate a computer. Answer tersely."}]
    with recording(srv.url, trace) as rec:
        for k in range(6):
            observe(messages, k)
            r = rec.agent.chat.completions.create(messages=messages, tools=TOOLS, **PARAMS)
            messages.append({"role": "assistant", "content": r.choices[0].message.content or ""})
        out, _ = rec.stop()
    assert out == f"6 steps written to {trace}\n"
    rows = steps(trace)
    assert [len(s.request["messages"]) for s in rows] == [2, 4, 6, 8, 10, 12] and rows[0].request["tools"] == TOOLS
    run, replayed = replay_once(trace, tmp_path / "runs")
    assert len(replayed) == 18 and all(x.ok for x in replayed), [x.reason for x in replayed if not x.ok]
    table = [ConversationStepResult.model_validate_json(x) for x in (run / "raw" / "conversation_steps.jsonl").open()]
    by_step = {t.step: t for t in table}
    assert by_step[4].diverged_at == 1 and by_step[4].images == 2, by_step[4]
    assert [by_step[k].images for k in range(6)] == [1, 1, 2, 2, 2, 2]
    # the derived cells are what the agent's server counted (its tools sent with every arm, as recorded)
    assert [by_step[s.step].prompt_cells for s in rows] == [s.prompt_tokens for s in rows]
    for x in replayed:
        t = by_step[x.step]
        assert x.prompt_n is not None and x.cache_n is not None
        if x.arm == "today":
            assert x.prompt_n + x.cache_n == t.prompt_cells and x.cache_n <= t.common, (x, t)
    assert by_step[4].today_cache_n is not None and by_step[4].today_cache_n <= by_step[4].common
    # the other steps extend the previous request and its recorded reply: all they share is reused
    assert all(by_step[k].diverged_at is None and by_step[k].today_cache_n == by_step[k].common for k in (1, 2, 3, 5))
    # the model of today's cache policy predicts what the server reused, step by step, and the memory it logged
    assert [(t.step, t.predicted_cache_n) for t in table] == [(t.step, t.today_cache_n) for t in table]
    logged = [(t.ram_cache_mib, t.predicted_ram_cache_mib) for t in table if t.ram_cache_mib is not None]
    assert logged and all(p is not None and abs(p - m) <= 0.1 * m + 0.001 for m, p in logged), logged
