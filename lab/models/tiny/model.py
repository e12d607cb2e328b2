"""Deterministic random-weight GGUF models for exercising llama.cpp code paths.

:func:`write_tiny_model` writes a small model with random weights but the *real*
tokenizer, copied (every ``tokenizer.*`` key) from a vocab-only GGUF such as
``<llama.cpp>/models/ggml-vocab-qwen35.gguf``.  The output is byte-for-byte
reproducible: the same :class:`~lab.models.tiny.archs.TinyModelSpec` and vocab file always
give the same sha256.

The parts, one module each:

- :mod:`lab.models.tiny.archs`: the spec, the supported architectures, their hyperparameters
  and their random tensors;
- :mod:`lab.models.tiny.vocab`: the tokenizer copy (with the Qwen added tokens filled in);
- :mod:`lab.models.tiny.emit`: the "emit channel", a few deterministic weights that keep the
  model from emitting tokens llama-server cannot return (partial UTF-8, special, EOG);
- :mod:`lab.core.gguf_io`: the atomic GGUF writer and the fast metadata reader.
"""

from __future__ import annotations

from pathlib import Path

from lab.core.gguf_io import atomic_gguf, import_gguf
from lab.models.tiny.archs import TinyModelSpec, build_tensors, hparams
from lab.models.tiny.emit import add_emit_channel, emittable_tokens
from lab.models.tiny.vocab import copy_tokenizer

_DEFAULT_SPEC = TinyModelSpec()


def write_tiny_model(
    out_path: Path,
    vocab_gguf: Path,
    spec: TinyModelSpec = _DEFAULT_SPEC,
    gguf_py_dir: Path | None = None,
) -> Path:
    """Write a deterministic random-weight model of ``spec.arch`` with ``vocab_gguf``'s tokenizer.

    The file is written to a temporary file next to ``out_path`` and atomically renamed
    into place.  Returns ``out_path``.
    """
    spec.validate()
    out_path = Path(out_path)
    vocab_gguf = Path(vocab_gguf)
    gguf = import_gguf(gguf_py_dir)
    vt = gguf.GGUFValueType

    with atomic_gguf(gguf, out_path, spec.arch) as writer:  # also writes general.architecture
        writer.add_key_value("general.type", "model", vt.STRING)
        writer.add_key_value("general.name", f"lab-tiny-{spec.arch}", vt.STRING)
        writer.add_key_value("general.file_type", int(gguf.LlamaFileType.MOSTLY_F16), vt.UINT32)
        for suffix, value, tname in hparams(spec):
            key = f"{spec.arch}.{suffix}"
            if tname.startswith("ARRAY:"):
                writer.add_key_value(key, value, vt.ARRAY, sub_type=vt[tname.split(":", 1)[1]])
            else:
                writer.add_key_value(key, value, vt[tname])
        tok = copy_tokenizer(gguf, writer, vocab_gguf)
        emittable = emittable_tokens(tok)

        tensors = build_tensors(spec, len(emittable))
        add_emit_channel(tensors, spec, emittable)
        for name, data in tensors.items.items():
            writer.add_tensor(name, data)
    return out_path
