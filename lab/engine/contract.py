"""The client side of the `n_fake_cached` server contract, and the three measurement arms.

Contract (patches/llama.cpp/0001-fake-prefix.patch): the request carries L + new tokens, the first L of
them text placeholders; `n_fake_cached = L` makes the server fabricate a depth-L prefix (metadata only)
and decode only the new tokens. The response's timings then satisfy cache_n == L and prompt_n == new;
`fake_ms` is the fabrication time, which is included in `prompt_ms`.

Arms (same token arrays, so the same work except what is cached):
  baseline  L + new, nothing cached (cache_prompt false)
  fake      n_fake_cached = L
  genuine   prefill the L prefix for real with cache_prompt, then send L + new: a genuine cache hit
"""

from __future__ import annotations

from typing import Any, Literal

import httpx
import numpy as np
from pydantic import BaseModel

from lab.engine.server import LlamaServer

Arm = Literal["baseline", "fake", "genuine"]
TRANSPORT = "transport error"  # the server dropped the connection (it may have died)
ARMS: tuple[Arm, ...] = ("baseline", "fake", "genuine")


class Timings(BaseModel):
    cache_n: int
    prompt_n: int
    prompt_ms: float
    predicted_n: int = 0
    predicted_ms: float = 0.0
    fake_n: int = 0
    fake_ms: float = 0.0


class ArmResult(BaseModel):
    arm: Arm
    L: int
    new: int
    ok: bool
    reason: str = ""
    timings: Timings | None = None


def filler_tokens(n: int, seed: int, n_vocab: int, lo: int = 1000) -> list[int]:
    """Deterministic filler ids spread across the ordinary vocabulary (so MoE routing resembles text).

    Ids below `lo` and the top 2% (special/control tokens live there) are avoided."""
    hi = int(n_vocab * 0.98)
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(lo, hi, size=n)]


def _body(tokens: list[int], **extra: Any) -> dict[str, Any]:
    return {"prompt": tokens, "n_predict": 1, "temperature": 0.0, "stream": False, **extra}


def check_fake(t: Timings, L: int, new: int) -> str:
    """Empty string if a fake sample honours the contract, else the reason it does not."""
    if t.cache_n != L:
        return f"cache_n={t.cache_n} != L={L}: the fake hit did not register"
    if t.prompt_n != new:
        return f"prompt_n={t.prompt_n} != new={new}: decoded more (or less) than the new tokens"
    if t.fake_n != L:
        return f"fake_n={t.fake_n} != L={L}"
    return ""


def post_all(srv: LlamaServer, bodies: list[dict[str, Any]]) -> tuple[httpx.Response | None, str]:
    """Send the requests of one arm in order; the last response, or the reason it failed."""
    resp = None
    for body in bodies:
        try:
            resp = srv.completion(body)
        except httpx.TransportError as e:
            return None, f"{TRANSPORT}: {type(e).__name__}: {e}"
        if resp.status_code != 200:
            return None, f"HTTP {resp.status_code}: {resp.text[:300]}"
    return resp, ""


def arm_reason(arm: Arm, t: Timings, L: int, new: int) -> str:
    """Empty string if the timed request of an arm decoded what it should, else why not."""
    if arm == "fake":
        return check_fake(t, L, new)
    if arm == "genuine" and (t.cache_n != L or t.prompt_n != new):
        return f"genuine hit: cache_n={t.cache_n}, prompt_n={t.prompt_n}, expected {L}/{new}"
    if arm == "baseline" and (t.cache_n != 0 or t.prompt_n != L + new):
        return f"baseline: cache_n={t.cache_n}, prompt_n={t.prompt_n}, expected 0/{L + new}"
    return ""


def run_arm(srv: LlamaServer, arm: Arm, prefix: list[int], new_tokens: list[int]) -> ArmResult:
    """One sample of one arm. HTTP errors and contract violations come back as ok=False with the reason."""
    L, new = len(prefix), len(new_tokens)
    tokens = prefix + new_tokens
    if arm == "baseline":
        bodies = [_body(tokens, cache_prompt=False)]
    elif arm == "fake":
        bodies = [_body(tokens, cache_prompt=False, n_fake_cached=L)]
    else:
        bodies = [_body(prefix, cache_prompt=True), _body(tokens, cache_prompt=True)]
    resp, reason = post_all(srv, bodies)
    if resp is None:
        return ArmResult(arm=arm, L=L, new=new, ok=False, reason=reason)
    t = Timings.model_validate(resp.json()["timings"])
    reason = arm_reason(arm, t, L, new)
    return ArmResult(arm=arm, L=L, new=new, ok=not reason, reason=reason, timings=t)
