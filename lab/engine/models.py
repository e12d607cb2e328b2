"""Model resolution: the embedded default is the tiny synthetic qwen35moe model, written once and cached."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from lab.engine import tinymodel
from lab.engine.source import PreparedSource, file_sha256, prepare_source
from lab.engine.tinymodel import TinyModelSpec, write_tiny_model
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


def resolve_model(settings: Settings, spec: TinyModelSpec | None = None) -> Path:
    """settings.model if given, else the tiny synthetic model (the embedded default)."""
    if settings.model is not None:
        path = settings.model.expanduser()
        if not path.exists():
            raise FileNotFoundError(f"model not found: {path}")
        return path
    return ensure_tiny_model(settings.cache_dir, prepare_source(settings.engine, settings.cache_dir), spec)
