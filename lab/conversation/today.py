"""Today's server: a conversation replayed in order, as the agent sent it, to a server configured the way users
run it (`cache_prompt` on, one slot, context checkpoints and the RAM prompt cache as `conversation.*` sets
them: llama-server's own defaults unless the user's flags differ), so each step's prompt time and reuse
(`cache_n`) are what the server's own prompt cache achieves, not what a perfect cache would.

Each step is the recorded chat-completions request with one token to generate; its reply is then put into the
slot untimed (the templated prompt and the reply's text prefilled with the cache on), so the next step finds
the cache as it was after the agent's server had generated that reply. What the server restored is read from
its log: a context checkpoint (a hybrid model's recurrent state cannot be rolled back, so a prompt that departs
from the cached one is reused only up to a checkpoint before it) or a prompt from the RAM cache.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import httpx

from lab.conversation.cache_setting import PRESERVE, CacheSetting
from lab.conversation.derive import StepTokens
from lab.conversation.load import ConversationError
from lab.core.runs import utc_now
from lab.core.schemas import ConversationArm, ConversationSample
from lab.core.settings_server import ConversationSettings
from lab.engine.contract import ServerDied, Step, text_step
from lab.engine.imagegrid import ImageGeometry
from lab.engine.media import filler_text, image_step
from lab.engine.png import make_png, png_size
from lab.engine.server import LlamaServer, LogTail

RESTORED_CHECKPOINT = "restored context checkpoint"
RAM_CACHE_HIT = "found better prompt"
FULL_REPROCESS = "forcing full prompt re-processing"  # the server found too little of the window (or state)
RAM_CACHE_STATE = re.compile(r"cache state: \d+ prompts, ([0-9.]+) MiB")
CHECKPOINT_MADE = re.compile(r"created context checkpoint \d+ of \d+ \(.*size = ([0-9.]+) MiB\)")


def setting_overrides(setting: CacheSetting, conversation: ConversationSettings) -> dict[str, Any]:
    """The server settings that make the lab's server today's under a cache setting
    (lab.experiments.protocol.OpenRun.server's overrides), with the user's own extra flags (`--reasoning-preserve`
    as the setting says)."""
    extra = list(conversation.extra_args)
    if setting.reasoning_preserve is not None:  # the setting says it (else the user's own flags stand)
        extra = [a for a in extra if a not in PRESERVE.values()] + [PRESERVE[setting.reasoning_preserve]]
    return {
        "checkpoints": setting.checkpoints,
        "checkpoint_min_step": setting.checkpoint_min_step,
        "cache_ram_mib": setting.cache_ram_mib,
        "cache_reuse": setting.cache_reuse,
        "swa_full": setting.swa_full,
        "ubatch_size": setting.ubatch,
        "batch_size": setting.batch,
        "extra_args": extra,
    }


def today_step(srv: LlamaServer, tail: LogTail, st: StepTokens, rep: int = 0) -> ConversationSample:
    """The step's recorded request (one token generated), then its reply held in the slot, untimed."""
    body = {"messages": st.messages, **st.template, "temperature": 0, "max_tokens": 1, "stream": False}
    body["cache_prompt"] = True
    try:
        r = srv.client.post("/v1/chat/completions", json=body)
    except httpx.TransportError as e:
        if srv.died(dropped=True):
            rc = srv.proc and srv.proc.returncode
            raise ServerDied(
                f"today's server died at {st.task_id} step {st.step} (exit {rc}); see {srv.log_path}"
            ) from e
        raise ConversationError(f"today's server did not answer {st.task_id} step {st.step}: {e}") from e
    log = tail.read()
    base = sample_base(st, rep, "today")
    if r.status_code != 200:
        return ConversationSample(**base, ok=False, reason=f"HTTP {r.status_code}: {r.text[:200]}")
    t = r.json().get("timings", {})
    out = ConversationSample(
        **base,
        ok=True,
        prompt_ms=float(t.get("prompt_ms", 0.0)),
        prompt_n=int(t.get("prompt_n", 0)),
        cache_n=int(t.get("cache_n", 0)),
        checkpoint_restore=RESTORED_CHECKPOINT in log,
        ram_cache_restore=RAM_CACHE_HIT in log,
        full_reprocess=FULL_REPROCESS in log,
    )
    _hold_reply(srv, st)
    log += tail.read()
    ram, made = RAM_CACHE_STATE.findall(log), CHECKPOINT_MADE.findall(log)
    return out.model_copy(
        update={"ram_cache_mib": float(ram[-1]) if ram else None, "checkpoint_mib": float(made[-1]) if made else None}
    )


def warm_step(srv: LlamaServer, projector: Path | None) -> Step:
    """Today's server's warm-up, untimed: a fabricated-prefix request (a screenshot in its new part when a projector
    is loaded, so the vision encoder's first image is paid here too). It leaves nothing behind, no tokens, no
    checkpoint and nothing in the RAM cache, so the conversation finds the server as it starts."""
    if projector is None:
        return text_step([1] * 8, [2] * 4)
    png = make_png(320, 200)
    geom = ImageGeometry.of_projector(projector)
    return image_step(srv, geom, filler_text(srv, 8, seed=0), 8, png, png_size(png), " warm up")


def sample_base(st: StepTokens, rep: int, arm: ConversationArm) -> dict[str, Any]:
    """The fields every sample of a step has, whatever its arm (each rep runs in processes of its own)."""
    return {"task_id": st.task_id, "step": st.step, "rep": rep, "arm": arm, "process": rep, "t_utc": utc_now()}


def _hold_reply(srv: LlamaServer, st: StepTokens) -> None:
    """Put the step's reply into the slot after its prompt, as generating it would have (untimed). The
    templated text carries the media marker of the server that derived it: this server's replaces it."""
    text = st.text + st.reply_text
    prompt: Any = text
    if st.shots:
        text = text.replace(st.marker, str(srv.props()["media_marker"]))
        prompt = {"prompt_string": text, "multimodal_data": [base64.b64encode(s).decode() for s in st.shots]}
    r = srv.completion({"prompt": prompt, "n_predict": 1, "temperature": 0.0, "cache_prompt": True, "stream": False})
    if r.status_code != 200:
        raise ConversationError(
            f"task {st.task_id!r} step {st.step}: today's server refused the reply to hold: HTTP {r.status_code}: "
            f"{r.text[:200]}"
        )
