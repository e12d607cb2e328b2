"""The requests each server arm sends (lab.engine.contract.arm_requests) and how its timed answer is judged
(arm_reason): pure functions, checked without a server."""

from __future__ import annotations

import pytest

from lab.engine.contract import COMPLETION, Timings, arm_reason, arm_requests, text_step

pytestmark = pytest.mark.fast

STEP = text_step([11, 12, 13, 14], [21, 22])


def test_each_arm_sends_the_same_timed_prompt() -> None:
    for arm in ("baseline", "fake", "genuine", "plain"):
        *_, (path, timed) = arm_requests(arm, STEP, "L4.bin")
        assert path == COMPLETION and timed["prompt"] == [11, 12, 13, 14, 21, 22]
    assert arm_requests("fake", STEP)[-1][1]["n_fake_cached"] == 4
    assert arm_requests("baseline", STEP)[-1][1]["cache_prompt"] is False


def test_the_genuine_arm_restores_a_saved_state_and_plain_prefills() -> None:
    restore, (_, timed) = arm_requests("genuine", STEP, "L4.bin")
    assert restore == ("/slots/0?action=restore", {"filename": "L4.bin", "exact_window": True})
    assert timed["cache_prompt"] is True
    prefill, _ = arm_requests("genuine", STEP)  # no saved state: it prefills like plain
    assert prefill == (
        COMPLETION,
        {"n_predict": 1, "temperature": 0.0, "stream": False, "prompt": [11, 12, 13, 14], "cache_prompt": True},
    )
    assert arm_requests("plain", STEP, "L4.bin") == arm_requests("genuine", STEP)  # plain never restores


def test_a_genuine_hit_must_reuse_exactly_the_prefix() -> None:
    def t(cache_n: int, prompt_n: int) -> Timings:
        return Timings(cache_n=cache_n, prompt_n=prompt_n, prompt_ms=1.0)

    assert arm_reason("genuine", t(4, 2), 4, 2) == "" and arm_reason("plain", t(4, 2), 4, 2) == ""
    assert "expected 4/2" in arm_reason("plain", t(0, 6), 4, 2)
    assert "expected 4/2" in arm_reason("genuine", t(3, 3), 4, 2)


def test_a_conversation_steps_arms_send_the_requests_template_fields_as_recorded() -> None:
    """A tool's schema is part of the prompt the chat template renders: every arm sends the recorded request's
    template fields (and nothing else of it), so all three see the prompt the agent's server saw."""
    from lab.conversation.arms import no_cache_step
    from lab.conversation.derive import StepTokens, template_fields

    tools = [{"type": "function", "function": {"name": "click", "parameters": {"type": "object"}}}]
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools, "max_tokens": 9}
    assert template_fields(request) == {"tools": tools}
    st = StepTokens("t", 0, [1, 2, 3], [], messages=request["messages"], template=template_fields(request))
    ((path, body),) = arm_requests("baseline", no_cache_step(st))
    assert path.endswith("/chat/completions") and body["tools"] == tools and body["messages"] == request["messages"]
    assert body["max_tokens"] == 1 and "model" not in body
