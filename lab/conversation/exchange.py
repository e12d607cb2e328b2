"""One exchange through `lab trace record`, in the parts that hold no state: the upstream's URL, what a request
and an answer are (a chat request's JSON body, a task's name and side task, a content type), the recorder's own
answers, and why an exchange is no step."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from lab.conversation.assemble import Reply

TASK_HEADER = "X-Lab-Task"
TOKEN_HEADER = "X-Lab-Token"
DEFAULT_TASK = "task000"
SIDE = "~side"  # a side task's mark (`task~side1`): no task name holds `~`
_TASK_NAME = re.compile(r"[\x20-\x7d]{1,128}")  # printable ASCII but `~` (0x7e)
# hop-by-hop headers (RFC 9110 7.6.1) and what the client library sets itself; never forwarded either way
HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding"}
    | {"upgrade", "proxy-connection", "host", "content-length"}
)
OWN = frozenset({TASK_HEADER.lower(), TOKEN_HEADER.lower()})  # the lab's own headers, never forwarded


def upstream_url(base: str, path: str, query: str) -> str:
    """The upstream's URL for a request path; an upstream given with a trailing /v1 does not double it."""
    base = base.rstrip("/")
    if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        path = path[3:]
    return base + path + (f"?{query}" if query else "")


def is_chat(request: web.Request) -> bool:
    return request.method == "POST" and request.path.rstrip("/").endswith("/chat/completions")


def chat_body(body: bytes) -> dict[str, Any] | None:
    """The body as JSON when it is a JSON object Python reads, else None (then it is forwarded, not recorded)."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):  # not JSON or UTF-8, a number of over 4300 digits, nesting too deep
        return None
    return parsed if isinstance(parsed, dict) else None


def is_task_name(name: str) -> bool:
    return _TASK_NAME.fullmatch(name) is not None


def side_task(task: str, busy: set[str]) -> str:
    """The task a request of `task` is recorded under: `task` itself, or while a request of it is still open,
    the first side task `task~sideN` with none open."""
    name, n = task, 0
    while name in busy:
        n += 1
        name = f"{task}{SIDE}{n}"
    return name


def mime_of(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()


def is_json(content_type: str) -> bool:
    mime = mime_of(content_type)
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def error_response(status: int, message: str, kind: str) -> web.Response:
    """The recorder's own answer, in the OpenAI error shape."""
    return web.json_response(
        {"error": {"message": f"lab trace record: {message}", "type": kind, "code": status}}, status=status
    )


@dataclass
class Exchange:
    """One chat-completions exchange being recorded: settled exactly once, as a step or as nothing."""

    task: str
    step: int
    sent: dict[str, Any]
    started_utc: str
    t0: float
    request: web.Request
    settled: bool = False
    delivered: bool = False  # choice 0's finish_reason reached the agent (a stream may go on past it)

    def open(self) -> bool:
        """Not settled, and its agent still waiting for its reply: neither delivered nor hung up on."""
        return not self.settled and not self.delivered and agent_there(self.request)


def unrecorded(reply: Reply | None, why: str, status: int) -> str:
    """Why an exchange is no step ('' when it is one)."""
    if not 200 <= status < 300:
        return f"status {status}"
    if why:
        return why
    if reply is None or reply.message is None:
        return "no assistant message"
    return "" if reply.finished else "no finish_reason for choice 0"


def agent_there(request: web.Request) -> bool:
    """The agent's connection is still open (it has not hung up or timed out)."""
    return request.transport is not None and not request.transport.is_closing()
