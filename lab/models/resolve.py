"""Model resolution: the embedded default is the tiny synthetic qwen35moe model, written once and cached."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from types import ModuleType

from lab.core import gguf_io
from lab.core.errors import LabError, UsageError
from lab.core.hashing import file_sha256
from lab.core.settings import Settings
from lab.engine.source import PreparedSource, prepare_source
from lab.models.tiny import archs as tiny_archs
from lab.models.tiny import emit as tiny_emit
from lab.models.tiny import model as tiny_model
from lab.models.tiny import vision as tiny_vision
from lab.models.tiny import vocab as tiny_vocab
from lab.models.tiny.archs import TinyModelSpec, tiny_spec
from lab.models.tiny.model import write_tiny_model
from lab.models.tiny.vision import TinyVisionSpec, write_tiny_projector

VOCAB_REL = Path("models") / "ggml-vocab-qwen35.gguf"


class ModelError(LabError):
    """A model or projector that is missing, or does not fit the model it is for."""


#: Every module whose code decides the bytes of the tiny model or projector (add new ones here).
WRITER_MODULES: tuple[ModuleType, ...] = (gguf_io, tiny_archs, tiny_emit, tiny_model, tiny_vision, tiny_vocab)


def writer_sources_sha() -> str:
    """sha256 over the sources of :data:`WRITER_MODULES`, in that order."""
    h = hashlib.sha256()
    for module in WRITER_MODULES:
        if module.__file__ is None:
            raise RuntimeError(f"{module.__name__} has no source file")
        h.update(f"{module.__name__}:{file_sha256(Path(module.__file__))}\n".encode())
    return h.hexdigest()


def tiny_model_path(cache_dir: Path, spec: TinyModelSpec, vocab: Path) -> Path:
    # keyed by the spec, the vocab and the writers' sources: a changed writer never serves a stale file
    key = json.dumps(asdict(spec), sort_keys=True) + file_sha256(vocab) + writer_sources_sha()
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
    # the projector shares the model's random streams and GGUF writer, so all writers' sources are in the key
    key = json.dumps(asdict(spec), sort_keys=True) + writer_sources_sha()
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir / "models" / f"tiny-mmproj-{tiny_vision.PROJECTOR_TYPE}-{digest}.gguf"


def ensure_tiny_projector(
    cache_dir: Path, source: PreparedSource, spec: TinyVisionSpec | None = None, text: TinyModelSpec | None = None
) -> Path:
    """Write the tiny vision projector for the tiny text model ``text`` if it is not cached yet (deterministic).

    Its output width is the text model's ``n_embd`` (``spec`` defaults to that; a mismatch is refused).
    """
    text = text or TinyModelSpec()
    spec = spec or TinyVisionSpec(n_embd_text=text.n_embd)
    if spec.n_embd_text != text.n_embd:
        raise ModelError(f"projector n_embd_text {spec.n_embd_text} != text model n_embd {text.n_embd}")
    out = tiny_projector_path(cache_dir, spec)
    if not out.exists():
        write_tiny_projector(out, spec, gguf_py_dir=source.path / "gguf-py")
    return out


def ensure_tiny(settings: Settings, arch: str, seed: int, vision: bool) -> list[Path]:
    """`lab model tiny`: the tiny model of `arch` and `seed` (a bad pair is a UsageError before anything is
    prepared), written once into the cache, then with `vision` its projector; their paths in that order."""
    try:
        spec = tiny_spec(arch, seed=seed)
        spec.validate()
    except ValueError as e:
        raise UsageError(f"--arch/--seed: {e}") from e
    src = prepare_source(settings.engine, settings.cache_dir)
    paths = [ensure_tiny_model(settings.cache_dir, src, spec)]
    if vision:
        paths.append(ensure_tiny_projector(settings.cache_dir, src, text=spec))
    return paths


PRETRAINED_PREFIX, TINY_PREFIX = "pretrained:", "tiny:"


def resolve_model(settings: Settings, spec: TinyModelSpec | None = None) -> Path:
    """settings.model if given (a path; `pretrained:NAME`: that pretrained model, fetched once and hash-checked;
    `tiny:ARCH`: the lab's tiny model of that architecture), else the tiny synthetic model (the default)."""
    if settings.model is not None and str(settings.model).startswith(PRETRAINED_PREFIX):
        from lab.models.pretrained import ensure_pretrained

        return ensure_pretrained(str(settings.model).removeprefix(PRETRAINED_PREFIX), settings.cache_dir)
    if settings.model is not None and str(settings.model).startswith(TINY_PREFIX):
        arch = str(settings.model).removeprefix(TINY_PREFIX)
        if arch not in tiny_archs.SUPPORTED_ARCHS:
            raise UsageError(
                f"--model {settings.model}: no tiny model of that architecture; known: "
                f"{', '.join(tiny_archs.SUPPORTED_ARCHS)}"
            )
        return ensure_tiny(settings, arch, seed=0, vision=False)[0]
    if settings.model is not None:
        path = settings.model.expanduser()
        if not path.exists():
            raise ModelError(f"model not found: {path}")
        return path
    return ensure_tiny_model(settings.cache_dir, prepare_source(settings.engine, settings.cache_dir), spec)


def resolve_projector(settings: Settings) -> Path:
    """settings.mmproj if given; with the tiny default model, the tiny projector; else a clear error."""
    if settings.mmproj is not None:
        path = settings.mmproj.expanduser()
        if not path.exists():
            raise ModelError(f"vision projector not found: {path}")
        return path
    if settings.model is not None:
        raise ModelError("image steps need the model's vision projector: set mmproj (--mmproj)")
    return ensure_tiny_projector(settings.cache_dir, prepare_source(settings.engine, settings.cache_dir))
