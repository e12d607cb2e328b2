"""A conversation's steps in tokens, through the model's own chat template and tokenizer (the server's
`/apply-template` and `/tokenize`), as the server itself would see them:

    prompt    the step's request templated (with the generation prompt) and tokenized; each image the cells its
              projector grid gives (nx * ny + 2 markers), compared by the image's bytes
    reply     the reply's content tokens (what the server generated, and so held in its cache afterwards)
    common    cells the prompt shares with the previous step's prompt + reply: how much any prefix cache could
              reuse (0 at a task's first step)
    L, new    the optimum's prior depth and new part: L = common, new = prompt - common
    diverged  the prompt departs from the previous prompt + reply before its end (an eviction, a cut), and
              `at_message` is the first message that differs, `cause` why (lab.conversation.causes)
    before    the cells before the last user message, where the server cuts a batch to checkpoint (the pin's
              patched `/apply-template` returns the template's message spans; None when it marks none)
    users     each user message's first cell, as a newer server finds them: the template's message delimiters
              (the newer patched `/apply-template` returns them) matched in the prompt's tokens
    held      the prompt and the reply as one text, as today's replay holds them in the slot
    preserve  on a server with `--reasoning-preserve` (on by default there; everything above is with it):
              every step also as the server renders it without (`--no-reasoning-preserve`: a template that
              supports it drops earlier turns' reasoning), and what it shares with the previous one then, so
              whether a departure is the template's or the agent's

A step that does not fit the server's context (prompt + reply beyond ctx_size) is refused, naming the step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.conversation.causes import Cause, departure_cause
from lab.conversation.load import ConversationError, image_bytes, images, load_conversation
from lab.core.gguf_io import read_gguf_metadata
from lab.core.schemas import ConversationStep, TraceStep
from lab.core.settings import Settings
from lab.engine.build import EngineInfo, build_engine
from lab.engine.imagegrid import IMAGE_MARKERS, ImageGeometry
from lab.engine.png import png_size
from lab.engine.server import LlamaServer, adhoc_server, mmproj_args
from lab.engine.serverflags import read_defaults
from lab.models.hparams import HparamsError, hparams_of
from lab.models.resolve import resolve_model, resolve_projector

Unit = int | tuple[str, int]  # a token id, or (an image's digest, the cells it takes)
# the request's fields besides its messages that the chat template renders into the prompt (a tool's schema
# can be thousands of tokens): every arm sends them as recorded
TEMPLATE_FIELDS = ("tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs")


def template_fields(request: dict[str, Any]) -> dict[str, Any]:
    return {k: request[k] for k in TEMPLATE_FIELDS if k in request}


def cells(units: list[Unit]) -> int:
    return sum(u[1] if isinstance(u, tuple) else 1 for u in units)


def common_prefix(a: Sequence[object], b: Sequence[object]) -> int:
    """How many leading entries two sequences share: units (an image counts whole or not at all) or cells (an
    image's cells match all or none: its digest is in each)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class StepTokens:
    """One step of a conversation in tokens (see the module's docstring)."""

    task_id: str
    step: int
    prompt: list[Unit]
    reply: list[int]
    common: int = 0
    previous: int = 0  # cells of the previous step's prompt + reply
    at_message: int | None = None
    images: int = 0
    completion_tokens: int | None = None  # as recorded (the decode length), else the reply's tokens
    tool_s: float | None = None  # the agent's own time after the reply, as recorded
    messages: list[dict[str, Any]] = field(default_factory=list, repr=False)
    template: dict[str, Any] = field(default_factory=dict, repr=False)  # TEMPLATE_FIELDS of the request
    text: str = field(default="", repr=False)  # the templated prompt, one media marker per image
    marker: str = field(default="", repr=False)  # the media marker in `text` (each server process has its own)
    shots: list[bytes] = field(default_factory=list, repr=False)
    reply_text: str = field(default="", repr=False)
    shape: TraceStep | None = field(default=None, repr=False)  # a step-shape trace's step (no prompt recorded)
    before_user: int | None = None  # cells before the last user message (None: the template does not mark it)
    user_starts: tuple[int, ...] = ()  # each user message's first cell, by the template's delimiters
    common_unpreserved: int | None = None  # `common` with --no-reasoning-preserve (None: the server has no such flag)
    held: list[Unit] = field(default_factory=list, repr=False)  # the prompt and reply as one text (today's slot)
    cause: Cause | None = None  # why the prompt departs from the previous one and its reply (lab.conversation.causes)

    @property
    def cells(self) -> int:
        return cells(self.prompt)

    @property
    def new(self) -> int:
        return self.cells - self.common

    @property
    def diverged(self) -> bool:
        return self.at_message is not None

    @property
    def n_out(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else len(self.reply)

    @property
    def preserve_effect(self) -> str:
        """What --reasoning-preserve does to this step's departure: `-` (no such flag, or no difference), or what
        the step shares without it against with it."""
        if self.common_unpreserved is None or self.common_unpreserved == self.common:
            return "-"
        return f"{self.common_unpreserved} without, {self.common} with"

    def record(self) -> dict[str, Any]:
        """What `lab trace derive` prints of the step, JSON-ready (`--json`)."""
        return {
            "task_id": self.task_id,
            "step": self.step,
            "prompt_cells": self.cells,
            "common": self.common,
            "new": self.new,
            "diverged_at": self.at_message,
            "cause": self.cause,
            "images": self.images,
            "reply_tokens": self.n_out,
            "common_without_reasoning_preserve": self.common_unpreserved,
        }


class Templater:
    """The server's chat template and tokenizer, asked once per distinct text."""

    def __init__(self, srv: LlamaServer, projector: Path | None) -> None:
        self.srv = srv
        self.geometry = ImageGeometry.of_projector(projector) if projector else None
        self.marker: str | None = None
        self.pieces: dict[tuple[str, bool], list[int]] = {}  # text between images repeats from step to step
        self.image_pos: dict[str, int] = {}  # the positions each image takes (M-RoPE models: fewer than its cells)
        self.mrope = False

    def prompt(
        self, messages: list[dict[str, Any]], template: dict[str, Any] | None = None
    ) -> tuple[list[Unit], str, list[bytes]]:
        """(units, the templated text with one media marker per image, the images in order); `template`: the
        request's TEMPLATE_FIELDS."""
        units, text, shots, *_ = self.rendered(messages, template)
        return units, text, shots

    def rendered(
        self, messages: list[dict[str, Any]], template: dict[str, Any] | None = None
    ) -> tuple[list[Unit], str, list[bytes], int | None, tuple[int, ...]]:
        """`prompt`'s three, the cells before the last user message (the message spans a server at the pin
        returns; None when the template marks none) and each user message's first cell (the delimiters a newer
        server returns): where the server cuts a batch to keep a checkpoint."""
        r = self.srv.client.post("/apply-template", json={"messages": messages, **(template or {})})
        if r.status_code != 200:
            raise ConversationError(f"the server's chat template refused the request: {_error(r.text)}")
        text = str(r.json()["prompt"])
        shots = [image_bytes(p) for m in messages for p in images(m)]
        units = self.units(text, shots)
        starts = self.user_starts(units, r.json().get("message_delimiters") or [])
        users = [int(s["pos"]) for s in r.json().get("message_spans", []) if s.get("role") == "user"]
        if not users:
            return units, text, shots, None, starts
        prefix = text.encode()[: users[-1]].decode(errors="ignore")
        return units, text, shots, cells(self.units(prefix, shots[: prefix.count(self.marker or "\0")])), starts

    def user_starts(self, units: list[Unit], delimiters: list[dict[str, Any]]) -> tuple[int, ...]:
        """Each user message's first cell, as the server finds them: at every cell the first delimiter whose
        tokens follow names the role starting there; an image's cells match nothing."""
        delims = [
            (str(d.get("role")), self._tokens(str(d["delimiter"]), False)) for d in delimiters if d.get("delimiter")
        ]
        flat: list[int | None] = []
        for u in units:
            flat += [None] * u[1] if isinstance(u, tuple) else [u]
        out = []
        for i in range(len(flat)):
            role = next((role for role, toks in delims if toks and flat[i : i + len(toks)] == toks), None)
            if role == "user":
                out.append(i)
        return tuple(out)

    def units(self, text: str, shots: list[bytes]) -> list[Unit]:
        """A templated text's units: its pieces between media markers tokenized, each image its cells."""
        if shots and self.marker is None:
            self.marker = str(self.srv.props()["media_marker"])
        pieces = text.split(self.marker) if shots and self.marker else [text]
        if len(pieces) != len(shots) + 1:
            raise ConversationError(f"the template placed {len(pieces) - 1} image markers for {len(shots)} images")
        units: list[Unit] = []
        for i, piece in enumerate(pieces):
            units += self._tokens(piece, i == 0) if piece else []
            if i < len(shots):
                units.append(self._image(shots[i]))
        return units

    def _tokens(self, piece: str, add_special: bool) -> list[int]:
        key = (piece, add_special)
        if key not in self.pieces:
            self.pieces[key] = self.srv.tokenize(piece, add_special=add_special)
        return self.pieces[key]

    def _image(self, raw: bytes) -> tuple[str, int]:
        if self.geometry is None:
            raise ConversationError("a step has a screenshot but no vision projector is loaded (--mmproj)")
        digest = hashlib.sha256(raw).hexdigest()[:16]
        n_cells, n_pos = self.geometry.tokens(*png_size(raw))
        self.image_pos[digest] = n_pos + IMAGE_MARKERS if self.mrope else n_cells  # the markers are text
        return digest, n_cells

    def reply(self, reply: dict[str, Any] | None) -> list[int]:
        text = reply_text(reply)
        return self.srv.tokenize(text) if text else []


def reply_text(reply: dict[str, Any] | None) -> str:
    """The text a reply's content holds (parts joined)."""
    content = (reply or {}).get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content) if content else ""


UNPRESERVED = {"preserve_reasoning": False}  # --no-reasoning-preserve, as a request's template kwargs say it


def derive_task(
    t: Templater, steps: list[ConversationStep], ctx_size: int, trace: str, kwargs: dict[str, Any] | None = None
) -> list[StepTokens]:
    """The task's steps in tokens, each against the one before it; `kwargs`: chat template kwargs the server's own
    flags add (a request's own win), which render the prompts but are not sent with the request."""
    out: list[StepTokens] = []
    for s in steps:
        where = f"{trace}: task {s.task_id!r} step {s.step}"
        try:
            msgs, template = s.request["messages"], template_fields(s.request)
            own = template.get("chat_template_kwargs", {})
            rendering = {**template, "chat_template_kwargs": {**kwargs, **own}} if kwargs else template
            units, text, shots, st_before_user, starts = t.rendered(msgs, rendering)
            st = StepTokens(s.task_id, s.step, units, t.reply(s.reply), messages=msgs, text=text, shots=shots)
            st.template, st.before_user, st.user_starts = template, st_before_user, starts
            st.marker = t.marker or ""
            st.reply_text = reply_text(s.reply)
            st.held = t.units(text + st.reply_text, shots)
        except ConversationError as e:
            raise ConversationError(f"{where}: {e}") from e
        st.images = sum(1 for m in msgs for _ in images(m))
        st.completion_tokens, st.tool_s = s.completion_tokens, s.tool_s
        if st.cells + max(st.n_out, 1) > ctx_size:
            raise ConversationError(
                f"{where}: {st.cells} prompt + {st.n_out} reply tokens do not fit the context ({ctx_size})"
            )
        if out:
            prev = out[-1]
            held = prev.prompt + list(prev.reply)
            st.common, st.previous = cells(st.prompt[: common_prefix(st.prompt, held)]), cells(held)
            st.at_message = first_changed(prev.messages, prev_reply(steps, prev.step), msgs)
            if st.common >= st.previous:  # other messages, the same tokens (a template that renders them alike)
                st.at_message = None
            if st.at_message is None and st.common < cells(prev.prompt):
                st.at_message = len(prev.messages)  # same messages, a template that renders them differently
            if st.at_message is not None:
                reply = prev_reply(steps, prev.step)
                st.cause = departure_cause(prev.messages, reply, prev.template, msgs, template, st.at_message)
        out.append(st)
    return out


def prev_reply(steps: list[ConversationStep], step: int) -> dict[str, Any] | None:
    return next((s.reply for s in steps if s.step == step), None)


def first_changed(before: list[dict[str, Any]], reply: dict[str, Any] | None, now: list[dict[str, Any]]) -> int | None:
    """The first message of `now` that is not the previous request's (followed by its reply), or None when
    `now` extends it."""
    held = [*before, *([reply] if reply else [])]
    for i, (a, b) in enumerate(zip(held, now, strict=False)):
        if _comparable(a) != _comparable(b):
            return i
    return None if len(now) >= len(held) else len(now)


def _comparable(m: dict[str, Any]) -> tuple[Any, ...]:
    return m.get("role"), m.get("content"), m.get("tool_calls"), m.get("tool_call_id")


def _error(text: str) -> str:
    return text.strip().splitlines()[0][:200] if text.strip() else "no reason given"


def has_images(tasks: dict[str, list[ConversationStep]]) -> bool:
    return any(True for steps in tasks.values() for s in steps for m in s.request["messages"] for _ in images(m))


@dataclass
class Derived:
    """A conversation's steps as tokens, the vision projector they need (None: no screenshot), and the log of
    the server that derived them."""

    tasks: dict[str, list[StepTokens]]
    projector: Path | None
    log: Path
    image_pos: dict[str, int] = field(default_factory=dict)  # the positions each image takes
    # the steps as a server with --no-reasoning-preserve renders them (None: the server has no such flag)
    unpreserved: dict[str, list[StepTokens]] | None = None


def derive_tasks(
    settings: Settings, engine: EngineInfo, model: Path, tasks: dict[str, list[ConversationStep]], trace: str
) -> Derived:
    """Every step's tokens through a lab server of the model (with the settings' vision projector when a step has
    a screenshot). The server only templates and tokenizes."""
    projector = resolve_projector(settings) if has_images(tasks) else None
    extra = mmproj_args(projector)
    with adhoc_server(engine, model, settings.server, settings.cache_dir, "trace-derive", extra) as srv:
        t = Templater(srv, projector)
        t.mrope = is_mrope(model)
        ctx = settings.server.ctx_size
        derived = {k: derive_task(t, v, ctx, trace) for k, v in tasks.items()}
        off = None
        if read_defaults(engine.server, engine.lib_dir).reasoning_preserve is not None:
            off = {k: derive_task(t, v, ctx, trace, UNPRESERVED) for k, v in tasks.items()}
            for k, steps in derived.items():
                for st, other in zip(steps, off[k], strict=True):
                    st.common_unpreserved = other.common
        return Derived(derived, projector, srv.log_path, t.image_pos, off)


def is_mrope(model: Path) -> bool:
    """Whether the model places an image on fewer positions than its cells (M-RoPE)."""
    try:
        return hparams_of(read_gguf_metadata(model)).mrope
    except HparamsError:
        return False


def derive_conversation(settings: Settings, path: Path) -> dict[str, list[StepTokens]]:
    """`lab trace derive`: a conversation trace loaded and derived (see derive_tasks)."""
    tasks = load_conversation(path)
    engine = build_engine(settings.engine, settings.cache_dir, flavor="release", quiet=True)
    return derive_tasks(settings, engine, resolve_model(settings), tasks, str(path)).tasks
