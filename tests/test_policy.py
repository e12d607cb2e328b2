"""The model of today's llama-server prompt cache on hand-made requests: the rules it applies, each where the
server's code puts it (the engine tier checks it step by step against the real server's cache_n and log)."""

from __future__ import annotations

import pytest

from lab.conversation.cache_setting import CacheSetting, StateSizes
from lab.conversation.causes import departure_cause
from lab.conversation.derive import Unit
from lab.conversation.policy import PolicyModel, Request
from lab.core.units import MIB

pytestmark = pytest.mark.fast

CKPT, PER_CELL = 1000, 10


def hybrid(checkpoints: int = 32, checkpoint_min_step: int = 256, cache_ram_mib: int = 8192) -> PolicyModel:
    sizes = StateSizes(lambda w: CKPT, lambda n, w: CKPT + n * PER_CELL)
    setting = CacheSetting(checkpoints, checkpoint_min_step, cache_ram_mib)
    return PolicyModel(setting, "hybrid", sizes, ctx=16384)


def tokens(n: int, start: int = 100) -> list[int]:
    return list(range(start, start + n))


def test_an_extension_reuses_everything_and_checkpoints_land_before_the_end() -> None:
    m = hybrid()
    first = m.step(Request(tokens(1000)))
    assert first.cache_n == 0 and first.source == "none"
    # before the batch of the last 4 + ubatch tokens, and of the last 4 (more than 256 apart)
    assert [c.n_tokens for c in m.checkpoints] == [1000 - 4 - 512, 1000 - 4]
    second = m.step(Request(tokens(1200)))
    assert second.cache_n == 1000 and second.source == "slot"
    assert second.checkpoint_bytes == len(m.checkpoints) * CKPT


def test_a_departure_restores_the_newest_checkpoint_before_it_or_re_processes() -> None:
    m = hybrid()
    m.step(Request(tokens(1000)))
    departed = tokens(900) + tokens(300, start=5000)  # departs at 900: the checkpoint at 996 is past it
    r = m.step(Request(departed))
    assert (r.cache_n, r.source) == (484, "checkpoint")
    none = hybrid(checkpoints=0)
    none.step(Request(tokens(1000)))
    assert none.step(Request(departed)).cache_n == 0  # a recurrent state cannot be cut back


def test_a_prompt_the_cache_holds_whole_still_evaluates_a_token() -> None:
    m = hybrid()
    m.step(Request(tokens(600)))
    assert m.step(Request(tokens(600))).cache_n == 596  # the checkpoint 4 before the end


def test_checkpoints_keep_their_spacing_and_count() -> None:
    m = hybrid(checkpoints=2, checkpoint_min_step=0)
    for n in (100, 200, 300, 400):
        m.step(Request(tokens(n)))
    assert [c.n_tokens for c in m.checkpoints] == [300, 396]  # the oldest went
    spaced = hybrid(checkpoint_min_step=1024)
    for n in (600, 1200):
        spaced.step(Request(tokens(n)))
    assert [c.n_tokens for c in spaced.checkpoints] == [84, 1196]  # 596 and 684 came too close to 84


def test_a_marked_user_message_gets_a_checkpoint_before_it() -> None:
    m = hybrid()
    m.step(Request(tokens(2000), before_user=1500))
    assert [c.n_tokens for c in m.checkpoints] == [1500, 1996]  # not 1484: before it only at the user message


def test_the_ram_cache_saves_a_prompt_left_behind_and_brings_it_back() -> None:
    m = hybrid()
    a = tokens(1000)
    m.step(Request(a))
    r = m.step(Request(tokens(10, start=9000) + tokens(990)))  # shares nothing: the slot is saved first
    assert r.cache_n == 0 and r.ram_prompts == 1 and r.ram_bytes == CKPT + 1000 * PER_CELL + 2 * CKPT
    back = m.step(Request([*a, *tokens(50, start=7000)]))
    assert (back.cache_n, back.source) == (1000, "ram")
    off = hybrid(cache_ram_mib=0)
    off.step(Request(a))
    off.step(Request(tokens(10, start=9000) + tokens(990)))
    assert off.step(Request([*a, *tokens(50, start=7000)])).cache_n == 0 and not off.ram


def test_the_ram_cache_drops_its_oldest_prompts_past_its_size() -> None:
    sizes = StateSizes(lambda w: CKPT, lambda n, w: CKPT + n * 600)
    m = PolicyModel(CacheSetting(cache_ram_mib=1), "hybrid", sizes, ctx=16384)
    for k in range(3):  # three unrelated prompts of more than 1 MiB each
        m.step(Request(tokens(2000, start=10_000 * (k + 1))))
    assert len(m.ram) == 1 and m.ram[0].size < 2 * MIB  # at least one is always kept


def test_an_image_is_reused_whole_and_takes_its_positions() -> None:
    m = hybrid()
    m.image_pos = {"shot": 10}
    prompt: list[Unit] = [*tokens(600), ("shot", 50), *tokens(100, start=2000)]
    m.step(Request(prompt))
    assert m.step(Request([*prompt, *tokens(20, start=3000)])).cache_n == 750
    (ck,) = [c for c in m.checkpoints if c.n_tokens > 650]
    assert ck.pos_max == ck.n_tokens - 1 - 40  # 50 cells on 10 positions


def test_the_flags_to_paste() -> None:
    flags = CacheSetting(checkpoints=8, checkpoint_min_step=0, cache_ram_mib=0).flags()
    assert " ".join(flags) == "--ctx-checkpoints 8 --checkpoint-min-step 0 --cache-ram 0"


@pytest.mark.parametrize(
    ("before", "reply", "now", "at", "cause"),
    [
        (
            [{"role": "user", "content": "u"}],
            {"role": "assistant", "content": "<think>\nhm\n</think>\n\nok"},
            [{"role": "user", "content": "u"}, {"role": "assistant", "content": "ok"}],
            1,
            "reasoning dropped",
        ),
        (
            [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
            None,
            [{"role": "system", "content": "s2"}, {"role": "user", "content": "u"}],
            0,
            "system prompt",
        ),
        (
            [{"role": "user", "content": "u"}, {"role": "tool", "content": "a long output of many words"}],
            None,
            [{"role": "user", "content": "u"}, {"role": "tool", "content": "a long output ...[cut]"}],
            1,
            "tool output cut",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "t"}],
                }
            ],
            None,
            [{"role": "user", "content": [{"type": "text", "text": "gone"}, {"type": "text", "text": "t"}]}],
            0,
            "image evicted",
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "user", "content": "c"}],
            None,
            [{"role": "user", "content": "a"}, {"role": "user", "content": "c"}],
            1,
            "messages dropped",
        ),
        ([{"role": "user", "content": "a"}], None, [{"role": "user", "content": "b"}], 0, "message edited"),
        ([{"role": "user", "content": "a"}], None, [{"role": "user", "content": "a"}], 0, "template"),
    ],
)
def test_why_a_prompt_departs(
    before: list[dict[str, object]], reply: dict[str, object] | None, now: list[dict[str, object]], at: int, cause: str
) -> None:
    assert departure_cause(before, reply, {}, now, {}, at) == cause
    assert departure_cause(before, reply, {"tools": [1]}, now, {"tools": [2]}, at) == "tool list"
