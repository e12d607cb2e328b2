"""The tiny qwen3vl projector (lab.models.tiny.vision) against the real patched llama-server (asserts on)."""

from __future__ import annotations

import base64
import hashlib
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.core.settings import Settings
from lab.engine.build import EngineInfo
from lab.engine.imagegrid import ImageGeometry, ProjectorError
from lab.engine.png import make_png
from lab.engine.server import LlamaServer, server_args
from lab.engine.source import PreparedSource
from lab.models.resolve import ModelError, ensure_tiny_projector
from lab.models.tiny.archs import TinyModelSpec
from lab.models.tiny.vision import TinyVisionSpec, write_tiny_projector
from lab.models.tiny.vocab import QWEN_ADDED_TOKENS

from conftest import ServerFactory, server_settings

pytestmark = pytest.mark.engine

VISION_START, VISION_END = 151652, 151653
TEXT = " describe"


@pytest.fixture(scope="module")
def projector(settings: Settings, source: PreparedSource) -> Path:
    return ensure_tiny_projector(settings.cache_dir, source)


@pytest.fixture(scope="module")
def vision_server(
    engine: EngineInfo, tiny_model: Path, projector: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("server") / "server.log"
    with LlamaServer(engine, tiny_model, server_settings(), log, ["--mmproj", str(projector)]) as srv:
        yield srv
        assert srv.alive(), f"server died during the module; log {log}"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _image_request(srv: LlamaServer, png: bytes, marker: str | None = None) -> dict[str, Any]:
    # the server's media marker is random per process (LLAMA_MEDIA_MARKER pins it): take it from /props
    marker = marker or srv.props()["media_marker"]
    prompt = {"prompt_string": marker + TEXT, "multimodal_data": [base64.b64encode(png).decode()]}
    r = srv.completion({"prompt": prompt, "n_predict": 1, "cache_prompt": False})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


# --- the file -------------------------------------------------------------------------------------


def test_projector_deterministic_and_small(tmp_path: Path, source: PreparedSource, projector: Path) -> None:
    gguf_py = source.path / "gguf-py"
    a = write_tiny_projector(tmp_path / "a.gguf", TinyVisionSpec(), gguf_py)
    b = write_tiny_projector(tmp_path / "sub" / "b.gguf", TinyVisionSpec(), gguf_py)
    assert _sha256(a) == _sha256(b) == _sha256(projector)
    assert _sha256(write_tiny_projector(tmp_path / "c.gguf", TinyVisionSpec(seed=1), gguf_py)) != _sha256(a)
    assert a.stat().st_size < 1_000_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "c.gguf", "sub"]  # no temp files left


def test_projector_keys_and_tensors(projector: Path) -> None:
    import gguf

    r = gguf.GGUFReader(str(projector))
    kv = {k: f.contents() for k, f in r.fields.items()}
    assert kv["general.architecture"] == "clip" and kv["general.type"] == "mmproj"
    assert kv["clip.projector_type"] == "qwen3vl_merger" and kv["clip.has_vision_encoder"] is True
    assert kv["clip.vision.projection_dim"] == TinyModelSpec().n_embd
    assert kv["clip.vision.spatial_merge_size"] == 2 and kv["clip.vision.patch_size"] == 16
    assert kv["clip.vision.is_deepstack_layers"] == [False] * kv["clip.vision.block_count"]
    tensors = {t.name: t for t in r.tensors}
    assert not any("deepstack" in name for name in tensors)
    f32 = gguf.GGMLQuantizationType.F32
    assert tensors["v.position_embd.weight"].tensor_type == f32  # F16 aborts in ggml_interpolate
    assert tensors["v.patch_embd.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert list(tensors["mm.2.bias"].shape) == [TinyModelSpec().n_embd]
    assert {"v.patch_embd.weight.1", "v.patch_embd.bias", "v.post_ln.weight", "mm.0.weight"} <= set(tensors)


def test_projector_spec_checked(tmp_path: Path, settings: Settings, source: PreparedSource) -> None:
    with pytest.raises(ModelError, match="n_embd_text"):
        ensure_tiny_projector(tmp_path, source, TinyVisionSpec(n_embd_text=128))
    with pytest.raises(ValueError, match="multiple of 4"):
        write_tiny_projector(tmp_path / "x.gguf", TinyVisionSpec(n_embd=60, n_head=2))
    assert not (tmp_path / "x.gguf").exists()


def test_image_grid_follows_smart_resize() -> None:
    grid = ImageGeometry(patch_size=16, merge=2).grid
    assert grid(320, 200) == (10, 6)  # 200/32 = 6.25 -> 6
    assert grid(640, 400) == (20, 13)  # 400/32 = 12.5 -> 13: std::round, not Python's round-half-even
    assert grid(1280, 800) == (40, 25)
    assert grid(40, 40) == (3, 3)  # below 8 tokens: scaled up
    nx, ny = grid(8000, 8000)  # above 4096 tokens: scaled down
    assert nx * ny <= 4096 and nx == ny


def test_geometry_is_read_from_the_projector(tmp_path: Path, source: PreparedSource) -> None:
    """The image geometry comes from the loaded projector's own keys, not from the tiny writer's defaults."""
    small = write_tiny_projector(
        tmp_path / "p8.gguf", TinyVisionSpec(patch_size=8, image_size=128), source.path / "gguf-py"
    )
    geom = ImageGeometry.of_projector(small)
    assert geom == ImageGeometry(patch_size=8, merge=2)
    assert geom.grid(320, 200) == (20, 13)  # align 16: 200/16 = 12.5 -> 13
    (tmp_path / "junk.gguf").write_bytes(b"junk")
    with pytest.raises(ProjectorError, match="not a GGUF"):
        ImageGeometry.of_projector(tmp_path / "junk.gguf")


def test_make_png_is_a_deterministic_png() -> None:
    png = make_png(70, 33, seed=3)
    assert png == make_png(70, 33, seed=3) != make_png(70, 33, seed=4)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (70, 33)
    (n_idat,) = struct.unpack(">I", png[33:37])
    assert png[37:41] == b"IDAT"
    assert len(zlib.decompress(png[41 : 41 + n_idat])) == 33 * (1 + 70 * 3)


def test_cli_prints_model_then_projector(tiny_model: Path, projector: Path) -> None:
    from typer.testing import CliRunner

    from lab.cli import app

    res = CliRunner().invoke(app, ["model", "tiny", "--vision"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == [str(tiny_model), str(projector)]


def test_no_mmproj_unless_given(tiny_model: Path, projector: Path) -> None:
    assert "--no-mmproj" in server_args(server_settings(), tiny_model, 1234, [])
    # --no-mmproj would also drop an explicit --mmproj
    assert "--no-mmproj" not in server_args(server_settings(), tiny_model, 1234, ["--mmproj", str(projector)])


# --- the real server ------------------------------------------------------------------------------


def test_server_loads_projector(start_server: ServerFactory, projector: Path) -> None:
    srv = start_server(extra_args=["--mmproj", str(projector)])
    assert srv.props()["modalities"]["vision"] is True
    models = srv.client.get("/v1/models").json()
    assert "multimodal" in models["models"][0]["capabilities"]
    assert "loaded multimodal model" in srv.log_text()


def test_vision_markers_are_single_tokens(vision_server: LlamaServer) -> None:
    """mtmd wraps every qwen3vl image in <|vision_start|> ... <|vision_end|>: one token each, as in the real model."""

    def tokenize(text: str, parse_special: bool) -> list[dict[str, Any]]:
        body = {"content": text, "with_pieces": True, "parse_special": parse_special}
        r = vision_server.client.post("/tokenize", json=body)
        r.raise_for_status()
        out: list[dict[str, Any]] = r.json()["tokens"]
        return out

    assert tokenize("<|vision_start|>", True) == [{"id": VISION_START, "piece": "<|vision_start|>"}]
    assert tokenize("<|vision_end|>", True) == [{"id": VISION_END, "piece": "<|vision_end|>"}]
    assert len(tokenize("<|vision_start|>", False)) > 1  # CONTROL: plain text unless parse_special
    for tid, (text, _type) in QWEN_ADDED_TOKENS.items():
        assert [t["id"] for t in tokenize(text.decode(), True)] == [tid], text


@pytest.mark.parametrize(("width", "height"), [(320, 200), (640, 400)])
def test_image_prompt_counts(vision_server: LlamaServer, projector: Path, width: int, height: int) -> None:
    """prompt_n = image tokens (from the patch size and 2x2 merge) + the two markers + the text tokens;
    M-RoPE advances the position by max(nx, ny), not by the token count."""
    nx, ny = ImageGeometry.of_projector(projector).grid(width, height)
    n_text = len(vision_server.tokenize(TEXT, add_special=True))
    n_markers = len(vision_server.tokenize("<|vision_start|><|vision_end|>"))
    assert n_markers == 2
    start = len(vision_server.log_text())
    out = _image_request(vision_server, make_png(width, height, seed=0))
    assert out["timings"]["prompt_n"] == nx * ny + n_markers + n_text
    log = vision_server.log_text()[start:]
    assert re.search(r"image slice encoded in \d+ ms", log)
    # positions show only in the hybrid memory's warning for the tokens after the image: their last
    # position vs the recurrent cell's (the image's t position); the text resumes n_pos after it
    m = re.findall(r"non-consecutive token position (\d+) after (\d+) for sequence 0 with (\d+) new tokens", log)
    last, after, n_new = map(int, m[-1])
    assert n_new == 1 + n_text  # <|vision_end|> + text
    assert last - after - n_new + 1 == max(nx, ny)


def test_image_without_the_servers_marker_is_ignored(vision_server: LlamaServer) -> None:
    """A pitfall pinned: with the wrong marker (e.g. the README's <__media__>) the image is dropped silently."""
    out = _image_request(vision_server, make_png(320, 200), marker="<__media__>")
    assert out["timings"]["prompt_n"] == len(vision_server.tokenize("<__media__>" + TEXT, add_special=True))
