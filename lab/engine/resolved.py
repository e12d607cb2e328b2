"""The graph and memory configuration llama-server resolved, as its log (`-lv 4`) states it."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field


class ResolvedConfig(BaseModel):
    """Graph and memory configuration as the server's log states it (None: the log did not say)."""

    n_ctx: int | None = None
    n_ctx_seq: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    flash_attn: str | None = None
    fused_gdn_ar: bool | None = None
    fused_gdn_ch: bool | None = None
    n_rs_seq: int | None = None
    v_trans: bool | None = None
    threads: int | None = None
    threads_batch: int | None = None
    n_seq_max: int | None = None
    kv_cells: int | None = None
    recurrent_cells: int | None = None
    graph_nodes: int | None = None
    graph_splits: int | None = None
    memory: str | None = None  # "hybrid", "kv", "kv_iswa", "recurrent"
    swa_cells: int | None = None  # a sliding-window model's window cache (all of the context with --swa-full)
    kv_mib: float | None = None  # what the attention caches hold, summed (both children of a sliding-window one)
    swa_full: bool | None = None
    system_info: str | None = None
    build: str | None = None
    raw: dict[str, str] = Field(default_factory=dict)


_CTX_INTS = ("n_ctx", "n_ctx_seq", "n_batch", "n_ubatch", "n_seq_max", "n_rs_seq")


def _bool(s: str) -> bool:
    return s.strip().lower() in {"1", "true", "yes", "on", "enabled"}


def parse_resolved_config(log: str) -> ResolvedConfig:
    """Pull what the log states about the resolved graph config (needs `-lv 4`); unknown lines are ignored."""
    cfg: dict[str, Any] = {}
    raw: dict[str, str] = {}
    for line in log.splitlines():
        if m := re.search(r"llama_context: (\w+)\s*=\s*(.*)$", line):
            raw[m.group(1)] = m.group(2).strip()
    for key in _CTX_INTS:
        if raw.get(key, "").isdigit():
            cfg[key] = int(raw[key])
    cfg["flash_attn"] = raw.get("flash_attn")
    if m := re.search(r"Flash Attention was auto, set to (\w+)", log):
        cfg["flash_attn"] = m.group(1)
    if m := re.search(r"fused Gated Delta Net \(autoregressive\) (enabled|disabled)", log):
        cfg["fused_gdn_ar"] = m.group(1) == "enabled"
    if m := re.search(r"fused Gated Delta Net \(chunked\) (enabled|disabled)", log):
        cfg["fused_gdn_ch"] = m.group(1) == "enabled"
    if m := re.search(r"llama_memory_recurrent: size = .*?\(\s*(\d+) cells", log):
        cfg["recurrent_cells"] = int(m.group(1))
    if m := re.search(r"llama_kv_cache(?:_iswa)?: size = .*?\(\s*(\d+) cells", log):
        cfg["kv_cells"] = int(m.group(1))
    if sizes := re.findall(r"llama_kv_cache: size =\s*([\d.]+) MiB", log):
        cfg["kv_mib"] = sum(float(x) for x in sizes)
    if m := re.search(r"creating\s+SWA KV cache, size = (\d+) cells", log):
        cfg["swa_cells"] = int(m.group(1))
        cfg["swa_full"] = "using full-size SWA cache" in log
    if m := re.search(r"v_trans\s*=\s*(\w+)", log):
        cfg["v_trans"] = _bool(m.group(1))
    if m := re.search(r"graph nodes\s*=\s*(\d+)", log):
        cfg["graph_nodes"] = int(m.group(1))
    if m := re.search(r"graph splits\s*=\s*(\d+)", log):
        cfg["graph_splits"] = int(m.group(1))
    if m := re.search(r"n_threads = (\d+) \(n_threads_batch = (\d+)\)", log):
        cfg["threads"], cfg["threads_batch"] = int(m.group(1)), int(m.group(2))
    if m := re.search(r"system_info: (.*)", log):
        cfg["system_info"] = m.group(1).strip()
    if m := re.search(r"build_info: (.*)", log):
        cfg["build"] = m.group(1).strip()
    has_recr = "llama_memory_recurrent:" in log
    if "iswa" in log.lower() and "llama_kv_cache" in log:
        cfg["memory"] = "kv_iswa"
    elif has_recr and "llama_kv_cache:" in log:
        cfg["memory"] = "hybrid"
    elif has_recr:
        cfg["memory"] = "recurrent"
    elif "llama_kv_cache:" in log:
        cfg["memory"] = "kv"
    return ResolvedConfig(raw=raw, **cfg)
