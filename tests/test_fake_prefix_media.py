"""The fake-prefix contract with a screenshot in the new part, against the real patched server (asserts on)
with the tiny text model and the tiny qwen3vl projector: /completion and /v1/chat/completions, the genuine
hit control, media inside the fabricated prefix refused, and the has-media regression sequence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.core.settings import Settings
from lab.engine.build import EngineInfo
from lab.engine.imagegrid import TINY_GEOMETRY
from lab.engine.media import data_url, filler_text, media_prompt
from lab.engine.png import make_png
from lab.engine.server import LlamaServer
from lab.engine.source import PreparedSource
from lab.models.resolve import ensure_tiny_projector

from conftest import server_settings

pytestmark = pytest.mark.engine

L = 300
NEW_TEXT = " describe the screen and then click"


@pytest.fixture(scope="module")
def vision(
    engine: EngineInfo, tiny_model: Path, settings: Settings, source: PreparedSource,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LlamaServer]:  # fmt: skip
    projector = ensure_tiny_projector(settings.cache_dir, source)
    log = tmp_path_factory.mktemp("server") / "server.log"
    with LlamaServer(engine, tiny_model, server_settings(cache_ram_mib=0), log, ["--mmproj", str(projector)]) as srv:
        yield srv
        assert srv.alive(), f"server died during the module; log {log}"


def timings(r: Any) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    t: dict[str, Any] = r.json()["timings"]
    return t


def complete(srv: LlamaServer, prompt: Any, **extra: Any) -> Any:
    return srv.completion({"prompt": prompt, "n_predict": 1, "temperature": 0.0, **extra})


@pytest.mark.parametrize("size", [(320, 200), (640, 400)])
def test_fake_with_a_screenshot_in_the_new_part(vision: LlamaServer, size: tuple[int, int]) -> None:
    prefix = filler_text(vision, L, seed=1)
    png = make_png(*size, seed=2)
    img_tokens, _ = TINY_GEOMETRY.tokens(*size)
    expected_new = img_tokens + len(vision.tokenize(NEW_TEXT))
    prompt = media_prompt(vision, prefix, [png], NEW_TEXT)

    t = timings(complete(vision, prompt, cache_prompt=False, n_fake_cached=L))
    assert (t["cache_n"], t["prompt_n"], t["fake_n"]) == (L, expected_new, L)

    # the genuine-hit control: the same prefix prefilled for real, then the same request
    timings(complete(vision, prefix, cache_prompt=True))
    g = timings(complete(vision, prompt, cache_prompt=True))
    assert (g["cache_n"], g["prompt_n"]) == (L, expected_new)

    b = timings(complete(vision, prompt, cache_prompt=False))  # the baseline includes the encode
    assert (b["cache_n"], b["prompt_n"]) == (0, L + expected_new)


def test_media_inside_the_fabricated_prefix_is_refused(vision: LlamaServer) -> None:
    prefix = filler_text(vision, L, seed=3)
    prompt = media_prompt(vision, prefix, [make_png(320, 200)], NEW_TEXT)
    r = complete(vision, prompt, cache_prompt=False, n_fake_cached=L + 10)
    assert r.status_code == 400 and "media" in r.text, r.text
    assert timings(complete(vision, prompt, cache_prompt=False, n_fake_cached=L))["cache_n"] == L  # still serving


def test_has_media_regression_text_fake_then_image_requests(vision: LlamaServer) -> None:
    """A fake text-only request followed by any image request must not abort the server (GGML_ASSERT(has_mtmd)
    in a naive patch that copied the request's has-media flag into the slot); --cache-ram 0."""
    prefix = filler_text(vision, L, seed=4)
    text_only = vision.tokenize(prefix + NEW_TEXT)
    t = timings(complete(vision, text_only, cache_prompt=False, n_fake_cached=L))
    assert t["cache_n"] == L
    png = make_png(320, 200, seed=5)
    for extra in ({"cache_prompt": True}, {"cache_prompt": False}, {"cache_prompt": False, "n_fake_cached": L}):
        r = complete(vision, media_prompt(vision, prefix, [png], NEW_TEXT), **extra)
        assert r.status_code == 200, (extra, r.text)
        assert vision.alive()
    t = timings(complete(vision, text_only, cache_prompt=False, n_fake_cached=L))  # and back to text
    assert t["cache_n"] == L and vision.alive()


def test_fake_with_a_screenshot_on_chat_completions(vision: LlamaServer) -> None:
    png = make_png(320, 200, seed=6)
    prefix = filler_text(vision, 200, seed=7)
    messages = [
        {"role": "user", "content": prefix},
        {"role": "assistant", "content": " ok"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(png)}},
                                     {"type": "text", "text": NEW_TEXT}]},
    ]  # fmt: skip
    # calibrate L on the server's own template: the templated prompt up to the media marker is text only
    r = vision.client.post("/apply-template", json={"messages": messages})
    assert r.status_code == 200, r.text
    rendered: str = r.json()["prompt"]
    marker = str(vision.props()["media_marker"])
    assert rendered.count(marker) == 1
    before = rendered.split(marker)[0]
    n_before = len(vision.client.post("/tokenize", json={"content": before, "parse_special": True}).json()["tokens"])
    body = {"messages": messages, "max_tokens": 1, "temperature": 0.0, "cache_prompt": False}

    full = vision.client.post("/v1/chat/completions", json=body)
    total = timings(full)["prompt_n"]
    fake_L = n_before - 5  # fabricate most of the text before the screenshot
    t = timings(vision.client.post("/v1/chat/completions", json={**body, "n_fake_cached": fake_L}))
    assert (t["cache_n"], t["prompt_n"]) == (fake_L, total - fake_L)
    img_tokens, _ = TINY_GEOMETRY.tokens(320, 200)
    assert total > n_before + img_tokens  # the derived count, not `new + 8`: template tokens follow the image
    r = vision.client.post("/v1/chat/completions", json={**body, "n_fake_cached": n_before + 3})
    assert r.status_code == 400 and "media" in r.text
