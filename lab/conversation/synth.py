"""A synthetic conversation trace that behaves like a computer-use agent's: a system prompt, then per step a
tool observation (with a screenshot every `shot_every` steps) and the agent's reply; each step's request
repeats the conversation so far, as an agent sends it, except what the agent evicts:

- old screenshots: when more than `keep_shots` + 1 are in context, the oldest are replaced by a short text
  until `keep_shots` remain (so every other screenshot triggers an eviction, not every step);
- long tool outputs: when more than `keep_full` + 2 observations are whole, the older ones are cut to their
  first `cut_words` words until `keep_full` remain whole.

An eviction makes a step's prompt diverge from the previous one well before its end: the case where a
server's prefix cache can reuse only what comes before the first changed message.

With `reasoning_words`, each reply as generated opens with a reasoning block the agent drops from the history
it sends back (as agents and chat templates do): every next prompt then departs from what the server holds at
the previous reply, just after the previous prompt, where a hybrid model reuses the prompt only from a
context checkpoint. Deterministic per seed.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.core.jsonl import atomic_write
from lab.engine.png import make_png

SCREEN_SIZES = ((320, 200), (640, 400), (1280, 800))  # the screenshots synthetic traces carry, in turn
_VOCABULARY = (  # what synthetic observations and replies are made of
    "click button window file open save error output test result page scroll field value list item form search "
    "input submit dialog menu select option table row column text label link image panel tab view run command "
    "terminal log warning build pass fail check update status message user task step next"
)
AGENT_WORDS = tuple(_VOCABULARY.split())
EVICTED_SHOT = "[an earlier screenshot, removed to save context]"


@dataclass(frozen=True)
class SynthConversation:
    tasks: int = 1
    steps: int = 8
    seed: int = 0
    system_words: int = 150
    shot_every: int = 2
    keep_shots: int = 1
    keep_full: int = 2
    cut_words: int = 12
    reasoning_words: int = 0  # each reply opens with a reasoning block of this many words, dropped from history


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(AGENT_WORDS) for _ in range(rng.randint(lo, hi)))


def synth_conversation(spec: SynthConversation, out: Path, shots: bool = True) -> Path:
    """Write the trace to `out` (screenshots as PNG files in `<out stem>_screenshots/`, referenced by relative
    path) and return it."""
    rng = random.Random(spec.seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    shots_dir = out.parent / f"{out.stem}_screenshots"
    lines = []
    for t in range(spec.tasks):
        task = f"task{t:03d}"
        system = {
            "role": "system",
            "content": "You operate a computer for the user. " + _words(rng, *[spec.system_words] * 2),
        }
        history: list[dict[str, Any]] = []  # user (observation) and assistant messages, as the agent keeps them
        whole: list[int] = []  # indexes in history of observations not yet cut
        with_shot: list[int] = []  # indexes in history of observations whose screenshot is still there
        for k in range(spec.steps):
            text = f"Step {k} observation: " + _words(rng, 40, 160)
            parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
            if shots and k % spec.shot_every == 0:
                w, h = SCREEN_SIZES[(k // spec.shot_every) % len(SCREEN_SIZES)]
                name = f"{task}_step{k}.png"
                shots_dir.mkdir(parents=True, exist_ok=True)
                (shots_dir / name).write_bytes(make_png(w, h, seed=spec.seed * 1000 + t * 100 + k))
                parts.insert(0, {"type": "image_url", "image_url": {"url": f"{shots_dir.name}/{name}"}})
                with_shot.append(len(history))
            whole.append(len(history))
            history.append({"role": "user", "content": parts})
            _evict(history, with_shot, whole, spec)
            request = {"model": "lab", "messages": [system, *json.loads(json.dumps(history))], "temperature": 0}
            answer = "I will " + _words(rng, 8, 40) + "."
            thought = _words(rng, *[spec.reasoning_words] * 2) if spec.reasoning_words else ""
            generated = f"<think>\n{thought}\n</think>\n\n{answer}" if thought else answer
            lines.append(
                {
                    "task_id": task,
                    "step": k,
                    "request": request,
                    "reply": {"role": "assistant", "content": generated},
                    "tool_s": round(rng.uniform(0.2, 2.0), 2),
                }
            )
            history.append({"role": "assistant", "content": answer})  # what the agent sends back
    atomic_write(out, "".join(json.dumps(line) + "\n" for line in lines))
    return out


def _evict(history: list[dict[str, Any]], with_shot: list[int], whole: list[int], spec: SynthConversation) -> None:
    """Drop old screenshots and cut old observations, in batches (see the module's docstring)."""
    if len(with_shot) > spec.keep_shots + 1:
        while len(with_shot) > spec.keep_shots:
            i = with_shot.pop(0)
            history[i]["content"] = [
                {"type": "text", "text": EVICTED_SHOT} if p["type"] == "image_url" else p for p in history[i]["content"]
            ]
    if len(whole) > spec.keep_full + 2:
        while len(whole) > spec.keep_full:
            i = whole.pop(0)
            for p in history[i]["content"]:
                if p["type"] == "text" and p["text"] != EVICTED_SHOT:
                    p["text"] = " ".join(p["text"].split()[: spec.cut_words]) + " ...[cut]"
