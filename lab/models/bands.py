"""Sort profiled graph nodes into five bands: ffn_moe, attn_core, proj, gdn, other.

Signals, most reliable first:
  1. the ggml op (FLASH_ATTN_EXT -> attn_core; GATED_DELTA_NET, SSM_CONV -> gdn; MUL_MAT_ID -> ffn_moe);
  2. for plain matmuls, the EXACT projection token of the weight `blk.<L>.<token>.weight`
     (`attn_q` must never capture `attn_qkv`: a substring match would put GDN projections in `proj`);
  3. the layer's kind (recurrent vs full attention) and the node's name, for everything else.
Coverage must be 100%; an audit rejects any recurrent-layer matmul in an attention band.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from lab.core.errors import LabError
from lab.core.schemas import Band

LayerKind = Literal["attention", "recurrent"]

OP_BAND: dict[str, Band] = {
    "FLASH_ATTN_EXT": "attn_core",
    "GATED_DELTA_NET": "gdn",
    "SSM_CONV": "gdn",
    "SSM_SCAN": "gdn",
    "MUL_MAT_ID": "ffn_moe",
}

WEIGHT_EXACT: dict[str, Band] = {
    "attn_q": "proj",
    "attn_k": "proj",
    "attn_v": "proj",
    "attn_output": "proj",
    "attn_sinks": "attn_core",  # gpt-oss: one sink logit per head, joined to the softmax
    "attn_qkv": "gdn",
    "attn_gate": "gdn",
    "ssm_out": "gdn",
    "ssm_in": "gdn",
    "ssm_alpha": "gdn",
    "ssm_beta": "gdn",
    "ssm_conv1d": "gdn",
    "ssm_norm": "gdn",
    "ffn_gate_inp": "ffn_moe",
    "ffn_gate_exps": "ffn_moe",
    "ffn_up_exps": "ffn_moe",
    "ffn_down_exps": "ffn_moe",
    "ffn_gate_inp_shexp": "ffn_moe",
    "ffn_gate_shexp": "ffn_moe",
    "ffn_up_shexp": "ffn_moe",
    "ffn_down_shexp": "ffn_moe",
    "ffn_gate": "ffn_moe",
    "ffn_up": "ffn_moe",
    "ffn_down": "ffn_moe",
}

_WEIGHT_RE = re.compile(r"^blk\.(\d+)\.([a-z0-9_]+)\.(weight|bias)$")
_LAYER_RE = re.compile(r"-(\d+)(?:$| )")
# node-name tokens of each path (first token of the name, before "-<layer>")
_FFN_NAMES = re.compile(r"^(ffn_|post_attention_norm|shared_expert|ffn_inp)")
_RESIDUAL_NAMES = re.compile(r"^(attn_residual|ffn_residual|l_out|inp_embd|result_|norm$|model\.)")
_ATTN_CORE_NAMES = re.compile(r"^(kq|kqv|__fattn__|cache_k_l|cache_v_l|attn_mask)")


@dataclass(frozen=True)
class Node:
    name: str
    op: str
    src0: str = ""


def weight_token(src0: str) -> tuple[int, str] | None:
    """(layer, exact projection token) of a weight name like `blk.3.attn_q.weight`."""
    m = _WEIGHT_RE.match(src0)
    return (int(m.group(1)), m.group(2)) if m else None


def node_layer(node: Node) -> int | None:
    wt = weight_token(node.src0)
    if wt is not None:
        return wt[0]
    m = _LAYER_RE.search(node.name)
    if m:
        return int(m.group(1))
    m = re.search(r"_l(\d+)\b", node.name)  # cache_k_l3, cache_r_l0
    return int(m.group(1)) if m else None


def resolve_layers(nodes: Iterable[Node]) -> dict[str, int | None]:
    """Layer of every node name; anonymous nodes (`node_142`) inherit it through their src0 chain."""
    nodes = list(nodes)
    layer: dict[str, int | None] = {n.name: node_layer(n) for n in nodes}
    src = {n.name: n.src0 for n in nodes}
    for _ in range(8):  # chains of anonymous nodes are short
        changed = False
        for name, lay in layer.items():
            if lay is None:
                up = src.get(name, "")
                inherited = layer.get(up) if up in layer else node_layer(Node(up, ""))
                if inherited is not None:
                    layer[name] = inherited
                    changed = True
        if not changed:
            break
    return layer


def layer_kinds(nodes: Iterable[Node]) -> dict[int, LayerKind]:
    """A layer with a delta-net / conv op is recurrent; one with attention projections is full attention."""
    kinds: dict[int, LayerKind] = {}
    for n in nodes:
        layer = node_layer(n)
        if layer is None:
            continue
        wt = weight_token(n.src0)
        if n.op in ("GATED_DELTA_NET", "SSM_CONV", "SSM_SCAN") or (wt and wt[1] in ("attn_qkv", "ssm_out")):
            kinds[layer] = "recurrent"
        elif n.op == "FLASH_ATTN_EXT" or (wt and wt[1] in ("attn_q", "attn_k", "attn_v")):
            kinds.setdefault(layer, "attention")
    return kinds


def classify(node: Node, kinds: dict[int, LayerKind], layer: int | None = None) -> Band | None:
    """The node's band, or None when no rule covers it (coverage then fails, naming it).
    `layer` is the resolved layer (see resolve_layers); layerless nodes are the global ones (embedding,
    final norm, LM head) and go to `other`."""
    op = node.op.split("(")[0]
    if op in OP_BAND:
        return OP_BAND[op]
    wt = weight_token(node.src0)
    if op == "MUL_MAT" and wt is not None:
        return WEIGHT_EXACT.get(wt[1])
    if op in ("MUL_MAT", "GET_ROWS") and node.src0 in ("token_embd.weight", "output.weight"):
        return "other"
    if _RESIDUAL_NAMES.match(node.name):
        return "other"
    if _FFN_NAMES.match(node.name):
        return "ffn_moe"
    if layer is None:
        layer = node_layer(node)
    if layer is None:
        return "other"
    kind = kinds.get(layer)
    if kind == "recurrent":
        return "gdn"
    if kind == "attention":
        return "attn_core" if _ATTN_CORE_NAMES.match(node.name) else "proj"
    return None


def audit(node: Node, band: Band, kinds: dict[int, LayerKind]) -> str | None:
    """The cross-band check: a matmul of a recurrent layer must never land in an attention band."""
    layer = node_layer(node)
    recurrent = layer is not None and kinds.get(layer) == "recurrent"
    if node.op.startswith("MUL_MAT") and band in ("proj", "attn_core") and recurrent:
        return f"recurrent-layer matmul {node.name!r} ({node.src0}) classified as {band}"
    return None


class CoverageError(LabError):
    pass


def classify_all(nodes: list[Node]) -> dict[Node, Band]:
    """Every node banded (100% coverage) and audited, or CoverageError listing what failed."""
    kinds = layer_kinds(nodes)
    layers = resolve_layers(nodes)
    out: dict[Node, Band] = {}
    uncovered: list[Node] = []
    problems: list[str] = []
    for n in nodes:
        band = classify(n, kinds, layers.get(n.name))
        if band is None:
            uncovered.append(n)
            continue
        if (msg := audit(n, band, kinds)) is not None:
            problems.append(msg)
        out[n] = band
    if uncovered:
        listed = ", ".join(f"{n.name} [{n.op}]" for n in uncovered[:20])
        problems.insert(0, f"{len(uncovered)} node(s) in no band: {listed}")
    if problems:
        raise CoverageError("; ".join(problems))
    return out
