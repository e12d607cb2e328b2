"""`lab trace record`: an OpenAI-compatible pass-through an agent is pointed at (base_url
http://127.0.0.1:PORT/v1). Every request goes to the upstream unchanged (but for the lab's own `X-Lab-Task` and
`X-Lab-Token` headers) and the upstream's answer comes back unchanged: status, headers, body, and a stream chunk
by chunk as it arrives, whatever the bytes hold. Each chat-completions exchange the agent received whole becomes
one `ConversationStep` line of the trace, written at once (see `log`): whole means choice 0 reached its
`finish_reason` and every event of a stream parsed (see `assemble`). One that failed, carried an error, was not
whole or did not reach the agent is not recorded, and says why in one line.

Steps count per task in arrival order, and a task's steps never overlap in time: a request that arrives while
another of its task is still open (its agent still waiting for it: choice 0's finish_reason has not reached it) is
recorded under a side task of its own, `TASK~side1` (the first with none open; `~side2`, ... when more overlap). So
an agent's side request (a title, a summary) made while its step runs, or a second agent that sends no
`X-Lab-Task`, is never taken for the next step of the conversation, and every reader (derive, replay, tune) sees it
as a task of its own (its steps carry no tool time: they are no loop of the agent's; the first such side task of
requests without an `X-Lab-Task` says so in a warning). An `X-Lab-Task` (and `--task`) is up to 128 printable ASCII
characters without `~`; a request with another is forwarded and not recorded, with a warning (the name is refused
for the trace, not the request).

It takes an agent's API calls only: JSON bodies, no `Origin` (a web page's request), the token when one is set;
and it holds bounded amounts: a request up to record.max_request_mib (else 413), a reply up to
record.max_reply_mib (else a 502, or a stream passed on unrecorded), an upstream silent for at most
record.read_timeout_s (else a 504 or a cut stream).

aiohttp serves the agent, httpx.AsyncClient talks to the upstream."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web
from pydantic import ValidationError

from lab.conversation.assemble import Reply, StreamAssembler, error_text, reply_of_body
from lab.conversation.exchange import (
    DEFAULT_TASK,
    HOP,
    OWN,
    SIDE,
    TASK_HEADER,
    TOKEN_HEADER,
    Exchange,
    agent_there,
    chat_body,
    error_response,
    is_chat,
    is_json,
    is_task_name,
    mime_of,
    side_task,
    unrecorded,
    upstream_url,
)
from lab.conversation.log import ConversationLog, RecordError
from lab.core.errors import UsageError, validation_line, warn
from lab.core.redact import redact_url
from lab.core.runs import utc_now
from lab.core.schemas import ConversationStep
from lab.core.settings_server import RecordSettings


@dataclass(frozen=True)
class Recording:
    """What `lab trace record` was asked for."""

    upstream: str
    port: int
    trace: Path
    task: str = DEFAULT_TASK
    host: str = "127.0.0.1"
    append: bool = False
    limits: RecordSettings = field(default_factory=RecordSettings)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def shown_upstream(self) -> str:
        """The upstream as it may be printed: credentials in its URL masked."""
        return redact_url(self.upstream)

    def banner(self) -> str:
        return f"recording: {self.url} -> {self.shown_upstream}, trace {self.trace}"

    def exposure(self) -> str | None:
        """The warning for listening beyond loopback (None on loopback)."""
        if is_loopback(self.host):
            return None
        if self.limits.token is None:
            return (
                f"listening on {self.host}: anyone who reaches port {self.port} can use {self.shown_upstream} "
                "through it and add steps to the trace; --token makes every request carry it in X-Lab-Token"
            )
        return f"listening on {self.host}: a request without the token in its {TOKEN_HEADER} header is refused (401)"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Recorder:
    """The aiohttp handler: refuse what is not an agent's API call, forward the rest, pass the answer back, and
    hand each chat exchange the agent received whole to the log."""

    def __init__(self, rec: Recording, log: ConversationLog, client: httpx.AsyncClient) -> None:
        self.rec, self.log, self.client = rec, log, client
        self.max_reply = rec.limits.max_reply_mib << 20
        self.exchanges: list[Exchange] = []  # those being answered
        self.told_overlap = False  # the warning that requests without an X-Lab-Task overlap was given

    def refusal(self, request: web.Request) -> web.Response | None:
        """A web page's request (it carries an `Origin`; an agent's does not), a request without the token, or a
        body that is not JSON: what a page could send without a CORS preflight is `text/plain`."""
        if origin := request.headers.get("Origin"):
            return error_response(403, f"a request from a web page (Origin {origin[:80]}) is refused", "forbidden")
        token = self.rec.limits.token
        if token is not None and not hmac.compare_digest(
            request.headers.get(TOKEN_HEADER, "").encode(), token.encode()
        ):
            return error_response(401, f"no valid {TOKEN_HEADER} header", "unauthorized")
        if request.can_read_body and not is_json(request.headers.get("Content-Type", "")):
            shown = request.headers.get("Content-Type", "none")[:80]
            return error_response(
                415, f"a body of Content-Type {shown}: only JSON is forwarded", "unsupported_media_type"
            )
        return None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if (refused := self.refusal(request)) is not None:
            warn(f"{request.method} {request.path}: refused ({refused.status})")
            return refused
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            limit = self.rec.limits.max_request_mib
            warn(f"{request.method} {request.path}: a body over record.max_request_mib ({limit} MiB): refused (413)")
            return error_response(413, f"a request body over record.max_request_mib ({limit} MiB)", "request_too_large")
        sent: dict[str, Any] | None = None
        if is_chat(request) and (sent := chat_body(body)) is None:
            warn(f"{request.path}: the body is not a JSON object: forwarded, not recorded")
        started_utc, t0 = utc_now(ms=True), time.monotonic()
        exchange = None
        if sent is not None and (task := self._task_of(request)) is not None:
            exchange = Exchange(task, self.log.begin(task, t0), sent, started_utc, t0, request)
            self.exchanges.append(exchange)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP | OWN}
        headers["Accept-Encoding"] = "identity"  # the body comes back as sent, readable for the trace
        url = upstream_url(self.rec.upstream, request.path, request.query_string)
        try:
            try:
                upstream = await self.client.send(
                    self.client.build_request(request.method, url, headers=headers, content=body), stream=True
                )
            except httpx.HTTPError as e:
                return self._failed(request, e)
            try:
                return await self._pass_back(request, upstream, exchange)
            finally:
                await upstream.aclose()
        finally:
            if exchange is not None:
                self.settle(exchange, None, "no reply")  # anything not settled by now is not recorded
                self.exchanges.remove(exchange)

    def _task_of(self, request: web.Request) -> str | None:
        """The task a chat request is recorded under: its `X-Lab-Task` (else --task), or a side task of it while
        that has a request open. None for an `X-Lab-Task` that is no task name: the name is refused for the
        trace, not the request, which is forwarded and not recorded."""
        named = request.headers.get(TASK_HEADER)
        if named and not is_task_name(named):
            shown = ascii(named[:40]) + ("..." if len(named) > 40 else "")
            warn(
                f"{request.path}: {TASK_HEADER} {shown} is no task name (up to 128 printable ASCII characters but ~): "
                "forwarded, not recorded"
            )
            return None
        task = side_task(named or self.rec.task, self._busy())
        if not named and task != self.rec.task and not self.told_overlap:
            self.told_overlap = True  # once: agents without a header of their own overlap all the time
            warn(
                f"a request came while task {self.rec.task!r} had one open: recorded as {task!r}; when several agents "
                f"share the recorder, give each a task of its own: an {TASK_HEADER} per agent"
            )
        return task

    def _busy(self) -> set[str]:
        """The tasks with a request open: a request that arrives meanwhile is no next step of theirs."""
        return {x.task for x in self.exchanges if x.open()}

    def _failed(self, request: web.Request, e: httpx.HTTPError) -> web.Response:
        """The upstream could not be reached, or sent no answer within record.read_timeout_s."""
        why = redact_url(f"{type(e).__name__}: {e}".rstrip(": "))
        warn(f"upstream {self.rec.shown_upstream} failed for {request.method} {request.path}: {why}")
        if isinstance(e, httpx.TimeoutException) and not isinstance(e, httpx.ConnectTimeout):
            wait = self.rec.limits.read_timeout_s
            return error_response(
                504, f"upstream {self.rec.shown_upstream} sent nothing for {wait:g} s ({why})", "upstream_timeout"
            )
        return error_response(502, f"upstream {self.rec.shown_upstream} unreachable ({why})", "upstream_error")

    def settle(self, x: Exchange, reply: Reply | None, why: str = "", status: int = 200) -> None:
        """Record the exchange once: a step when the agent received a whole reply, else (a reply with a flaw,
        `why`) nothing, its number given back, and one warning line saying why."""
        if x.settled:
            return
        x.settled = True
        ended = time.monotonic()
        if why := unrecorded(reply, why, status):
            self._abandon(x, why)
            return
        assert reply is not None and reply.message is not None
        try:
            row = ConversationStep(
                task_id=x.task,
                step=x.step,
                request=x.sent,
                reply=reply.message,
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                started_utc=x.started_utc,
                elapsed_s=ended - x.t0,
            )
        except ValidationError as e:
            self._abandon(x, f"not a chat-completions request ({validation_line(e, limit=1)})")
            return
        try:
            self.log.finish(row, ended, loop=SIDE not in x.task)
        except ValueError as e:  # nested deeper than JSON is written, or a string no UTF-8 holds
            self._abandon(x, f"cannot be written ({error_text(e)})")

    def _abandon(self, x: Exchange, why: str) -> None:
        self.log.abandon(x.task, x.step)
        warn(f"task {x.task!r} step {x.step}: {why}: not recorded")

    async def _pass_back(
        self, request: web.Request, upstream: httpx.Response, x: Exchange | None
    ) -> web.StreamResponse:
        """The upstream's answer, passed back as it arrives (a JSON body once whole, a stream chunk by chunk but
        for its last chunk, held back): the exchange is settled while the agent is still there, before the last
        bytes go, so an agent that has its reply finds it in the trace."""
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP}
        if mime_of(upstream.headers.get("content-type", "")) != "text/event-stream":
            return await self._pass_body(request, upstream, headers, x)
        out = web.StreamResponse(status=upstream.status_code, headers=headers)
        await out.prepare(request)
        stream = StreamAssembler(limit=self.max_reply)
        held, held_finished = None, False
        try:
            async for raw in upstream.aiter_raw():
                if held is not None:
                    await out.write(held)
                    if x is not None:
                        x.delivered = held_finished
                if x is not None:
                    stream.feed(raw)
                held, held_finished = raw, stream.finished
        except httpx.HTTPError as e:
            why = redact_url(f"{type(e).__name__}: {e}".rstrip(": "))
            warn(f"upstream cut the stream of {request.path} short: {why}")
            if request.transport is not None:
                request.transport.close()  # the agent sees a broken stream, not a clean end
            return out
        except ConnectionError:
            if x is not None and x.delivered:  # the agent hung up once its reply was whole: it has it
                self.settle(x, stream.reply(), self._stream_flaw(stream), upstream.status_code)
            else:
                warn(f"the agent hung up during the stream of {request.path}")
            return out
        if x is not None:
            if x.delivered or agent_there(request):
                stream.close()
                self.settle(x, stream.reply(), self._stream_flaw(stream), upstream.status_code)
            else:
                warn(f"the agent hung up during the stream of {request.path}")
        with contextlib.suppress(ConnectionError):  # recorded: an agent that hangs up now had its reply
            if held is not None:
                await out.write(held)
            await out.write_eof()
        return out

    def _stream_flaw(self, stream: StreamAssembler) -> str:
        if stream.error is not None:
            return f"the stream carried an error ({stream.error})"
        if stream.overflow:
            return f"a reply over record.max_reply_mib ({self.rec.limits.max_reply_mib} MiB), passed on"
        if stream.flaw is not None:
            return stream.flaw
        return "" if stream.finished else "the stream ended before choice 0's finish_reason"

    async def _pass_body(
        self, request: web.Request, upstream: httpx.Response, headers: dict[str, str], x: Exchange | None
    ) -> web.StreamResponse:
        chunks: list[bytes] = []
        size = 0
        try:
            async for raw in upstream.aiter_raw():
                size += len(raw)
                if size > self.max_reply:
                    limit = self.rec.limits.max_reply_mib
                    warn(
                        f"the answer to {request.path} is over record.max_reply_mib ({limit} MiB): the agent gets a 502"
                    )
                    return error_response(
                        502, f"the upstream's answer is over record.max_reply_mib ({limit} MiB)", "reply_too_large"
                    )
                chunks.append(raw)
        except httpx.HTTPError as e:
            return self._failed(request, e)
        content = b"".join(chunks)
        out = web.Response(body=content, status=upstream.status_code, headers=headers)
        if not agent_there(request):  # it gave up waiting (and may retry): it never sees this answer
            warn(f"the agent hung up before the answer to {request.path} reached it")
            return out
        if x is not None:
            self.settle(x, reply_of_body(chat_body(content)), status=upstream.status_code)
        with contextlib.suppress(ConnectionError):
            await out.prepare(request)
            await out.write_eof()
        return out


def make_app(recorder: Recorder) -> web.Application:
    app = web.Application(client_max_size=recorder.rec.limits.max_request_mib << 20)
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    return app


# every signal whose default is to end the process, but those of a crash (SIGSEGV, SIGBUS, ...)
ENDING = tuple(
    getattr(signal, name)
    for name in [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGTERM",
        "SIGUSR1",
        "SIGUSR2",
        "SIGALRM",
        "SIGVTALRM",
        "SIGPROF",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGPWR",
    ]
    if hasattr(signal, name)
)


async def serve(rec: Recording, ready: Callable[[str], None] = print) -> int:
    """Record until a signal ends it; the number of steps written."""
    if not is_task_name(rec.task):
        raise UsageError(f"--task {rec.task[:140]!r}: up to 128 printable ASCII characters but ~")
    log = ConversationLog.open(rec.trace, rec.append)
    # no keep-alive upstream: llama-server closes a connection after a stream, and a reused one then fails
    limits = httpx.Limits(max_keepalive_connections=0)
    timeout = httpx.Timeout(connect=10.0, read=rec.limits.read_timeout_s, write=None, pool=None)
    async with httpx.AsyncClient(limits=limits, timeout=timeout, follow_redirects=False) as client:
        runner = web.AppRunner(make_app(Recorder(rec, log, client)), access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in ENDING:
            loop.add_signal_handler(sig, stop.set)
        try:
            try:
                await web.TCPSite(runner, rec.host, rec.port).start()
            except OSError as e:
                raise RecordError(f"cannot listen on {rec.host}:{rec.port}: {e.strerror or e}") from e
            if (exposed := rec.exposure()) is not None:
                warn(exposed)
            ready(rec.banner())
            await stop.wait()
        finally:
            with contextlib.suppress(Exception):
                await runner.cleanup()  # exchanges still running get a moment; those that finish are written
            for sig in ENDING:
                loop.remove_signal_handler(sig)
    return log.written


def record(rec: Recording) -> int:
    return asyncio.run(serve(rec, lambda line: print(line, flush=True)))
