"""Image steps: prompts with a screenshot in the new part of a fake-prefix request.

A multimodal /completion prompt is a string with the server's media marker (random per server process,
from /props `media_marker`) plus base64 images, so the L-token prefix has to be text that tokenizes to
exactly L tokens: common single-token words (" the", " of", ...), checked with the server's tokenizer.
How many tokens an image adds comes from the loaded projector's geometry (lab.engine.imagegrid).
"""

from __future__ import annotations

import base64
import functools
import random
from typing import Any

from lab.core.errors import LabError
from lab.engine.contract import Step
from lab.engine.imagegrid import ImageGeometry
from lab.engine.png import make_png
from lab.engine.server import LlamaServer

# a word list, many to a line for the formatter to skip
WORDS = (
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " with", " as", " was", " on", " be",
    " at", " by", " this", " had", " not", " are", " but", " from", " or", " have", " an", " they", " which",
)  # fmt: skip


class MediaError(LabError):
    pass


@functools.cache
def single_token_words(srv: LlamaServer) -> list[str]:
    """The WORDS that are one token for this server's tokenizer (asked once per server)."""
    return [w for w in WORDS if len(srv.tokenize(w)) == 1]


def filler_text(srv: LlamaServer, n: int, seed: int = 0) -> str:
    """Text of exactly n tokens for this server's tokenizer (checked, never assumed)."""
    words = single_token_words(srv)
    if not words:
        raise MediaError("none of the filler words is a single token for this model's tokenizer")
    rng = random.Random(seed)
    text = "".join(rng.choice(words) for _ in range(n))
    got = len(srv.tokenize(text))
    if got != n:
        raise MediaError(f"filler of {n} words tokenized to {got} tokens")
    return text


def media_prompt(srv: LlamaServer, before: str, pngs: list[bytes], after: str) -> dict[str, Any]:
    """`before` + one media marker per image + `after` (images adjacent only if the caller asks)."""
    marker = str(srv.props()["media_marker"])
    return {
        "prompt_string": before + marker * len(pngs) + after,
        "multimodal_data": [base64.b64encode(p).decode() for p in pngs],
    }


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def image_step(
    srv: LlamaServer, geom: ImageGeometry, prefix_text: str, L: int, png: bytes, size: tuple[int, int], new_text: str
) -> Step:
    """L tokens of text (`prefix_text`), the screenshot, then `new_text`. The new part a fake or genuine-hit
    request decodes is derived from the projector's grid, not assumed: nx*ny + 2 markers + the text's tokens."""
    new = geom.tokens(*size)[0] + len(srv.tokenize(new_text))
    return Step(
        L=L, new=new, prompt=media_prompt(srv, prefix_text, [png], new_text), prefix=prefix_text, has_image=True
    )


def synthetic_image_step(
    srv: LlamaServer, geom: ImageGeometry, L: int, new: int, size: tuple[int, int], seed: int
) -> Step:
    """A generated screenshot of `size` between L and `new` tokens of filler text (deterministic per seed)."""
    png, new_text = make_png(*size, seed=seed), filler_text(srv, new, seed + 1)
    return image_step(srv, geom, filler_text(srv, L, seed), L, png, size, new_text)
