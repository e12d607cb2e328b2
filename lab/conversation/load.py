"""Reading a conversation trace: every line a `ConversationStep`, checked before anything runs.

A bad line is one error naming the file, line and step (a step that is not valid chat JSON, an image that
does not load); the steps come back grouped by task, in step order, with their tool times (lines of their own)
and every image as a data URL (an image given as a file path is read relative to the trace; every image is
checked to be a PNG that decodes). A last line cut mid-write is left out with a warning.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.core.errors import LabError, validation_line, warn
from lab.core.jsonl import parse_jsonl, read_bounded
from lab.core.runs import RunError
from lab.core.schemas import ConversationStep, StepToolTime
from lab.engine.media import data_url
from lab.engine.png import png_check


class ConversationError(LabError):
    pass


def is_conversation(path: Path) -> bool:
    """A conversation trace (its first line carries a chat `request`) rather than a trace of step shapes (a first
    line no parser reads is left to the reader of step shapes, which names it)."""
    first = trace_bytes(path).lstrip().partition(b"\n")[0]  # its first line that is not blank
    try:
        parsed = json.loads(first)
    except (ValueError, RecursionError):  # not JSON or UTF-8, a number or a nesting past the parser's limits
        return False
    return isinstance(parsed, dict) and "request" in parsed


def trace_bytes(path: Path) -> bytes:
    """A trace's bytes, bounded as a run's raw file is (lab.core.jsonl.read_bounded): one error naming it if not."""
    try:
        return read_bounded(path)
    except RunError as e:
        raise ConversationError(str(e)) from None


def trace_rows(path: Path, data: bytes, torn_ok: bool = False) -> list[tuple[int, Any]]:
    """A trace's lines as JSON, each with its line number (lab.core.jsonl.parse_jsonl: a line no parser reads is
    one error naming the file and line); with `torn_ok` a torn last line is left out."""
    try:
        return parse_jsonl(path, data, None, torn_ok)
    except RunError as e:
        raise ConversationError(str(e)) from None


@dataclass
class TraceLines:
    """A conversation trace's lines, each with where it is (`file:line`): its steps, its tool times, and the bytes
    of a torn last line left out (0: the file ends with a whole line)."""

    steps: list[tuple[str, ConversationStep]]
    tool_times: list[tuple[str, StepToolTime]]
    torn: int = 0


def read_trace(path: Path) -> TraceLines:
    """Every line checked (one error naming the file and line); a last line cut mid-write (by a kill or a full
    disk: no newline, no JSON) is left out, never read as a step."""
    data = trace_bytes(path)
    rows = trace_rows(path, data, torn_ok=True)
    tail = data[data.rfind(b"\n") + 1 :]
    kept = bool(rows) and rows[-1][0] == data.count(b"\n") + 1  # the last line, when it has no newline
    out = TraceLines([], [], 0 if kept or not tail.strip() else len(tail))
    for i, parsed in rows:
        where = f"{path}:{i}"
        try:
            if isinstance(parsed, dict) and "request" not in parsed and "tool_s" in parsed:
                out.tool_times.append((where, StepToolTime.model_validate(parsed)))
            else:
                out.steps.append((where, ConversationStep.model_validate(parsed)))
        except (ValueError, RecursionError) as e:  # ValidationError among them
            raise ConversationError(f"{where}: not a conversation step: {validation_line(e, root='step')}") from None
    return out


def load_conversation(path: Path) -> dict[str, list[ConversationStep]]:
    """The trace's tasks, each a list of steps in step order with their tool times, images resolved to data
    URLs."""
    if not path.is_file():
        raise ConversationError(f"{path}: no such conversation trace")
    lines = read_trace(path)
    if lines.torn:
        warn(
            f"{path}: its last line was cut mid-write ({lines.torn} bytes, no newline): left out, every whole line kept"
        )
    tasks: dict[str, dict[int, ConversationStep]] = {}
    for where, step in lines.steps:
        where += f": task {step.task_id!r} step {step.step}"
        if step.step in tasks.setdefault(step.task_id, {}):
            raise ConversationError(f"{where}: a duplicate step")
        try:
            step.request["messages"] = [_resolved(m, path.parent) for m in step.request["messages"]]
        except ConversationError as e:
            raise ConversationError(f"{where}: {e}") from e
        tasks[step.task_id][step.step] = step
    for where, tool in lines.tool_times:
        owner = tasks.get(tool.task_id, {}).get(tool.step)
        if owner is None:
            raise ConversationError(f"{where}: the tool time of task {tool.task_id!r} step {tool.step}, no such step")
        if owner.tool_s is not None:
            raise ConversationError(f"{where}: task {tool.task_id!r} step {tool.step} has a tool time already")
        owner.tool_s = tool.tool_s
    if not tasks:
        raise ConversationError(f"{path}: no steps")
    return {t: [steps[k] for k in sorted(steps)] for t, steps in tasks.items()}


def images(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The image_url parts of a message."""
    content = message.get("content")
    if isinstance(content, list):
        yield from (p for p in content if isinstance(p, dict) and p.get("type") == "image_url")


def image_bytes(part: dict[str, Any]) -> bytes:
    """The bytes of a resolved image part (a data URL)."""
    return base64.b64decode(str(part["image_url"]["url"]).partition(",")[2])


def _resolved(message: dict[str, Any], base: Path) -> dict[str, Any]:
    """The message with every image a checked data URL (a path is read relative to the trace)."""
    for part in images(message):
        url = part.get("image_url", {}).get("url") if isinstance(part.get("image_url"), dict) else None
        if not isinstance(url, str) or not url:
            raise ConversationError("an image_url part without a url")
        if url.startswith("data:"):
            head, _, data = url.partition(",")
            try:
                raw = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError) as e:
                raise ConversationError(f"an image data URL that does not decode ({head})") from e
        elif "://" in url:
            raise ConversationError(f"image {url}: the lab replays offline; give a data URL or a file path")
        else:
            file = (base / url).resolve()
            try:
                raw = file.read_bytes()
            except OSError as e:
                raise ConversationError(f"image {url} does not load ({e.strerror or e})") from e
        _check_image(raw, url)
        part["image_url"] = {**part["image_url"], "url": data_url(raw)}
    return message


def _check_image(raw: bytes, name: str) -> None:
    shown = name if len(name) < 60 else name[:57] + "..."
    try:
        width, height = png_check(raw)
    except (ValueError, IndexError, struct.error) as e:
        raise ConversationError(f"image {shown} does not load: {e}") from e
    if width <= 0 or height <= 0:
        raise ConversationError(f"image {shown} does not load: {width}x{height}")
