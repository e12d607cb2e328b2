"""The two controls of a conversation step, as requests of the one server contract (lab.engine.contract),
through the chat endpoint like the agent's own request:

    optimum   the fake prefix: the first `common` cells (all a perfect prefix cache could reuse) fabricated as
              cached (`n_fake_cached`), only the new part prefilled, against the full prior depth
    no cache  the baseline: the whole prompt prefilled from empty

The engine fabricates text only, so a screenshot inside the shared part is replaced, for the optimum, by filler
text of as many tokens as the image's cells; the prompt is derived again and L is its length less the step's
new part (it can differ from `common` by the image markers the template wraps a screenshot in: `L` is what
the request really fabricated). Images in the new part stay images.
"""

from __future__ import annotations

import copy
from typing import Any

from lab.conversation.derive import StepTokens, Templater, cells
from lab.conversation.load import image_bytes
from lab.core.schemas import ConversationArm
from lab.engine.contract import Step
from lab.engine.media import filler_text
from lab.engine.png import png_size

ARMS: tuple[ConversationArm, ...] = ("today", "optimum", "no_cache")  # in the order tables show them


def no_cache_step(st: StepTokens) -> Step:
    """All of the step's prompt, prefilled from empty (the baseline arm: L = 0)."""
    return _chat_step(st, 0, st.cells, st.messages, bool(st.shots))


def optimum_step(t: Templater, st: StepTokens) -> Step:
    """The step's new part after a fabricated prefix of the shared part (the fake arm)."""
    shared = st.prompt[: _units_of(st, st.common)]
    if not any(isinstance(u, tuple) for u in shared):
        return _chat_step(st, st.common, st.new, st.messages, bool(st.shots))
    messages = _text_for_images(t, st.messages, sum(isinstance(u, tuple) for u in shared))
    units, _, shots = t.prompt(messages, st.template)
    return _chat_step(st, cells(units) - st.new, st.new, messages, bool(shots))


def _chat_step(st: StepTokens, L: int, new: int, messages: list[dict[str, Any]], has_image: bool) -> Step:
    """A chat request of the step's messages and its other template fields, as recorded."""
    return Step(L=L, new=new, prompt=messages, prefix=None, has_image=has_image, extra=st.template, chat=True)


def _units_of(st: StepTokens, n_cells: int) -> int:
    """How many leading units of the prompt make `n_cells`."""
    k, total = 0, 0
    while total < n_cells:
        u = st.prompt[k]
        total += u[1] if isinstance(u, tuple) else 1
        k += 1
    return k


def _text_for_images(t: Templater, messages: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The messages with their first `n` images (those inside the shared part, which can end inside a message
    the step changed) replaced by filler text of their cells."""
    out = copy.deepcopy(messages)
    for i, m in enumerate(out):
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "image_url" and n > 0:
                n -= 1
                assert t.geometry is not None
                cells_of = t.geometry.tokens(*png_size(image_bytes(part)))[0]
                content[j] = {"type": "text", "text": filler_text(t.srv, cells_of, seed=i * 100 + j)}
    return out
