"""The band categoriser: its traps, coverage and the cross-band audit."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from lab.engine.build import EngineInfo
from lab.models.bands import (
    CoverageError,
    Node,
    classify,
    classify_all,
    layer_kinds,
    resolve_layers,
    weight_token,
)

pytestmark = pytest.mark.engine

GRAPH = [
    Node("__fgdn_ch__-0", "GATED_DELTA_NET", "q_conv_predelta-0"),
    Node("linear_attn_qkv_mixed-0", "MUL_MAT", "blk.0.attn_qkv.weight"),
    Node("z-0", "MUL_MAT", "blk.0.attn_gate.weight"),
    Node("node_54", "SILU", "z-0 (reshaped)"),
    Node("node_55", "MUL", "node_54"),
    Node("ffn_moe_down-0", "MUL_MAT_ID", "blk.0.ffn_down_exps.weight"),
    Node("ffn_shexp-0", "MUL_MAT", "blk.0.ffn_up_shexp.weight"),
    Node("attn_norm-1", "RMS_NORM", "l_out-0"),
    Node("Qcur_full-1", "MUL_MAT", "blk.1.attn_q.weight"),
    Node("Kcur-1", "MUL_MAT", "blk.1.attn_k.weight"),
    Node("__fattn__-1", "FLASH_ATTN_EXT", "Qcur-1 (view) (permuted)"),
    Node("cache_k_l1 (view)", "SET_ROWS", "Kcur-1 (view)"),
    Node("attn_output-1", "MUL_MAT", "blk.1.attn_output.weight"),
    Node("attn_residual-1", "ADD", "attn_output-1"),
    Node("result_output", "MUL_MAT", "token_embd.weight"),
    Node("norm", "RMS_NORM", "l_out-1"),
]


def test_exact_weight_tokens_attn_q_never_captures_attn_qkv() -> None:
    assert weight_token("blk.12.attn_qkv.weight") == (12, "attn_qkv")
    assert weight_token("blk.12.attn_q.weight") == (12, "attn_q")
    kinds = layer_kinds(GRAPH)
    assert classify(Node("x-0", "MUL_MAT", "blk.0.attn_qkv.weight"), kinds) == "gdn"
    assert classify(Node("x-1", "MUL_MAT", "blk.1.attn_q.weight"), kinds) == "proj"
    assert classify(Node("x-1", "MUL_MAT", "blk.1.attn_output.weight"), kinds) == "proj"
    assert classify(Node("x-0", "MUL_MAT", "blk.0.attn_gate.weight"), kinds) == "gdn"


def test_op_type_comes_first_and_layer_kind_disambiguates() -> None:
    bands = classify_all(GRAPH)
    by_name = {n.name: b for n, b in bands.items()}
    assert by_name["__fgdn_ch__-0"] == "gdn" and by_name["__fattn__-1"] == "attn_core"
    assert by_name["ffn_moe_down-0"] == "ffn_moe" and by_name["ffn_shexp-0"] == "ffn_moe"
    assert by_name["node_55"] == "gdn"  # anonymous: inherits layer 0 (recurrent) through its src0 chain
    assert by_name["attn_norm-1"] == "proj" and by_name["cache_k_l1 (view)"] == "attn_core"
    assert by_name["attn_residual-1"] == "other" and by_name["result_output"] == "other"
    assert layer_kinds(GRAPH) == {0: "recurrent", 1: "attention"}
    assert resolve_layers(GRAPH)["node_55"] == 0


def test_uncovered_nodes_fail_listing_them() -> None:
    weird = [*GRAPH, Node("mystery-9", "MUL_MAT", "blk.9.attn_mystery.weight")]
    with pytest.raises(CoverageError, match=r"1 node\(s\) in no band: mystery-9 \[MUL_MAT\]"):
        classify_all(weird)


def test_audit_rejects_a_recurrent_matmul_in_an_attention_band() -> None:
    # layer 0 is recurrent; a projection weight there (e.g. from a substring bug) must not pass silently
    bad = [*GRAPH, Node("Qcur-0", "MUL_MAT", "blk.0.attn_q.weight")]
    with pytest.raises(CoverageError, match=r"recurrent-layer matmul 'Qcur-0'.*classified as proj"):
        classify_all(bad)


def test_real_graph_is_fully_covered(engine: EngineInfo, tiny_model: Path, tmp_path: Path) -> None:
    from lab.core.settings import load_settings
    from lab.instrument import build_instrument

    info = build_instrument(engine, load_settings().cache_dir)
    out = tmp_path / "p.jsonl"
    cmd = [str(info.binary), "--model", str(tiny_model), "--out", str(out), "--chunk", "128", "--depths", "0,128"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    for depth in (0, 128):
        nodes = [Node(x["name"], x["op"], x["src0"]) for x in rows if x["kind"] == "node" and x["depth"] == depth]
        bands = classify_all(nodes)  # raises unless 100% covered and audited
        assert len(bands) == len(set(nodes))
        assert set(Counter(bands.values())) == {"ffn_moe", "attn_core", "proj", "gdn", "other"}
