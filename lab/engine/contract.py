"""The one client of the `n_fake_cached` server contract, for text and image steps, and the three arms.

Contract (patches/llama.cpp/0001-fake-prefix.patch): the request carries L + new tokens, the first L of
them placeholders; `n_fake_cached = L` makes the server fabricate a depth-L cached prefix (cell metadata
only, no compute) and decode only the new part. The response's timings then satisfy cache_n == L,
prompt_n == new and fake_n == L; `fake_ms`, the fabrication time, is included in `prompt_ms`.

Arms (the same prompt each time, so the same work except what is cached):
  baseline  L + new, nothing cached (cache_prompt false)
  fake      n_fake_cached = L
  genuine   prefill the L prefix for real with cache_prompt (untimed), then send L + new: a genuine hit

A failed sample comes back as `ok=False` with a typed `kind`: `transport` (the connection dropped: the
server may have died), `http` (the server refused the request) or `contract` (it answered, but decoded
something other than what the arm asks for).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import numpy as np
from pydantic import BaseModel

from lab.engine.server import LlamaServer, LogTail

Arm = Literal["baseline", "fake", "genuine"]
ARMS: tuple[Arm, ...] = ("baseline", "fake", "genuine")
FailureKind = Literal["transport", "http", "contract"]


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
    kind: FailureKind | None = None
    reason: str = ""
    timings: Timings | None = None
    encode_ms: float | None = None  # image steps: the vision encode of the timed request (server log)
    image_decode_ms: float | None = None  # image steps: the LM prefill of the image tokens (server log)


@dataclass(frozen=True)
class Step:
    """One agent step as the server sees it: L cached positions, then `new` tokens to decode (an image step's
    `new` counts its image tokens too). `prompt` is the whole prompt, `prefix` the first L positions alone
    (what the genuine arm prefills first); both are /completion `prompt` values (token ids or a media prompt)."""

    L: int
    new: int
    prompt: Any
    prefix: Any
    has_image: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def text_step(prefix: list[int], new_tokens: list[int]) -> Step:
    return Step(L=len(prefix), new=len(new_tokens), prompt=prefix + new_tokens, prefix=prefix)


def filler_tokens(n: int, seed: int, n_vocab: int, lo: int = 1000) -> list[int]:
    """Deterministic filler ids spread across the ordinary vocabulary (so MoE routing resembles text).

    Ids below `lo` and the top 2% (special/control tokens live there) are avoided."""
    hi = int(n_vocab * 0.98)
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(lo, hi, size=n)]


def arm_requests(arm: Arm, step: Step) -> list[dict[str, Any]]:
    """The request bodies of one sample of `arm`, in order; the last one is the timed one."""
    base = {"n_predict": 1, "temperature": 0.0, "stream": False, **step.extra}
    if arm == "baseline":
        return [{**base, "prompt": step.prompt, "cache_prompt": False}]
    if arm == "fake":
        return [{**base, "prompt": step.prompt, "cache_prompt": False, "n_fake_cached": step.L}]
    return [
        {**base, "prompt": step.prefix, "cache_prompt": True},
        {**base, "prompt": step.prompt, "cache_prompt": True},
    ]


def arm_reason(arm: Arm, t: Timings, L: int, new: int) -> str:
    """Empty string if the timed request of an arm decoded what it should, else why not."""
    if arm == "fake":
        if t.cache_n != L:
            return f"cache_n={t.cache_n} != L={L}: the fake hit did not register"
        if t.prompt_n != new:
            return f"prompt_n={t.prompt_n} != new={new}: decoded more (or less) than the new tokens"
        if t.fake_n != L:
            return f"fake_n={t.fake_n} != L={L}"
    if arm == "genuine" and (t.cache_n != L or t.prompt_n != new):
        return f"genuine hit: cache_n={t.cache_n}, prompt_n={t.prompt_n}, expected {L}/{new}"
    if arm == "baseline" and (t.cache_n != 0 or t.prompt_n != L + new):
        return f"baseline: cache_n={t.cache_n}, prompt_n={t.prompt_n}, expected 0/{L + new}"
    return ""


class ContractClient:
    """Sends the arms of steps to one running patched server and checks every answer against the contract."""

    def __init__(self, srv: LlamaServer) -> None:
        self.srv = srv
        self.tail = LogTail(srv.log_path)

    def _post(self, body: dict[str, Any]) -> tuple[httpx.Response | None, FailureKind | None, str]:
        try:
            resp = self.srv.completion(body)
        except httpx.TransportError as e:
            return None, "transport", f"transport error: {type(e).__name__}: {e}"
        if resp.status_code != 200:
            return None, "http", f"HTTP {resp.status_code}: {resp.text[:300]}"
        return resp, None, ""

    def run_arm(self, arm: Arm, step: Step) -> ArmResult:
        """One sample of one arm. Failures come back as ok=False with their kind and reason, never raised."""
        *warm, timed = arm_requests(arm, step)

        def failed(kind: FailureKind, reason: str, t: Timings | None = None) -> ArmResult:
            return ArmResult(arm=arm, L=step.L, new=step.new, ok=False, kind=kind, reason=reason, timings=t)

        for body in warm:
            resp, kind, reason = self._post(body)
            if kind is not None:
                return failed(kind, f"prefix prefill: {reason}")
        self.tail.read()  # only the timed request's log lines count
        resp, kind, reason = self._post(timed)
        if resp is None or kind is not None:
            return failed(kind or "http", reason)
        t = Timings.model_validate(resp.json()["timings"])
        encode_ms, decode_ms = self.tail.image_ms() if step.has_image else (None, None)
        reason = arm_reason(arm, t, step.L, step.new)
        if not reason and step.has_image and encode_ms is None:
            reason = "no image encode in the server log: was the image dropped (wrong media marker)?"
        if reason:
            return failed("contract", reason, t)
        return ArmResult(
            arm=arm, L=step.L, new=step.new, ok=True, timings=t, encode_ms=encode_ms, image_decode_ms=decode_ms
        )

    def died(self, r: ArmResult) -> bool:
        """After a failed sample: has the server died? A dropped connection gets a few seconds to show it."""
        return self.srv.died(dropped=r.kind == "transport")
