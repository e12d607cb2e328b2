"""What the recorder reads of an upstream's chat-completions reply: the assistant message and its token counts,
from a JSON body or from a stream of server-sent events (the deltas merged into one message: strings such as
`content` concatenated, `tool_calls` merged by index). Pure functions of the bytes; nothing here does I/O."""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from typing import Any

# delta keys whose string value is set once, not concatenated
_SET_ONCE = frozenset({"role", "id", "type"})


@dataclass
class Reply:
    """The assistant message and the token counts of one exchange (None where the upstream did not say)."""

    message: dict[str, Any] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def token_counts(body: dict[str, Any]) -> tuple[int | None, int | None]:
    """(prompt, completion) tokens: `usage` when present, else llama-server's `timings` (prompt_n, predicted_n)."""
    usage, timings = (v if isinstance(v := body.get(k), dict) else {} for k in ("usage", "timings"))
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    return (
        prompt if prompt is not None else _count(timings.get("prompt_n")),
        completion if completion is not None else _count(timings.get("predicted_n")),
    )


def reply_of_body(body: Any) -> Reply:
    """A non-streaming response: `choices[0].message` and its usage."""
    if not isinstance(body, dict):
        return Reply()
    choices = body.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = first.get("message")
    return Reply(message if isinstance(message, dict) else None, *token_counts(body))


def merge_delta(message: dict[str, Any], delta: dict[str, Any]) -> None:
    """Fold one streamed delta into the message: strings concatenated (`role`, `id`, `type` set once), objects
    merged key by key, `tool_calls` merged by their `index`, other values replaced."""
    for key, value in delta.items():
        if value is None:
            continue
        if key == "tool_calls" and isinstance(value, list):
            calls: list[dict[str, Any]] = message.setdefault("tool_calls", [])
            for part in value:
                if isinstance(part, dict):
                    _merge_call(calls, part)
        elif isinstance(value, str):
            if key in _SET_ONCE:
                if not message.get(key):
                    message[key] = value
            else:
                message[key] = (message.get(key) or "") + value
        elif isinstance(value, dict):
            inner = message.get(key)
            if not isinstance(inner, dict):
                inner = message[key] = {}
            merge_delta(inner, value)
        else:
            message[key] = value


def _merge_call(calls: list[dict[str, Any]], part: dict[str, Any]) -> None:
    index = part.get("index")
    if not isinstance(index, int):
        index = len(calls) - 1 if calls and "id" not in part else len(calls)
    while len(calls) <= index:
        calls.append({})
    merge_delta(calls[index], {k: v for k, v in part.items() if k != "index"})


@dataclass
class StreamAssembler:
    """Feed a stream's raw bytes as they arrive (split anywhere, even inside a UTF-8 character); `reply()` is
    the message assembled from choice 0's deltas and the token counts of the last chunk that carried any.

    Linear in the bytes fed, and bounded: past `limit` bytes it stops assembling (`overflow`; the stream itself
    is not its business). `finished` once choice 0 has its `finish_reason`; `error` once an event carried an
    `error` object (an upstream that fails mid-stream and then ends it cleanly)."""

    limit: int | None = None
    chunks: int = 0
    done: bool = False
    finished: bool = False
    error: str | None = None
    overflow: bool = False
    message: dict[str, Any] = field(default_factory=lambda: {"role": "assistant", "content": None})
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    _fed: int = 0
    _deltas: int = 0
    _partial: list[str] = field(default_factory=list)  # the unterminated line, in pieces: joined once it ends
    _data: list[str] = field(default_factory=list)
    _decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")())

    def feed(self, raw: bytes) -> None:
        if self.overflow:
            return
        self._fed += len(raw)
        if self.limit is not None and self._fed > self.limit:
            self.overflow, self._partial, self._data = True, [], []
            return
        text = self._decoder.decode(raw)
        if "\n" not in text:
            self._partial.append(text)
            return
        first, *lines, rest = text.split("\n")
        self._line("".join([*self._partial, first]).removesuffix("\r"))
        for line in lines:
            self._line(line.removesuffix("\r"))
        self._partial = [rest] if rest else []

    def close(self) -> None:
        """The stream ended: an event not yet closed by a blank line still counts."""
        if self.overflow:
            return
        tail = "".join(self._partial) + self._decoder.decode(b"", final=True)
        self._partial = []
        if tail:
            self._line(tail)
        self._event()

    def _line(self, line: str) -> None:
        if not line:
            self._event()
        elif line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))
        # comments (":"), `event:`, `id:` and `retry:` lines carry nothing of the reply

    def _event(self) -> None:
        data, self._data = "\n".join(self._data), []
        if not data:
            return
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            return
        if isinstance(chunk, dict):
            self.add_chunk(chunk)

    def add_chunk(self, chunk: dict[str, Any]) -> None:
        """One parsed `chat.completion.chunk` (or an `error` event)."""
        self.chunks += 1
        if chunk.get("error") is not None:
            self.error = error_text(chunk["error"])
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if isinstance(choice.get("delta"), dict):
                self._deltas += 1
                merge_delta(self.message, choice["delta"])
            if choice.get("finish_reason"):
                self.finished = True
        prompt, completion = token_counts(chunk)
        if prompt is not None or completion is not None:
            self.prompt_tokens, self.completion_tokens = prompt, completion

    def reply(self) -> Reply:
        message = self.message if self._deltas and not self.overflow else None
        return Reply(message, self.prompt_tokens, self.completion_tokens)


def error_text(error: Any) -> str:
    """An upstream's `error` value in one short line."""
    text = str(error.get("message") or error) if isinstance(error, dict) else str(error)
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."


def assemble(raw_chunks: list[bytes]) -> Reply:
    """A whole stream's reply from its raw network chunks."""
    a = StreamAssembler()
    for raw in raw_chunks:
        a.feed(raw)
    a.close()
    return a.reply()
