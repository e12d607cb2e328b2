"""The "emit channel": keeps a random-weight tiny model from emitting tokens llama-server chokes on.

With purely random weights the model samples any of the vocab's tokens, including the
~1.4k byte-level BPE tokens that are not valid UTF-8 on their own and the EOG/special
tokens.  llama-server's output parser then fails on the malformed UTF-8 (HTTP 500
"Failed to parse input at pos 0", seen on ~40% of 128-token sampled completions) and an
EOG token ends a generation early.  So embedding dim 0 is a private channel: +A for
tokens the model may emit, -A for the others.  Every layer's FFN (each routed expert, or
the dense FFN) gets two hidden units that compute |x0| (silu/gelu(+-x0) * +-x0) and write
a large positive value into dim 0, so every position's final hidden state is dominated by
a positive dim 0 whatever the input (all layers, not just the first, because gemma3's
post-norms add O(1) noise to every dim of the residual per layer).  Through the tied
output embedding, emittable tokens then get logits ~+16A and the others ~-16A (e^-8
relative probability).  Routers ignore dim 0, so expert routing still varies per token.
Everything else stays random.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from lab.models.tiny.archs import Tensors, TinyModelSpec

_EMIT_A = 0.25  # embedding dim-0 magnitude
_EMIT_G = 1.0  # gate/up weight of the two |x0| units
_EMIT_D = 0.1  # down weight of the two |x0| units

# a list, many to a line for the formatter to skip
# Token texts llama.cpp treats as end-of-generation (src/llama-vocab.cpp), even if NORMAL type.
_EOG_TEXTS = frozenset(
    s.encode("utf-8")
    for s in (
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",
    )
)  # fmt: skip
_TOKEN_TYPE_NORMAL = 1


def _gpt2_byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode(): printable stand-in char -> byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def emittable_tokens(tok: dict[str, Any]) -> npt.NDArray[np.bool_]:
    """Tokens that are NORMAL, not EOG-looking, and (byte-level BPE) valid UTF-8 on their own."""
    tokens: list[bytes] = tok["tokenizer.ggml.tokens"]
    types: list[int] = tok.get("tokenizer.ggml.token_type") or [_TOKEN_TYPE_NORMAL] * len(tokens)
    byte_level = tok.get("tokenizer.ggml.model") == b"gpt2"
    decoder = _gpt2_byte_decoder()
    ok = np.zeros(len(tokens), dtype=np.bool_)
    for i, (text, ttype) in enumerate(zip(tokens, types, strict=True)):
        if ttype != _TOKEN_TYPE_NORMAL or text in _EOG_TEXTS:
            continue
        try:
            chars = text.decode("utf-8")
            if byte_level:
                bytes(decoder[c] for c in chars).decode("utf-8")
        except (UnicodeDecodeError, KeyError):
            continue
        ok[i] = True
    if not ok.any():
        raise ValueError("vocab has no emittable tokens")
    return ok


def add_emit_channel(t: Tensors, spec: TinyModelSpec, emittable: npt.NDArray[np.bool_]) -> None:
    """Overwrite embedding dim 0, the routers' dim-0 column and FFN units 0-1 of every layer (see module doc)."""
    emb = t.items["token_embd.weight"]
    emb[:, 0] = np.where(emittable, _EMIT_A, -_EMIT_A).astype(emb.dtype)
    sfx = "" if spec.arch == "gemma3" else "_exps"  # dense FFN (gemma3) or every routed expert (MoE)
    for il in range(spec.n_layer):
        p = f"blk.{il}."
        router = t.items.get(p + "ffn_gate_inp.weight")
        if router is not None:
            router[:, 0] = 0.0
        gate, up, down = (t.items[f"{p}ffn_{k}{sfx}.weight"] for k in ("gate", "up", "down"))
        for w in (gate, up):  # shape (..., n_ff, n_embd)
            w[..., 0:2, :] = 0.0
            w[..., 0, 0] = _EMIT_G
            w[..., 1, 0] = -_EMIT_G
        down[..., 0, :] = 0.0  # shape (..., n_embd, n_ff)
        down[..., 0, 0:2] = _EMIT_D
