"""The one client of the `n_fake_cached` server contract, for text and image steps, and the three arms.

Contract (patches/llama.cpp/0001-fake-prefix.patch): the request carries L + new tokens, the first L of
them placeholders; `n_fake_cached = L` makes the server fabricate a depth-L cached prefix (cell metadata
only, no compute) and decode only the new part. The response's timings then satisfy cache_n == L,
prompt_n == new and fake_n == L; `fake_ms`, the fabrication time, is included in `prompt_ms`.

Arms (the same prompt each time, so the same work except what is cached):
  baseline  L + new, nothing cached (cache_prompt false)
  fake      n_fake_cached = L
  genuine   restore the slot's saved depth-L state (`POST /slots/0?action=restore`: the really prefilled
            prefix, saved once per L), then send L + new with cache_prompt: a genuine hit whose warm-up costs a
            file read, not a prefill. Without a saved state (a projector is loaded: the server refuses slot
            files then) it warms up like `plain`.
  plain     prefill the L prefix for real with cache_prompt (untimed), then send L + new: the same hit, its
            warm-up paying the prefix (the proof that a restored state is a genuine hit)

Decoding at depth: with `n_out` (>= 2) the timed request also generates n_out tokens, greedy with `ignore_eos`
(so exactly n_out), at depth L + new onward; its `predicted_n` must be n_out. The server's `predicted_ms` runs
from the first sampled token to the last, which is n_out - 1 single-token decodes (each with its sampling), so
a decode costs predicted_ms / (predicted_n - 1): what `llama-bench -n N -d L+new` times per token.

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

from lab.core.errors import LabError
from lab.core.schemas import Interval
from lab.core.stats import median_interval
from lab.engine.server import LlamaServer, LogTail

Arm = Literal["baseline", "fake", "genuine", "plain"]
ARMS: tuple[Arm, ...] = ("baseline", "fake", "genuine", "plain")
FailureKind = Literal["transport", "http", "contract"]
Warm = Literal["restore", "prefill"]  # how a genuine hit's prefix got into the slot


class ContractError(LabError):
    """The server could not prepare what an arm needs (a saved depth-L state)."""


class Timings(BaseModel):
    cache_n: int
    prompt_n: int
    prompt_ms: float
    predicted_n: int = 0
    predicted_ms: float = 0.0
    fake_n: int = 0
    fake_ms: float = 0.0

    @property
    def decode_ms(self) -> float | None:
        """ms per generated token: predicted_ms over the predicted_n - 1 decodes it spans (None below 2 tokens)."""
        return self.predicted_ms / (self.predicted_n - 1) if self.predicted_n > 1 else None


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
    warm: Warm | None = None  # genuine and plain: how the prefix got into the slot before the timed request


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
    chat: bool = False  # `prompt` is a chat request's messages, sent to the chat endpoint (baseline and fake arms)


def text_step(prefix: list[int], new_tokens: list[int]) -> Step:
    return Step(L=len(prefix), new=len(new_tokens), prompt=prefix + new_tokens, prefix=prefix)


WARM_UP = 16  # new tokens of the untimed warm-up request (lab.measure.plan counts them)


def warm_step(step: Step) -> Step:
    """A few of the step's new tokens after its prefix (an image or chat step whole: its new part cannot be cut
    by tokens)."""
    if step.has_image or step.chat:
        return step
    return text_step(step.prefix, step.prompt[step.L : step.L + min(step.new, WARM_UP)])


def filler_tokens(n: int, seed: int, n_vocab: int, lo: int = 1000) -> list[int]:
    """Deterministic filler ids spread across the ordinary vocabulary (so MoE routing resembles text).

    Ids below `lo` and the top 2% (special/control tokens live there) are avoided."""
    hi = int(n_vocab * 0.98)
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(lo, hi, size=n)]


COMPLETION = "/completion"
CHAT = "/v1/chat/completions"
SLOT = "/slots/0"


def decoding(n_out: int) -> dict[str, Any]:
    """What a timed request adds to generate n_out tokens (0: the one token every request samples): exactly
    n_out, even past an end-of-sequence token."""
    return {"n_predict": n_out, "ignore_eos": True} if n_out else {}


def restore_body(saved: str) -> dict[str, Any]:
    """Restore a saved slot for the next request to reuse. `exact_window`: a sliding-window model's saved state
    holds exactly the positions the window reaches, which the stock server's reuse check counts one short (it
    re-processes such a state in full); the patched server then checks what the window needs instead."""
    return {"filename": saved, "exact_window": True}


def arm_requests(arm: Arm, step: Step, saved: str | None = None, n_out: int = 0) -> list[tuple[str, dict[str, Any]]]:
    """The (path, body) requests of one sample of `arm`, in order; the last one is the timed one. `saved`: the
    slot file holding the step's really prefilled depth-L state (the genuine arm restores it); n_out: tokens the
    timed request generates after the prompt (0: one, the prompt's own next token)."""
    base = {"n_predict": 1, "temperature": 0.0, "stream": False, **step.extra}
    out = {**base, **decoding(n_out)}
    if step.chat and arm in ("baseline", "fake"):
        chat = {**out, "max_tokens": out["n_predict"], "messages": step.prompt, "cache_prompt": False}
        return [(CHAT, chat | ({"n_fake_cached": step.L} if arm == "fake" else {}))]
    if arm == "baseline":
        return [(COMPLETION, {**out, "prompt": step.prompt, "cache_prompt": False})]
    if arm == "fake":
        return [(COMPLETION, {**out, "prompt": step.prompt, "cache_prompt": False, "n_fake_cached": step.L})]
    timed = (COMPLETION, {**out, "prompt": step.prompt, "cache_prompt": True})
    if arm == "genuine" and saved is not None:
        return [(f"{SLOT}?action=restore", restore_body(saved)), timed]
    return [(COMPLETION, {**base, "prompt": step.prefix, "cache_prompt": True}), timed]


def arm_reason(arm: Arm, t: Timings, L: int, new: int, n_out: int = 0) -> str:
    """Empty string if the timed request of an arm decoded what it should (and generated n_out tokens, when
    asked to), else why not."""
    if arm == "fake":
        if t.cache_n != L:
            return f"cache_n={t.cache_n} != L={L}: the fake hit did not register"
        if t.prompt_n != new:
            return f"prompt_n={t.prompt_n} != new={new}: decoded more (or less) than the new tokens"
        if t.fake_n != L:
            return f"fake_n={t.fake_n} != L={L}"
    if arm in ("genuine", "plain") and (t.cache_n != L or t.prompt_n != new):
        return f"{arm} genuine hit: cache_n={t.cache_n}, prompt_n={t.prompt_n}, expected {L}/{new}"
    if arm == "baseline" and (t.cache_n != 0 or t.prompt_n != L + new):
        return f"baseline: cache_n={t.cache_n}, prompt_n={t.prompt_n}, expected 0/{L + new}"
    if n_out and t.predicted_n != n_out:
        return f"predicted_n={t.predicted_n} != n_out={n_out}: generated other than the tokens asked for"
    return ""


class ContractClient:
    """Sends the arms of steps to one running patched server and checks every answer against the contract."""

    def __init__(self, srv: LlamaServer) -> None:
        self.srv = srv
        self.tail = LogTail(srv.log_path)

    def warm_up(self, step: Step | None = None, n_out: int = 0, prompt: Any = None) -> None:
        """The untimed request before timed ones: a process that wakes after another one's work finds its caches
        cold. The fake arm of a few of `step`'s new tokens at its depth, else `prompt` (a few tokens of text by
        default) with the cache off. Its failures show in the timed requests that follow."""
        if step is None:
            body = {"prompt": prompt or "warm up the threads", "n_predict": 1, "cache_prompt": False}
            self.srv.completion(body)
        else:
            self.run_arm("fake", warm_step(step), n_out=n_out)

    def _post(
        self, body: dict[str, Any], path: str = COMPLETION
    ) -> tuple[httpx.Response | None, FailureKind | None, str]:
        try:
            resp = self.srv.client.post(path, json=body)
        except httpx.TransportError as e:
            return None, "transport", f"transport error: {type(e).__name__}: {e}"
        if resp.status_code != 200:
            return None, "http", f"HTTP {resp.status_code}: {resp.text[:300]}"
        return resp, None, ""

    def run_arm(self, arm: Arm, step: Step, saved: str | None = None, n_out: int = 0) -> ArmResult:
        """One sample of one arm (`saved`: the slot file of the step's depth-L state, for the genuine arm; n_out:
        tokens to generate after the prompt, timed as decodes at depth L + new). Failures come back as ok=False
        with their kind and reason, never raised."""
        *warm, (timed_path, timed) = arm_requests(arm, step, saved, n_out)
        how: Warm | None = (
            None if arm in ("baseline", "fake") else "restore" if saved and arm == "genuine" else "prefill"
        )

        def failed(kind: FailureKind, reason: str, t: Timings | None = None) -> ArmResult:
            return ArmResult(arm=arm, L=step.L, new=step.new, ok=False, kind=kind, reason=reason, timings=t, warm=how)

        for path, body in warm:
            resp, kind, reason = self._post(body, path)
            if kind is not None:
                return failed(kind, f"prefix {'restore' if path != COMPLETION else 'prefill'}: {reason}")
        self.tail.read()  # only the timed request's log lines count
        resp, kind, reason = self._post(timed, timed_path)
        if resp is None or kind is not None:
            return failed(kind or "http", reason)
        t = Timings.model_validate(resp.json()["timings"])
        encode_ms, decode_ms = self.tail.image_ms() if step.has_image else (None, None)
        reason = arm_reason(arm, t, step.L, step.new, n_out)
        if not reason and step.has_image and encode_ms is None:
            reason = "no image encode in the server log: was the image dropped (wrong media marker)?"
        if reason:
            return failed("contract", reason, t)
        return ArmResult(
            arm=arm,
            L=step.L,
            new=step.new,
            ok=True,
            timings=t,
            encode_ms=encode_ms,
            image_decode_ms=decode_ms,
            warm=how,
        )

    def save_state(self, step: Step, name: str, below: tuple[int, str] | None = None) -> float:
        """Prefill the step's depth-L prefix for real and save the slot as `name` (the genuine arm restores it
        per rep); with `below` = (L', its saved name) the slot starts from that shallower state, so only the
        L - L' tokens between are prefilled (one cumulative fill over the grid). Returns the prefill ms."""
        if below is not None:
            resp, kind, reason = self._post(restore_body(below[1]), f"{SLOT}?action=restore")
            if kind is not None:
                raise ContractError(f"restoring the depth-{below[0]} state {below[1]}: {reason}")
        base = {"n_predict": 1, "temperature": 0.0, "stream": False, **step.extra}
        resp, kind, reason = self._post({**base, "prompt": step.prefix, "cache_prompt": True})
        if resp is None or kind is not None:
            raise ContractError(f"prefilling the depth-{step.L} prefix: {reason}")
        t = Timings.model_validate(resp.json()["timings"])
        reused = below[0] if below is not None else 0
        if t.cache_n + t.prompt_n != step.L or t.cache_n < reused - 1:
            raise ContractError(
                f"prefilling the depth-{step.L} prefix reused {t.cache_n} and decoded {t.prompt_n} "
                f"tokens (expected {reused} + {step.L - reused})"
            )
        resp, kind, reason = self._post({"filename": name}, f"{SLOT}?action=save")
        if kind is not None:
            raise ContractError(f"saving the depth-{step.L} state: {reason}")
        return t.prompt_ms

    def died(self, r: ArmResult) -> bool:
        """After a failed sample: has the server died? A dropped connection gets a few seconds to show it."""
        return self.srv.died(dropped=r.kind == "transport")

    def run_arm_alive(
        self, arm: Arm, step: Step, saved: str | None = None, what: str = "", n_out: int = 0
    ) -> ArmResult:
        """`run_arm`, raising ServerDied when a failure was the server dying (`what`: the sample, for the
        message): a failed arm is a row, a dead server ends the run (incomplete, resumable)."""
        r = self.run_arm(arm, step, saved, n_out)
        if not r.ok and self.died(r):
            rc = self.srv.proc and self.srv.proc.returncode
            raise ServerDied(f"llama-server died during {what or arm} (exit {rc}); see {self.srv.log_path}")
        return r


class ServerDied(LabError):
    """The server process died under a request: the run stops, incomplete."""


def decode_samples(results: list[ArmResult]) -> list[float]:
    """Decode ms per generated token of the ok samples that decoded."""
    return [r.timings.decode_ms for r in results if r.ok and r.timings and r.timings.decode_ms is not None]


def measure_decode(
    client: ContractClient, step: Step, n_out: int, reps: int, key: str = ""
) -> tuple[list[ArmResult], Interval | None]:
    """Decode at depth step.L + step.new: `reps` fake-arm samples, each generating n_out tokens after the new
    ones; every sample (a failure typed, a dead server raised as ServerDied) and the decode ms per token's median
    with its interval."""
    if n_out < 2:
        raise ValueError(f"n_out={n_out}: a decode is timed between two generated tokens, so n_out >= 2")
    what = f"decode L={step.L} new={step.new} n_out={n_out}"
    results = [client.run_arm_alive("fake", step, what=f"{what} rep {i}", n_out=n_out) for i in range(reps)]
    return results, median_interval(decode_samples(results), key)
