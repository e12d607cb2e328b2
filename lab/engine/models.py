"""Model resolution: the embedded default is the tiny synthetic qwen35moe model, written once and cached."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from lab.engine import tinymodel, tinyvision
from lab.engine.source import PreparedSource, file_sha256, prepare_source
from lab.engine.tinymodel import TinyModelSpec, write_tiny_model
from lab.engine.tinyvision import TinyVisionSpec, write_tiny_projector
from lab.settings import Settings

VOCAB_REL = Path("models") / "ggml-vocab-qwen35.gguf"


def tiny_model_path(cache_dir: Path, spec: TinyModelSpec, vocab: Path) -> Path:
    # keyed by the spec, the vocab and the writer's own source: a changed writer never serves a stale file
    key = json.dumps(asdict(spec), sort_keys=True) + file_sha256(vocab) + file_sha256(Path(tinymodel.__file__))
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir / "models" / f"tiny-{spec.arch}-{digest}.gguf"


def ensure_tiny_model(cache_dir: Path, source: PreparedSource, spec: TinyModelSpec | None = None) -> Path:
    """Write the tiny model if it is not cached yet (deterministic: same spec + vocab, same bytes)."""
    spec = spec or TinyModelSpec()
    vocab = source.path / VOCAB_REL
    out = tiny_model_path(cache_dir, spec, vocab)
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        write_tiny_model(out, vocab, spec, gguf_py_dir=source.path / "gguf-py")
    return out


def tiny_projector_path(cache_dir: Path, spec: TinyVisionSpec) -> Path:
    # tinyvision borrows tinymodel's random streams, so both writers' sources are in the key
    writers = file_sha256(Path(tinyvision.__file__)) + file_sha256(Path(tinymodel.__file__))
    digest = hashlib.sha256((json.dumps(asdict(spec), sort_keys=True) + writers).encode()).hexdigest()[:12]
    return cache_dir / "models" / f"tiny-mmproj-{tinyvision.PROJECTOR_TYPE}-{digest}.gguf"


def ensure_tiny_projector(
    cache_dir: Path, source: PreparedSource, spec: TinyVisionSpec | None = None, text: TinyModelSpec | None = None
) -> Path:
    """Write the tiny vision projector for the tiny text model ``text`` if it is not cached yet (deterministic).

    Its output width is the text model's ``n_embd`` (``spec`` defaults to that; a mismatch is refused).
    """
    text = text or TinyModelSpec()
    spec = spec or TinyVisionSpec(n_embd_text=text.n_embd)
    if spec.n_embd_text != text.n_embd:
        raise ValueError(f"projector n_embd_text {spec.n_embd_text} != text model n_embd {text.n_embd}")
    out = tiny_projector_path(cache_dir, spec)
    if not out.exists():
        write_tiny_projector(out, spec, gguf_py_dir=source.path / "gguf-py")
    return out


def resolve_model(settings: Settings, spec: TinyModelSpec | None = None) -> Path:
    """settings.model if given, else the tiny synthetic model (the embedded default)."""
    if settings.model is not None:
        path = settings.model.expanduser()
        if not path.exists():
            raise FileNotFoundError(f"model not found: {path}")
        return path
    return ensure_tiny_model(settings.cache_dir, prepare_source(settings.engine, settings.cache_dir), spec)


def resolve_projector(settings: Settings) -> Path:
    """settings.mmproj if given; with the tiny default model, the tiny projector; else a clear error."""
    if settings.mmproj is not None:
        path = settings.mmproj.expanduser()
        if not path.exists():
            raise FileNotFoundError(f"vision projector not found: {path}")
        return path
    if settings.model is not None:
        raise FileNotFoundError("image steps need the model's vision projector: set mmproj (--mmproj)")
    return ensure_tiny_projector(settings.cache_dir, prepare_source(settings.engine, settings.cache_dir))
