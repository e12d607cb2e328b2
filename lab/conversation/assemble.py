"""What the recorder reads of an upstream's chat-completions reply: the assistant message, its token counts and
whether it is whole, from a JSON body or from a stream of server-sent events (the deltas merged into one message:
strings such as `content` concatenated, `tool_calls` merged by index). Pure functions of the bytes; nothing here
does I/O.

A reply is whole once choice 0 has its `finish_reason`. A stream is read as the OpenAI SDK reads it (the SSE
spec): a line ends at CR, LF or CRLF, an event at a blank line (an event the stream ends before is dropped),
every event's data must be a JSON object, and nothing after `[DONE]` is read. Whatever the bytes hold, reading
them never raises and costs their length: bytes that are not UTF-8, an event that does not parse, a tool call
index out of 0..MAX_TOOL_CALLS-1 or a delta nested deeper than MAX_DEPTH make the stream's `flaw`, and
nothing more of it is read."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_TOOL_CALLS = 128  # a reply's tool calls: an index from the upstream past it is a flaw, never allocated
MAX_DEPTH = 32  # objects within objects of one delta
_MAX_COUNT = 1 << 40  # a token count past it is no count
_LINE_END = re.compile(r"\r\n|\r|\n")
_NOT_UTF8 = re.compile("[\udc80-\udcff]")  # what the decoder makes of bytes that are not UTF-8 (surrogateescape)
# delta keys whose string value is set once, not concatenated
_SET_ONCE = frozenset({"role", "id", "type"})


class Flaw(Exception):
    """Why the bytes read are no reply an agent could have read."""


class _Text(list[str]):
    """A string being concatenated, in pieces: joined once, when the reply is taken (linear in its length)."""


class _Calls(list[dict[str, Any]]):
    """A message's tool calls being merged."""


@dataclass
class Reply:
    """The assistant message and the token counts of one exchange (None where the upstream did not say), and
    whether choice 0 reached its end (its `finish_reason`)."""

    message: dict[str, Any] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finished: bool = False


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _MAX_COUNT else None


def token_counts(body: dict[str, Any]) -> tuple[int | None, int | None]:
    """(prompt, completion) tokens: `usage` when present, else llama-server's `timings` (prompt_n, predicted_n)."""
    usage, timings = (v if isinstance(v := body.get(k), dict) else {} for k in ("usage", "timings"))
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    return (
        prompt if prompt is not None else _count(timings.get("prompt_n")),
        completion if completion is not None else _count(timings.get("predicted_n")),
    )


def is_finish(choice: dict[str, Any]) -> bool:
    reason = choice.get("finish_reason")
    return isinstance(reason, str) and bool(reason)


def reply_of_body(body: Any) -> Reply:
    """A non-streaming response: choice 0's `message`, its usage, and whether it has its `finish_reason`."""
    if not isinstance(body, dict):
        return Reply()
    choices = body.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    if first.get("index", 0) != 0:
        first = {}
    message = first.get("message")
    return Reply(message if isinstance(message, dict) else None, *token_counts(body), finished=is_finish(first))


def merge_delta(message: dict[str, Any], delta: dict[str, Any], depth: int = 0) -> None:
    """Fold one streamed delta into the message: strings concatenated (`role`, `id`, `type` set once), objects
    merged key by key, `tool_calls` merged by their `index`, other values replaced."""
    if depth > MAX_DEPTH:
        raise Flaw(f"a delta nested too deep (over {MAX_DEPTH})")
    for key, value in delta.items():
        if value is None:
            continue
        if key == "tool_calls" and isinstance(value, list):
            calls = message.get(key)
            if not isinstance(calls, _Calls):
                calls = message[key] = _Calls()
            for part in value:
                if isinstance(part, dict):
                    _merge_call(calls, part, depth + 1)
        elif isinstance(value, str):
            if key in _SET_ONCE:
                if not message.get(key):
                    message[key] = value
            else:
                text = message.get(key)
                if not isinstance(text, _Text):
                    text = message[key] = _Text([text] if isinstance(text, str) else [])
                text.append(value)
        elif isinstance(value, dict):
            inner = message.get(key)
            if not isinstance(inner, dict):
                inner = message[key] = {}
            merge_delta(inner, value, depth + 1)
        else:
            message[key] = value


def _merge_call(calls: _Calls, part: dict[str, Any], depth: int) -> None:
    index = part.get("index")
    if index is None:
        index = len(calls) - 1 if calls and "id" not in part else len(calls)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_TOOL_CALLS:
        raise Flaw(f"a tool call index out of range ({str(index)[:20]})")
    while len(calls) <= index:
        calls.append({})
    merge_delta(calls[index], {k: v for k, v in part.items() if k != "index"}, depth)


def plain(value: Any) -> Any:
    """The message as the agent holds it: every string joined (only what merging built is walked, so as deep as
    MAX_DEPTH)."""
    if isinstance(value, _Text):
        return "".join(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, _Calls):
        return [plain(c) for c in value]
    return value


def parsed_event(data: str) -> dict[str, Any]:
    """An event's data as a JSON object, else a Flaw."""
    try:
        chunk = json.loads(data)
    except RecursionError:
        raise Flaw("an event that does not parse (nested too deep)") from None
    except ValueError as e:  # not JSON, or a number of more digits than Python reads
        raise Flaw(f"an event that does not parse ({error_text(str(e), 80)})") from None
    if not isinstance(chunk, dict):
        raise Flaw("an event that is not a JSON object")
    return chunk


@dataclass
class StreamAssembler:
    """Feed a stream's raw bytes as they arrive (split anywhere, even inside a UTF-8 character or a CRLF);
    `reply()` is the message assembled from choice 0's deltas and the token counts of the last chunk that carried
    any.

    Linear in the bytes fed, and bounded: past `limit` bytes it stops assembling (`overflow`; the stream itself
    is not its business). `finished` once choice 0 has its `finish_reason`; `done` at `[DONE]`; `error` once an
    event carried an `error` object (an upstream that fails mid-stream and then ends it cleanly); `flaw` once
    the bytes are no stream an agent could read (see the module's docstring). Nothing it is fed raises."""

    limit: int | None = None
    chunks: int = 0
    done: bool = False
    finished: bool = False
    error: str | None = None
    overflow: bool = False
    flaw: str | None = None
    message: dict[str, Any] = field(default_factory=lambda: {"role": "assistant", "content": None})
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    _fed: int = 0
    _deltas: int = 0
    _partial: list[str] = field(default_factory=list)  # the unterminated line, in pieces: joined once it ends
    _data: list[str] = field(default_factory=list)
    _skip_lf: bool = False  # the last text ended in CR: an LF next ends no line of its own
    # bytes that are not UTF-8 are a flaw only in a line that is read (the OpenAI SDK decodes line by line)
    _decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    )

    @property
    def stopped(self) -> bool:
        """Nothing more is read: past the limit, after [DONE], or flawed."""
        return self.overflow or self.done or self.flaw is not None

    def feed(self, raw: bytes) -> None:
        if self.stopped:
            return
        self._fed += len(raw)
        if self.limit is not None and self._fed > self.limit:
            self.overflow, self._partial, self._data = True, [], []
            return
        self._guarded(self._read, raw)

    def close(self) -> None:
        """The stream ended: an event it ended before is dropped (the SSE spec), but its bytes must be UTF-8."""
        if not self.stopped:
            self._guarded(self._end)

    def _guarded(self, read: Callable[..., None], *args: Any) -> None:
        try:
            read(*args)
        except Flaw as e:
            self._flawed(str(e))
        except Exception as e:  # a slip here must never cut the agent's stream: the reply is only not recorded
            self._flawed(error_text(f"a stream it could not read ({type(e).__name__}: {e})"))

    def _flawed(self, why: str) -> None:
        self.flaw, self._partial, self._data = why, [], []

    def _read(self, raw: bytes) -> None:
        text = self._decoder.decode(raw)
        if self._skip_lf and text.startswith("\n"):
            text, self._skip_lf = text[1:], False
        if not text:
            return
        self._skip_lf = text.endswith("\r")
        *lines, rest = _LINE_END.split(text)
        if lines:
            lines[0] = "".join([*self._partial, lines[0]])
            self._partial = []
        for line in lines:
            self._line(line)
            if self.stopped:
                return
        if rest:
            self._partial.append(rest)

    def _end(self) -> None:
        self._utf8("".join(self._partial) + self._decoder.decode(b"", final=True))
        self._partial, self._data = [], []

    def _line(self, line: str) -> None:
        self._utf8(line)
        if not line:
            self._event()
        elif not line.startswith(":"):  # a comment
            name, _, value = line.partition(":")
            if name == "data":
                self._data.append(value.removeprefix(" "))
            # `event:`, `id:` and `retry:` lines carry nothing of the reply

    @staticmethod
    def _utf8(line: str) -> None:
        if _NOT_UTF8.search(line):
            raise Flaw("bytes that are not UTF-8")

    def _event(self) -> None:
        if not self._data:
            return
        data, self._data = "\n".join(self._data), []
        if data.startswith("[DONE]"):
            self.done = True
        else:
            self.add_chunk(parsed_event(data))

    def add_chunk(self, chunk: dict[str, Any]) -> None:
        """One parsed `chat.completion.chunk` (or an `error` event)."""
        self.chunks += 1
        if chunk.get("error") is not None:
            self.error = error_text(chunk["error"])
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if isinstance(choice.get("delta"), dict):
                self._deltas += 1
                merge_delta(self.message, choice["delta"])
            if is_finish(choice):
                self.finished = True
        prompt, completion = token_counts(chunk)
        if prompt is not None or completion is not None:
            self.prompt_tokens, self.completion_tokens = prompt, completion

    def reply(self) -> Reply:
        message = plain(self.message) if self._deltas and not self.overflow else None
        return Reply(message, self.prompt_tokens, self.completion_tokens, self.finished)


def error_text(error: Any, limit: int = 200) -> str:
    """An upstream's `error` value (or any text) in one short line."""
    text = str(error.get("message") or error) if isinstance(error, dict) else str(error)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def assemble(raw_chunks: list[bytes]) -> Reply:
    """A whole stream's reply from its raw network chunks."""
    a = StreamAssembler()
    for raw in raw_chunks:
        a.feed(raw)
    a.close()
    return a.reply()
