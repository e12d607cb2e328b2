"""`--model pretrained:NAME` and `--model tiny:ARCH`: a model by name, resolved into the cache (a cached
pretrained file is never fetched again; an unknown name is refused with the known ones)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.core.errors import UsageError
from lab.core.settings import Settings
from lab.models.pretrained import PRETRAINED, PretrainedError, pretrained_path
from lab.models.resolve import resolve_model


@pytest.mark.fast
def test_a_pretrained_name_resolves_to_its_cached_file(settings: Settings, tmp_path: Path) -> None:
    name = "gemma3-270m-q4_k_m"
    s = settings.model_copy(update={"cache_dir": tmp_path, "model": Path(f"pretrained:{name}")})
    dest = pretrained_path(name, tmp_path)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"GGUF")  # as a finished fetch leaves it: the file and its checked hash beside it
    dest.with_suffix(".sha256").write_text(PRETRAINED[name].sha256 + "\n")
    assert resolve_model(s) == dest
    assert not (tmp_path / "downloads").exists()  # cached: nothing fetched


@pytest.mark.fast
def test_an_unknown_pretrained_name_is_refused_with_the_known_ones(settings: Settings, tmp_path: Path) -> None:
    s = settings.model_copy(update={"cache_dir": tmp_path, "model": Path("pretrained:llama-9000")})
    with pytest.raises(PretrainedError, match="no pretrained model 'llama-9000'; known: gemma3-270m-q4_k_m"):
        resolve_model(s)
    assert not any(tmp_path.iterdir())  # nothing created


@pytest.mark.engine
def test_a_tiny_architecture_by_name(settings: Settings) -> None:
    path = resolve_model(settings.model_copy(update={"model": Path("tiny:gemma3")}))
    assert path.name.startswith("tiny-gemma3-") and path.exists()


@pytest.mark.fast
def test_an_unknown_tiny_architecture_is_refused_by_its_name(settings: Settings, tmp_path: Path) -> None:
    s = settings.model_copy(update={"cache_dir": tmp_path, "model": Path("tiny:llama")})
    with pytest.raises(UsageError, match="--model tiny:llama: no tiny model of that architecture; known: qwen35moe"):
        resolve_model(s)
    assert not any(tmp_path.iterdir())
