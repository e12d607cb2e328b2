"""Why a step's prompt departs from what the server holds (the previous request and its reply), read from the
messages as the agent sent them:

    reasoning dropped   the previous reply comes back without the reasoning block it opened with
    reply rewritten     the previous reply comes back otherwise changed
    image evicted       a message lost a screenshot (replaced, or dropped with its text)
    tool output cut     a message's text comes back shorter, the start of what it was
    message edited      a message's text comes back otherwise changed
    messages dropped    messages the previous request had are gone from the middle of the history
    system prompt       the first message, a system prompt, changed
    tool list           the request's tools (or other template fields) changed
    template            the same messages, rendered into different tokens (a date, a counter, a re-rendered turn)
"""

from __future__ import annotations

import re
from typing import Any, Literal

Cause = Literal[
    "reasoning dropped",
    "reply rewritten",
    "image evicted",
    "tool output cut",
    "message edited",
    "messages dropped",
    "system prompt",
    "tool list",
    "template",
]
REASONING = re.compile(r"^\s*<(think|thinking|reasoning)>.*?</\1>\s*", re.DOTALL)


def departure_cause(
    before: list[dict[str, Any]],
    reply: dict[str, Any] | None,
    before_fields: dict[str, Any],
    now: list[dict[str, Any]],
    now_fields: dict[str, Any],
    at: int,
) -> Cause:
    """The cause of a departure at message `at` (lab.conversation.derive.first_changed) of `now`, against the
    previous request's messages followed by its reply."""
    if before_fields != now_fields:
        return "tool list"
    held = [*before, *([reply] if reply else [])]
    if at >= len(held) or at >= len(now):
        return "template" if at >= len(held) else "messages dropped"
    old, new = held[at], now[at]
    if _same(old, new):
        return "template"
    if at == 0 and old.get("role") == "system":
        return "system prompt"
    if reply is not None and at == len(before):
        text = _text(old)
        if (m := REASONING.match(text)) and _text(new).strip() == text[m.end() :].strip():
            return "reasoning dropped"
        if old.get("role") == new.get("role"):
            return "reply rewritten"
    if any(_same(held[k], new) for k in range(at + 1, len(held))):
        return "messages dropped"
    if _images(new) < _images(old):
        return "image evicted"
    a, b = _text(old), _text(new)
    if len(b) < len(a) and _stem(b) and a.startswith(_stem(b)):
        return "tool output cut"
    return "message edited"


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("role", "content", "tool_calls", "tool_call_id")
    return all(a.get(k) == b.get(k) for k in keys)


def _text(m: dict[str, Any]) -> str:
    content = m.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _images(m: dict[str, Any]) -> int:
    content = m.get("content")
    return (
        sum(1 for p in content if isinstance(p, dict) and p.get("type") == "image_url")
        if isinstance(content, list)
        else 0
    )


def _stem(text: str) -> str:
    """The text a cut kept: without a trailing marker such as `...` or `[cut]`."""
    return re.sub(r"\s*(\.\.\.|…)?\s*(\[[^\]]*\])?\s*$", "", text)
