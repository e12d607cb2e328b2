"""The n_fake_cached contract, against the real patched llama-server (asserts on) and the real tiny model, on
every supported llama.cpp release (the pin and the newest: each test runs on both)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from lab.conversation.cache_setting import CacheSetting
from lab.conversation.policy import Request
from lab.conversation.prediction import policy_for
from lab.conversation.window import WindowCache
from lab.core.gguf_io import read_gguf_metadata
from lab.engine.build import EngineInfo
from lab.engine.contract import ContractClient, Step, Timings, filler_tokens, text_step
from lab.engine.server import LlamaServer
from lab.models.tiny.archs import GEMMA3_SLIDING_WINDOW as WINDOW

from conftest import ENGINES, EngineOf, ServerFactory

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest, engine_of: EngineOf) -> EngineInfo:
    """This module's server and start_server run each supported release's build in turn."""
    return engine_of(request.param)


N_VOCAB = 151936
PREFIX = filler_tokens(1500, seed=11, n_vocab=N_VOCAB)
NEW = filler_tokens(48, seed=12, n_vocab=N_VOCAB)


def post(srv: LlamaServer, **body: Any) -> tuple[int, dict[str, Any]]:
    body.setdefault("n_predict", 1)
    # greedy, as the lab's client: a sampled token of a random-weight gpt-oss may be a stray UTF-8 byte that the
    # server's harmony parser refuses (HTTP 500)
    body.setdefault("temperature", 0.0)
    r = srv.completion(body)
    return r.status_code, r.json()


def fake(srv: LlamaServer, L: int, new: int = 32, seed: int = 0) -> Timings:
    tokens = PREFIX[:L] + filler_tokens(new, seed=100 + seed, n_vocab=N_VOCAB)
    code, js = post(srv, prompt=tokens, n_fake_cached=L, cache_prompt=False)
    assert code == 200, js
    t = Timings.model_validate(js["timings"])
    assert (t.cache_n, t.prompt_n, t.fake_n) == (L, new, L), t
    return t


def assert_up(srv: LlamaServer) -> None:
    assert srv.alive(), srv.log_text()[-3000:]
    assert srv.client.get("/health").status_code == 200


# --- any slot history -------------------------------------------------------------------------------


def test_fake_on_a_fresh_slot(start_server: ServerFactory) -> None:
    # the seed's server branch applied literally aborted here (keep_first can only shorten)
    srv = start_server()
    fake(srv, 1024)
    assert_up(srv)


@pytest.mark.parametrize(
    "history",
    [
        pytest.param([("normal", 200)], id="after-shorter-request"),
        pytest.param([("normal", 1400)], id="after-longer-request"),
        pytest.param([("cached", 1400)], id="after-cache_prompt-request"),
        pytest.param([("fake", 1400)], id="after-longer-fake"),
        pytest.param([("fake", 300)], id="after-shorter-fake"),
        pytest.param([("cached", 900), ("fake", 700), ("cached", 1200)], id="mixed"),
    ],
)
def test_fake_after_any_history(server: LlamaServer, history: list[tuple[str, int]]) -> None:
    for kind, n in history:
        if kind == "fake":
            fake(server, n)
        else:
            code, js = post(server, prompt=PREFIX[:n], cache_prompt=kind == "cached")
            assert code == 200, js
    t = fake(server, 1000)
    assert 0 < t.fake_ms <= t.prompt_ms, "fabrication time is reported and lies inside prompt_ms"
    assert_up(server)


def test_fake_accepts_text_prompts_and_chat_endpoint(server: LlamaServer) -> None:
    toks = server.tokenize("hello " * 300)
    L = len(toks) - 5
    code, js = post(server, prompt="hello " * 300, n_fake_cached=L, cache_prompt=False)
    assert code == 200, js
    assert js["timings"]["cache_n"] == L
    assert js["timings"]["prompt_n"] == len(toks) - L
    r = server.client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi " * 400}], "n_fake_cached": 256, "max_tokens": 1},
    )
    assert r.status_code == 200, r.text
    assert r.json()["timings"]["cache_n"] == 256


# --- bad requests: HTTP 400 naming the field, server stays up ---------------------------------------


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("12", "non-negative integer"),
        (12.5, "non-negative integer"),
        (True, "non-negative integer"),
        ([3], "non-negative integer"),
        (-1, "non-negative integer"),
        (1548, "smaller than the number of prompt tokens"),
        (5000, "smaller than the number of prompt tokens"),
    ],
)
def test_invalid_n_fake_cached_is_400(server: LlamaServer, value: Any, needle: str) -> None:
    code, js = post(server, prompt=PREFIX + NEW, n_fake_cached=value, cache_prompt=False)
    assert code == 400, js
    msg = js["error"]["message"]
    assert "n_fake_cached" in msg and needle in msg, msg
    assert_up(server)
    fake(server, 512)  # and it still serves


def test_prompt_beyond_context_is_400(server: LlamaServer) -> None:
    tokens = filler_tokens(8300, seed=5, n_vocab=N_VOCAB)  # ctx 8192
    code, js = post(server, prompt=tokens, n_fake_cached=8000)
    assert code == 400, js
    assert "n_fake_cached" in js["error"]["message"] and "context" in js["error"]["message"]
    assert_up(server)


def test_several_completions_are_400(start_server: ServerFactory) -> None:
    srv = start_server(extra_args=["--parallel", "2"])
    code, js = post(srv, prompt=PREFIX + NEW, n_fake_cached=1000, n_cmpl=2)
    assert code == 400, js
    assert "n_fake_cached" in js["error"]["message"] and "n_cmpl" in js["error"]["message"]
    assert_up(srv)
    fake(srv, 1000)  # no child slot left waiting


def test_draft_model_is_400(start_server: ServerFactory, tiny_model: Any) -> None:
    srv = start_server(extra_args=["--model-draft", str(tiny_model), "--spec-type", "draft-simple"])
    code, js = post(srv, prompt=PREFIX + NEW, n_fake_cached=1000)
    assert code == 400, js
    assert "n_fake_cached" in js["error"]["message"] and "draft" in js["error"]["message"]
    assert_up(srv)


# --- sliding-window models ----------------------------------------------------------------------------


SWA_MODELS = pytest.mark.parametrize("model", ["iswa_model", "oss_model"], ids=["gemma3", "gpt-oss"])


@SWA_MODELS
@pytest.mark.parametrize("swa_full", [False, True], ids=["window", "swa-full"])
def test_a_sliding_window_fake_prefix_is_a_cache_hit(
    start_server: ServerFactory,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    model: str,
    swa_full: bool,
) -> None:
    """The tiny gemma3 (a window of 128 in three of four layers) and gpt-oss (the same window in every other
    layer, attention sinks), a ubatch of 64, with --swa-full as a user's own flag or not: the fake prefix, the
    genuine hit restored from a saved slot and the baseline honour the contract (cache_n == L, prompt_n == new)
    at L below the window, one short of it, at it, one past it, L not a multiple of the ubatch, L + new
    crossing the window and a ubatch boundary, and new larger than the ubatch."""
    slots = tmp_path_factory.mktemp("slots")
    extra = ["--slot-save-path", str(slots), *(["--swa-full"] if swa_full else [])]
    srv = start_server(model=request.getfixturevalue(model), extra_args=extra, ubatch_size=64)
    assert (srv.config.memory, srv.config.swa_full) == ("kv_iswa", swa_full), srv.config
    assert srv.config.swa_cells == (srv.config.kv_cells if swa_full else 256), srv.config  # pad(128 + 64, 256)
    client = ContractClient(srv)
    cases = [(100, 16), (WINDOW - 1, 16), (WINDOW, 16), (WINDOW + 1, 16), (200, 16), (120, 20), (300, 100)]
    for L, new in cases:
        step = text_step(PREFIX[:L], NEW[:new] if new <= len(NEW) else PREFIX[-new:])
        client.save_state(step, f"L{L}_{new}.bin")
        for arm in ("fake", "genuine", "baseline", "fake"):
            r = client.run_arm(arm, step, f"L{L}_{new}.bin" if arm == "genuine" else None)
            assert r.ok, (L, new, r)
    # the stock reuse rule on the same state: re-processed in full (it asks for one position more than a saved
    # window holds), except with --swa-full, where the server's window is the whole context
    assert srv.client.post("/slots/0?action=restore", json={"filename": "L300_100.bin"}).status_code == 200
    code, js = post(srv, prompt=PREFIX[:300] + PREFIX[-100:], cache_prompt=True)
    assert code == 200 and js["timings"]["cache_n"] == (300 if swa_full else 0), js["timings"]
    bad = srv.client.post("/slots/0?action=restore", json={"filename": "L300_100.bin", "exact_window": "yes"})
    assert bad.status_code == 400 and "exact_window" in bad.text, bad.text
    assert_up(srv)


@SWA_MODELS
@pytest.mark.parametrize("swa_full", [False, True], ids=["window", "swa-full"])
def test_a_sliding_window_server_survives_any_history(
    start_server: ServerFactory, request: pytest.FixtureRequest, model: str, swa_full: bool
) -> None:
    """A seeded random sequence of fake, cached and uncached requests of random depths around the window and the
    ubatch, on the assertions-on build: every fake request is a hit of exactly its L, every normal one reuses no
    fabricated cell, and the server stays up (a kv-cells assert would abort it), also after a refusal."""
    rng = random.Random(5)
    extra = ["--swa-full"] if swa_full else []
    srv = start_server(model=request.getfixturevalue(model), extra_args=extra, ubatch_size=64)
    real = 0  # the longest prefix of PREFIX really decoded in the slot (what a normal request may reuse)
    for _ in range(40):
        L = rng.choice([1, 63, 64, 65, WINDOW - 1, WINDOW, WINDOW + 1, 200, 256, 257, 700, rng.randrange(2, 1400)])
        new = rng.choice([1, 16, 63, 64, 65, 100])
        kind = rng.choice(["fake", "fake", "cached", "uncached"])
        if kind == "fake":
            fake(srv, L, new=new, seed=rng.randrange(1000))
            real = 0
            continue
        code, js = post(srv, prompt=PREFIX[: L + new], cache_prompt=kind == "cached")
        assert code == 200, js
        assert js["timings"]["cache_n"] <= (real if kind == "cached" else 0), (kind, L, new, real, js["timings"])
        real = L + new
    # a fake prefix the cache has no room for is refused in one line, and the cache still serves
    code, js = post(srv, prompt=filler_tokens(8300, seed=5, n_vocab=N_VOCAB), n_fake_cached=8000)
    assert code == 400 and "n_fake_cached" in js["error"]["message"], js
    fake(srv, WINDOW + 1)
    assert_up(srv)


@pytest.mark.parametrize("swa_full", [False, True], ids=["window", "swa-full"])
def test_the_window_rule_predicts_what_today_s_server_reuses(
    start_server: ServerFactory, iswa_model: Any, swa_full: bool
) -> None:
    """The policy model (lab.conversation.policy) against the stock server (no exact_window): after a prompt of
    `end` tokens, a request sharing `common` of them is reused, or re-processed in full, as the model says, below the
    window, at it, past it, and departing more or less than the window cache keeps."""
    ctx = 4096
    srv = start_server(model=iswa_model, extra_args=["--swa-full"] if swa_full else [], ubatch_size=64, ctx_size=ctx)
    meta = read_gguf_metadata(iswa_model)
    window = WindowCache.of(meta, 64, ctx, swa_full)
    assert window is not None and window.cells == (ctx if swa_full else 256) and window.n_swa == WINDOW
    setting = CacheSetting(checkpoints=0, cache_ram_mib=0, swa_full=swa_full, ubatch=64)  # the lab server's
    model = policy_for(meta, setting, ctx, {})
    other = filler_tokens(200, seed=99, n_vocab=N_VOCAB)
    for end, common in [(100, 100), (128, 128), (129, 129), (300, 300), (1000, 600), (1000, 900), (1000, 700)]:
        code, js = post(srv, prompt=PREFIX[:end], cache_prompt=True)
        assert code == 200, js
        model.step(Request(PREFIX[:end]))
        code, js = post(srv, prompt=PREFIX[:common] + other[:16], cache_prompt=True)
        assert code == 200, js
        reused = js["timings"]["cache_n"]
        assert reused == model.step(Request(PREFIX[:common] + other[:16])).cache_n and reused in (0, common)
    assert_up(srv)


# --- fabricated state never leaks into a genuine hit ------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--ctx-checkpoints", "8", "--cache-ram", "256"]], ids=["plain", "ckpt+ram"])
def test_fabricated_state_is_never_a_cache_hit(start_server: ServerFactory, extra: list[str]) -> None:
    srv = start_server(extra_args=extra)
    # a real request first, so there is real data (and checkpoints/prompt cache entries) around
    code, js = post(srv, prompt=PREFIX[:600], cache_prompt=True)
    assert code == 200, js
    fake(srv, 1200)
    # the same tokens the fake request carried: a normal cached request must not reuse the fabricated prefix
    tokens = PREFIX[:1200] + filler_tokens(32, seed=100, n_vocab=N_VOCAB)
    code, js = post(srv, prompt=tokens, cache_prompt=True)
    assert code == 200, js
    cache_n = js["timings"]["cache_n"]
    # from scratch, or from real data only: the real 600-token prefix is the most that may be reused
    assert cache_n <= 600, f"reused {cache_n} cells after a fake request"
    assert js["timings"]["prompt_n"] == len(tokens) - cache_n
    assert_up(srv)


def test_genuine_hit_after_fake_matches_contract(server: LlamaServer) -> None:
    fake(server, 800)
    client = ContractClient(server)
    for arm in ("genuine", "fake", "baseline"):
        r = client.run_arm(arm, text_step(PREFIX[:800], NEW))
        assert r.ok and r.kind is None, r.reason


def test_client_failures_are_typed_and_leave_the_server_up(server: LlamaServer) -> None:
    client = ContractClient(server)
    assert server.n_vocab() == N_VOCAB  # read from the server, never a fallback guess
    # the server refuses n_fake_cached beyond the prompt: an HTTP failure
    r = client.run_arm("fake", Step(L=200, new=0, prompt=PREFIX[:100], prefix=PREFIX[:100]))
    assert (r.ok, r.kind) == (False, "http") and "HTTP 400" in r.reason, r
    # the server answers, but decodes 48 new tokens where the step claims 10: a contract failure
    r = client.run_arm("fake", Step(L=800, new=10, prompt=PREFIX[:800] + NEW, prefix=PREFIX[:800]))
    assert (r.ok, r.kind) == (False, "contract") and "prompt_n=48" in r.reason, r
    assert not client.died(r)
    assert_up(server)


# --- the genuine arm from a saved state -------------------------------------------------------------


def test_saved_states_give_the_genuine_arm_a_real_hit_without_a_prefill(
    start_server: ServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Each L is prefilled once (the deeper one from the shallower state: only the tokens between), saved in a
    slot file, and restored before every genuine request: a real hit (cache_n == L, prompt_n == new) even after
    a fake request or another depth filled the slot. A missing slot file is refused and the server stays up."""
    slots = tmp_path_factory.mktemp("slots")
    srv = start_server(extra_args=["--slot-save-path", str(slots)])
    client = ContractClient(srv)
    shallow, deep = text_step(PREFIX[:512], NEW), text_step(PREFIX[:1024], NEW)
    full_ms = client.save_state(shallow, "L512.bin")
    client.save_state(deep, "L1024.bin", (512, "L512.bin"))
    assert (slots / "L512.bin").exists() and (slots / "L1024.bin").exists() and full_ms > 0
    for step, name in ((deep, "L1024.bin"), (shallow, "L512.bin"), (deep, "L1024.bin")):
        fake(srv, 700)  # something else in the slot first
        r = client.run_arm("genuine", step, name)
        assert r.ok and r.warm == "restore", r
        assert r.timings is not None and (r.timings.cache_n, r.timings.prompt_n) == (step.L, len(NEW))
    plain = client.run_arm("plain", shallow)
    assert plain.ok and plain.warm == "prefill" and plain.timings and plain.timings.cache_n == 512
    missing = client.run_arm("genuine", shallow, "L999.bin")
    assert not missing.ok and missing.kind == "http" and "prefix restore" in missing.reason, missing
    assert_up(srv)
