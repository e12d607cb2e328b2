"""Client side of image steps: prompts with a screenshot in the new part of a fake-prefix request.

A multimodal /completion prompt is a string with the server's media marker (random per server process,
from /props `media_marker`) plus base64 images, so the L-token prefix has to be text that tokenizes to
exactly L tokens: common single-token words (" the", " of", ...), checked with the server's tokenizer.
mtmd wraps each image in <|vision_start|> ... <|vision_end|> (one token each with the Qwen vocab), so an
image adds nx*ny image tokens + 2 marker tokens to prompt_n, and advances max(nx, ny) positions (M-RoPE).
"""

from __future__ import annotations

import base64
import functools
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.engine.contract import Arm, ArmResult, Timings, arm_reason, post_all
from lab.engine.png import make_png
from lab.engine.server import LlamaServer
from lab.engine.tinyvision import image_grid

WORDS = (
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " with", " as", " was", " on", " be",
    " at", " by", " this", " had", " not", " are", " but", " from", " or", " have", " an", " they", " which",
)  # fmt: skip
IMAGE_MARKERS = 2  # <|vision_start|>, <|vision_end|>


class MediaError(RuntimeError):
    pass


@functools.cache
def single_token_words(srv: LlamaServer) -> list[str]:
    """The WORDS that are one token for this server's tokenizer (asked once per server)."""
    return [w for w in WORDS if len(srv.tokenize(w)) == 1]


def filler_text(srv: LlamaServer, n: int, seed: int = 0) -> str:
    """Text of exactly n tokens for this server's tokenizer (checked, never assumed)."""
    words = single_token_words(srv)
    rng = random.Random(seed)
    text = "".join(rng.choice(words) for _ in range(n))
    got = len(srv.tokenize(text))
    if got != n:
        raise MediaError(f"filler of {n} words tokenized to {got} tokens")
    return text


def image_tokens(width: int, height: int) -> tuple[int, int]:
    """(prompt tokens, positions) an image adds: nx*ny + the two markers, and max(nx, ny) positions."""
    nx, ny = image_grid(width, height)
    return nx * ny + IMAGE_MARKERS, max(nx, ny)


def media_prompt(srv: LlamaServer, before: str, pngs: list[bytes], after: str) -> dict[str, Any]:
    """`before` + one media marker per image + `after` (images adjacent only if the caller asks)."""
    marker = str(srv.props()["media_marker"])
    return {
        "prompt_string": before + marker * len(pngs) + after,
        "multimodal_data": [base64.b64encode(p).decode() for p in pngs],
    }


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


class LogTail:
    """What the server logged since the last call: mtmd reports the vision encode and the LM prefill of the
    image tokens only in its log ("image slice encoded in N ms", "image decoded (batch i/n) in N ms")."""

    ENCODED = re.compile(r"slice encoded in (\d+) ms")
    DECODED = re.compile(r"decoded \(batch \d+/\d+\) in (\d+) ms")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def read(self) -> str:
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        self.offset += len(data)
        return data.decode(errors="replace")

    def image_ms(self) -> tuple[float | None, float | None]:
        """(encode ms, image-token decode ms) logged since the last call; None when no image was processed."""
        text = self.read()
        enc = [int(m) for m in self.ENCODED.findall(text)]
        dec = [int(m) for m in self.DECODED.findall(text)]
        return (float(sum(enc)) if enc else None), (float(sum(dec)) if dec else None)


@dataclass(frozen=True)
class ImageStep:
    """One image step: L prefix tokens of text, a screenshot, then `new` tokens of text."""

    prefix_text: str
    L: int
    png: bytes
    size: tuple[int, int]
    new_text: str
    new: int

    @property
    def expected_new(self) -> int:
        """prompt_n of a fake or genuine-hit request: derived, not `new + 8` (seed 000's check)."""
        return image_tokens(*self.size)[0] + self.new


def image_step(srv: LlamaServer, L: int, new: int, size: tuple[int, int], seed: int) -> ImageStep:
    return ImageStep(
        prefix_text=filler_text(srv, L, seed), L=L, png=make_png(*size, seed=seed), size=size,
        new_text=filler_text(srv, new, seed + 1), new=new,
    )  # fmt: skip


def run_image_arm(
    srv: LlamaServer, arm: Arm, step: ImageStep, tail: LogTail
) -> tuple[ArmResult, float | None, float | None]:
    """One sample of one arm with the screenshot in the new part; returns (result, encode ms, image decode ms)."""
    body: dict[str, Any] = {
        "prompt": media_prompt(srv, step.prefix_text, [step.png], step.new_text),
        "n_predict": 1, "temperature": 0.0, "stream": False,
    }  # fmt: skip
    if arm == "baseline":
        bodies = [{**body, "cache_prompt": False}]
    elif arm == "fake":
        bodies = [{**body, "cache_prompt": False, "n_fake_cached": step.L}]
    else:
        post_all(srv, [{**body, "prompt": step.prefix_text, "cache_prompt": True}])  # the real prefix prefill
        bodies = [{**body, "cache_prompt": True}]
    tail.read()  # only the timed request's log lines count
    resp, reason = post_all(srv, bodies)
    if resp is None:
        return ArmResult(arm=arm, L=step.L, new=step.expected_new, ok=False, reason=reason), None, None
    encode_ms, decode_ms = tail.image_ms()
    t = Timings.model_validate(resp.json()["timings"])
    reason = arm_reason(arm, t, step.L, step.expected_new)
    if not reason and encode_ms is None:
        reason = "no image encode in the server log: was the image dropped (wrong media marker)?"
    result = ArmResult(arm=arm, L=step.L, new=step.expected_new, ok=not reason, reason=reason, timings=t)
    return result, encode_ms, decode_ms
