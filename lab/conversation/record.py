"""`lab trace record`: an OpenAI-compatible pass-through an agent is pointed at (base_url
http://127.0.0.1:PORT/v1). Every request goes to the upstream unchanged (but for the lab's own `X-Lab-Task`
header) and the upstream's answer comes back unchanged: status, headers, body, and a stream chunk by chunk as
it arrives. Each chat-completions exchange becomes one `ConversationStep` line of the trace (see `log`).

aiohttp serves the agent, httpx.AsyncClient talks to the upstream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web
from pydantic import ValidationError

from lab.conversation.assemble import Reply, StreamAssembler, reply_of_body
from lab.conversation.log import ConversationLog, RecordError
from lab.core.errors import validation_line, warn
from lab.core.runs import utc_now
from lab.core.schemas import ConversationStep

TASK_HEADER = "X-Lab-Task"
DEFAULT_TASK = "task000"
# hop-by-hop headers (RFC 9110 7.6.1) and what the client library sets itself; never forwarded either way
_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding"}
    | {"upgrade", "proxy-connection", "host", "content-length"}
)
MAX_BODY = 1 << 30  # a request with screenshots as data URLs is large; aiohttp's default limit is 1 MiB


@dataclass(frozen=True)
class Recording:
    """What `lab trace record` was asked for."""

    upstream: str
    port: int
    trace: Path
    task: str = DEFAULT_TASK
    host: str = "127.0.0.1"
    append: bool = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def banner(self) -> str:
        return f"recording: {self.url} -> {self.upstream}, trace {self.trace}"


def upstream_url(base: str, path: str, query: str) -> str:
    """The upstream's URL for a request path; an upstream given with a trailing /v1 does not double it."""
    base = base.rstrip("/")
    if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        path = path[3:]
    return base + path + (f"?{query}" if query else "")


def is_chat(request: web.Request) -> bool:
    return request.method == "POST" and request.path.rstrip("/").endswith("/chat/completions")


def chat_body(body: bytes) -> dict[str, Any] | None:
    """The request as JSON when it is a JSON object, else None (then it is forwarded, not recorded)."""
    try:
        parsed = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return parsed if isinstance(parsed, dict) else None


class Recorder:
    """The aiohttp handler: forward, pass the answer back, hand each chat exchange to the log."""

    def __init__(self, rec: Recording, log: ConversationLog, client: httpx.AsyncClient) -> None:
        self.rec, self.log, self.client = rec, log, client

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        task = request.headers.get(TASK_HEADER) or self.rec.task
        sent: dict[str, Any] | None = None
        if is_chat(request) and (sent := chat_body(body)) is None:
            warn(f"{request.path}: the body is not a JSON object: forwarded, not recorded")
        started_utc, t0 = utc_now(ms=True), time.monotonic()
        step = self.log.begin(task, t0) if sent is not None else None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP | {"x-lab-task"}}
        headers["Accept-Encoding"] = "identity"  # the body comes back as sent, readable for the trace
        url = upstream_url(self.rec.upstream, request.path, request.query_string)
        try:
            upstream = await self.client.send(
                self.client.build_request(request.method, url, headers=headers, content=body), stream=True
            )
        except httpx.HTTPError as e:
            if step is not None:
                self.log.abandon(task, step)
            why = f"{type(e).__name__}: {e}".rstrip(": ")
            warn(f"upstream {self.rec.upstream} failed for {request.method} {request.path}: {why}")
            message = f"lab trace record: upstream {self.rec.upstream} unreachable ({why})"
            error = {"message": message, "type": "upstream_error", "code": 502}
            return web.json_response({"error": error}, status=502)

        def settle(reply: Reply | None) -> None:
            """Record the exchange (before its last byte reaches the agent, whose next request may follow)."""
            if step is not None and sent is not None:
                self._settle(task, step, sent, reply, upstream.status_code, started_utc, t0)

        try:
            return await self._pass_back(request, upstream, sent is not None, settle)
        finally:
            await upstream.aclose()

    def _settle(
        self, task: str, step: int, sent: dict[str, Any], reply: Reply | None, status: int, started_utc: str, t0: float
    ) -> None:
        ended = time.monotonic()
        if reply is None or not 200 <= status < 300 or reply.message is None:
            self.log.abandon(task, step)
            what = "no reply" if reply is None else f"status {status}, no assistant message"
            warn(f"task {task!r}: {what}: not recorded")
            return
        try:
            row = ConversationStep(
                task_id=task,
                step=step,
                request=sent,
                reply=reply.message,
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                started_utc=started_utc,
                elapsed_s=ended - t0,
            )
        except ValidationError as e:
            self.log.abandon(task, step)
            warn(f"task {task!r}: not a chat-completions request ({validation_line(e, limit=1)}): not recorded")
            return
        self.log.finish(row, ended)

    async def _pass_back(
        self,
        request: web.Request,
        upstream: httpx.Response,
        record: bool,
        settle: Callable[[Reply | None], None],
    ) -> web.StreamResponse:
        """The upstream's answer, sent back as it arrives; `settle` gets the reply read from it (None when cut
        off) before the answer's last chunk is sent, so the exchange is recorded before the agent can go on."""
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
        if not upstream.headers.get("content-type", "").startswith("text/event-stream"):
            try:
                content = b"".join([raw async for raw in upstream.aiter_raw()])
            except httpx.HTTPError as e:
                warn(f"upstream cut the answer to {request.path} short: {e}")
                settle(None)
                return web.json_response({"error": {"message": str(e), "code": 502}}, status=502)
            settle(reply_of_body(chat_body(content)) if record else None)
            return web.Response(body=content, status=upstream.status_code, headers=headers)
        out = web.StreamResponse(status=upstream.status_code, headers=headers)
        await out.prepare(request)
        stream = StreamAssembler()
        last: bytes | None = None  # one chunk held back until the exchange is recorded
        try:
            async for raw in upstream.aiter_raw():
                if record:
                    stream.feed(raw)
                if last is not None:
                    await out.write(last)
                last = raw
            stream.close()
            settle(stream.reply() if record else None)
            if last is not None:
                await out.write(last)
            await out.write_eof()
        except httpx.HTTPError as e:
            warn(f"upstream cut the stream of {request.path} short: {e}")
            settle(None)
            if request.transport is not None:
                request.transport.close()  # the agent sees a broken stream, not a clean end
        except ConnectionError:
            warn(f"the agent hung up during the stream of {request.path}")
            settle(None)
        return out


def make_app(recorder: Recorder) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    return app


async def serve(rec: Recording, ready: Callable[[str], None] = print) -> int:
    """Record until SIGINT or SIGTERM; the number of steps written."""
    log = ConversationLog.open(rec.trace, rec.append)
    # no keep-alive upstream: llama-server closes a connection after a stream, and a reused one then fails
    limits = httpx.Limits(max_keepalive_connections=0)
    timeout = httpx.Timeout(None, connect=10.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout, follow_redirects=False) as client:
        runner = web.AppRunner(make_app(Recorder(rec, log, client)), access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            try:
                await web.TCPSite(runner, rec.host, rec.port).start()
            except OSError as e:
                raise RecordError(f"cannot listen on {rec.host}:{rec.port}: {e.strerror or e}") from e
            ready(rec.banner())
            await stop.wait()
        finally:
            log.close()  # every complete exchange is on disk before anything else stops
            with contextlib.suppress(Exception):
                await runner.cleanup()  # exchanges still running get a moment; those that finish are written
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    return log.written


def record(rec: Recording) -> int:
    return asyncio.run(serve(rec, lambda line: print(line, flush=True)))
