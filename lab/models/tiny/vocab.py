"""The tiny models' tokenizer: the *real* one, copied from a vocab-only GGUF, with one repair.

:func:`copy_tokenizer` copies every ``tokenizer.*`` key of a vocab-only GGUF such as
``<llama.cpp>/models/ggml-vocab-qwen35.gguf`` verbatim, with one change: the vendored Qwen
vocab has ``[PAD<id>]`` placeholders where the real Qwen2.5/Qwen3 tokenizers have their added
tokens (151646 ``<|object_ref_start|>`` .. 151668 ``</think>``); :data:`QWEN_ADDED_TOKENS` fills
them in at their real ids and with the converter's token types, so mtmd's image markers
``<|vision_start|>``/``<|vision_end|>`` (and ``<tool_call>``, ``<think>``, ...) are one token
each, as in the real model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.core.gguf_io import read_gguf_kv

_TOKEN_TYPE_CONTROL = 3
_TOKEN_TYPE_USER_DEFINED = 4

#: Qwen2.5/Qwen3 added tokens beyond <|im_end|> (tokenizer_config.json ``added_tokens_decoder``), with the
#: type the converter gives them (conversion/base.py get_vocab_base): ``special`` or ``<|...|>``-looking
#: -> CONTROL, the others -> USER_DEFINED (matched in text even without parse_special).
QWEN_ADDED_TOKENS: dict[int, tuple[bytes, int]] = {
    151646: (b"<|object_ref_start|>", _TOKEN_TYPE_CONTROL),
    151647: (b"<|object_ref_end|>", _TOKEN_TYPE_CONTROL),
    151648: (b"<|box_start|>", _TOKEN_TYPE_CONTROL),
    151649: (b"<|box_end|>", _TOKEN_TYPE_CONTROL),
    151650: (b"<|quad_start|>", _TOKEN_TYPE_CONTROL),
    151651: (b"<|quad_end|>", _TOKEN_TYPE_CONTROL),
    151652: (b"<|vision_start|>", _TOKEN_TYPE_CONTROL),
    151653: (b"<|vision_end|>", _TOKEN_TYPE_CONTROL),
    151654: (b"<|vision_pad|>", _TOKEN_TYPE_CONTROL),
    151655: (b"<|image_pad|>", _TOKEN_TYPE_CONTROL),
    151656: (b"<|video_pad|>", _TOKEN_TYPE_CONTROL),
    151657: (b"<tool_call>", _TOKEN_TYPE_USER_DEFINED),
    151658: (b"</tool_call>", _TOKEN_TYPE_USER_DEFINED),
    151659: (b"<|fim_prefix|>", _TOKEN_TYPE_CONTROL),
    151660: (b"<|fim_middle|>", _TOKEN_TYPE_CONTROL),
    151661: (b"<|fim_suffix|>", _TOKEN_TYPE_CONTROL),
    151662: (b"<|fim_pad|>", _TOKEN_TYPE_CONTROL),
    151663: (b"<|repo_name|>", _TOKEN_TYPE_CONTROL),
    151664: (b"<|file_sep|>", _TOKEN_TYPE_CONTROL),
    151665: (b"<tool_response>", _TOKEN_TYPE_USER_DEFINED),
    151666: (b"</tool_response>", _TOKEN_TYPE_USER_DEFINED),
    151667: (b"<think>", _TOKEN_TYPE_USER_DEFINED),
    151668: (b"</think>", _TOKEN_TYPE_USER_DEFINED),
}
_QWEN_EOT_ID = 151643  # <|endoftext|>: marks a Qwen2-family vocab


def _fill_qwen_added_tokens(tok: dict[str, Any]) -> None:
    """Put :data:`QWEN_ADDED_TOKENS` into a Qwen vocab's ``[PAD<id>]`` entries (other vocabs: unchanged)."""
    tokens: list[bytes] = tok["tokenizer.ggml.tokens"]
    types: list[int] | None = tok.get("tokenizer.ggml.token_type")
    if types is None or len(tokens) <= max(QWEN_ADDED_TOKENS) or tokens[_QWEN_EOT_ID] != b"<|endoftext|>":
        return
    tokens, types = list(tokens), list(types)
    for tid, (text, ttype) in QWEN_ADDED_TOKENS.items():
        if tokens[tid] == text:
            continue  # the vocab already has it: keep its type
        if tokens[tid] != f"[PAD{tid}]".encode():
            raise ValueError(f"vocab has {tokens[tid]!r} at id {tid}, expected {text!r} or a [PAD] placeholder")
        tokens[tid], types[tid] = text, ttype
    tok["tokenizer.ggml.tokens"], tok["tokenizer.ggml.token_type"] = tokens, types


def copy_tokenizer(gguf: Any, writer: Any, vocab_gguf: Path) -> dict[str, Any]:
    """Copy every ``tokenizer.*`` key of ``vocab_gguf`` into ``writer`` (Qwen added tokens filled in);
    return them as a dict."""
    vt = gguf.GGUFValueType
    kv = [item for item in read_gguf_kv(vocab_gguf) if item[0].startswith("tokenizer.")]
    tok: dict[str, Any] = {key: value for key, _vtype, _itype, value in kv}
    if not tok.get("tokenizer.ggml.tokens"):
        raise ValueError(f"{vocab_gguf}: no tokenizer.ggml.tokens")
    _fill_qwen_added_tokens(tok)
    for key, vtype, itype, _value in kv:
        writer.add_key_value(key, tok[key], vt(vtype), sub_type=None if itype is None else vt(itype))
    return tok
