"""The work of one prefill chunk, predicted from the model's GGUF metadata alone: FLOPs and bytes moved per band
(ffn_moe, attn_core, proj, gdn, other, as lab.models.bands sorts a profile's nodes) and per layer kind.

A chunk is `chunk` new tokens at depth L (L tokens already cached). FLOPs count a multiply-add as 2 and an
elementwise operation as 1. Per chunk, c = chunk, E = n_embd, for every term below (docs/cost-model.md
gives each term's origin):

  attention layers (full: every cached key; sliding: the last `window`), band proj:
    Q (with its output gate on gated-Q models), K, V, O:  2 c E (h dq g + h_kv dk + h_kv dv) + 2 c h dv E
    the pre-attention RMS norm:                            4 c E
  band attn_core (flash attention; masked columns are skipped, so a query at position L + i reads L + i + 1 keys,
  a sliding layer at most `window`):
    keys = sum_i min(L + i + 1, window)
    QK^T and AV:                                           2 h (dk + dv) keys,  softmax: 4 h keys
    bytes: the K and V rows each query reads (f16 cache):  keys h_kv (dk + dv) 2
  recurrent (Gated-DeltaNet) layers, band gdn:
    input projections (QKV, gate z, beta, alpha), output: 2 c E (conv_dim + d_inner + 2 n_v) + 2 c d_inner E
    the causal convolution:                                2 c conv_dim d_conv
    the state update, per value head and token:            7 dk dv (decay, k^T S, rank-1 update, q^T S)
    the pre-attention RMS norm:                            4 c E
    bytes: the weights, and the conv + delta state read and written once (f32)
  every layer's FFN, band ffn_moe:
    router 2 c E n_expert; routed experts 2 c used 3 E n_ff_exp; shared expert 2 c (3 E n_ff_shexp + E);
    a dense FFN 2 c 3 E n_ff; the post-attention RMS norm 4 c E
    bytes: the experts the chunk's tokens touch, n_expert (1 - (1 - used / n_expert)^c), read once
  band other: the LM head for the last token only (2 E n_vocab), the residual adds (2 c E per layer), the
  embedding rows read (c E).
Weights are read once per chunk at the file type's nominal bits per weight (routers and norms f32).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.core.gguf_io import TensorInfo, read_gguf_tensors
from lab.core.schemas import BANDS, Band
from lab.models.bands import WEIGHT_EXACT, weight_token
from lab.models.hparams import Hparams, HparamsError, model_hparams

# gpt-oss adds biases on q/k/v/o and the experts, and one sink logit per head and query: c (E + h) operations
# next to matmuls of c E^2, below what the model resolves, so they are left out
KNOWN_ARCHS = ("qwen35moe", "qwen3moe", "gemma3", "gpt-oss")
SOFTMAX_FLOPS = 4  # per score: scale, running max, exp, sum
NORM_FLOPS = 4  # per element of an RMS norm: square, sum, scale, weight
F16, F32 = 2, 4


class UnknownArchitecture(HparamsError):
    pass


@dataclass(frozen=True)
class Term:
    name: str
    band: Band
    kind: str  # the layer kind it belongs to, or "model" for once-per-chunk terms
    layers: int
    flops: float  # per chunk, summed over `layers`
    bytes: float
    formula: str


@dataclass(frozen=True)
class BandCost:
    flops: float  # per chunk
    bytes: float

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (arithmetic intensity)."""
        return self.flops / self.bytes if self.bytes else float("inf")


def attended_keys(L: int, chunk: int, window: int | None = None) -> int:
    """Keys read by the chunk's queries in one layer: the query at position L + i reads L + i + 1 keys (causal
    within the chunk), at most `window` in a sliding-window layer."""
    if window is None:
        return chunk * L + chunk * (chunk + 1) // 2
    return sum(min(L + i + 1, window) for i in range(chunk))


# a term per layer: name, band, layer kind, layers, FLOPs, bytes, formula (lab.measure.costmodel.Term sums them)
TermRow = tuple[str, Band, str, int, float, float, str]


@dataclass(frozen=True)
class CostModel:
    h: Hparams
    chunk: int
    band_bits: dict[Band, float] | None = None  # bits per weight of each band's matrices, from the tensor types

    def terms(self, L: int) -> list[Term]:
        """Every term of a chunk at depth L (per chunk, summed over the layers it applies to)."""
        rows = [*self.attention_rows(L), *self.recurrent_rows(), *self.ffn_rows(), *self.model_rows()]
        return [
            Term(name, band, kind, n, flops * n, nbytes * n, f) for name, band, kind, n, flops, nbytes, f in rows if n
        ]

    def wb(self, band: Band) -> float:
        """Bytes per weight of a band's matrices."""
        return (self.band_bits or {}).get(band, self.h.weight_bits) / 8

    def attention_rows(self, L: int) -> list[TermRow]:
        """Full-attention and window layers: projections, norm, and the attention over the keys each reaches."""
        h, c, E = self.h, self.chunk, self.h.n_embd
        q_out = h.n_head * h.head_k * (2 if h.gated_q else 1)
        proj = E * (q_out + h.n_head_kv * h.head_k + h.n_head_kv * h.head_v) + h.n_head * h.head_v * E
        per_score = 2 * h.n_head * (h.head_k + h.head_v) + SOFTMAX_FLOPS * h.n_head
        kv_row = h.n_head_kv * (h.head_k + h.head_v) * F16
        qkvo = "Q" + (" + gate" if h.gated_q else "") + ", K, V, O projections"
        rows: list[TermRow] = []
        for kind in ("attention", "sliding"):
            n = h.count(kind)
            keys = attended_keys(L, c, h.window if kind == "sliding" else None)
            proj_formula = "2 c E (h dq g + h_kv dk + h_kv dv) + 2 c h dv E"
            rows += [
                (qkvo, "proj", kind, n, 2 * c * proj, proj * self.wb("proj"), proj_formula),
                ("attention RMS norm", "proj", kind, n, NORM_FLOPS * c * E, E * F32, "4 c E"),
                (
                    "QK^T, softmax, AV",
                    "attn_core",
                    kind,
                    n,
                    per_score * keys,
                    keys * kv_row,
                    f"(2 h (dk + dv) + 4 h) keys, keys = {keys:,}",
                ),
            ]
        return rows

    def recurrent_rows(self) -> list[TermRow]:
        """Gated DeltaNet layers: projections, the causal convolution, the delta-rule state update, norm."""
        h, c, E = self.h, self.chunk, self.h.n_embd
        n, inner, conv_dim = h.count("recurrent"), h.ssm_d_inner, h.conv_dim
        in_proj = E * (conv_dim + inner + 2 * h.ssm_dt_rank) + inner * E
        state = h.ssm_d_state * inner  # value heads x dk x dv
        conv_state = max(h.ssm_d_conv - 1, 0) * conv_dim
        return [
            (
                "QKV, gate, beta, alpha, output projections",
                "gdn",
                "recurrent",
                n,
                2 * c * in_proj,
                in_proj * self.wb("gdn"),
                "2 c E (conv_dim + d_inner + 2 n_v) + 2 c d_inner E",
            ),
            (
                "causal convolution",
                "gdn",
                "recurrent",
                n,
                2 * c * conv_dim * h.ssm_d_conv,
                conv_dim * h.ssm_d_conv * F32,
                "2 c conv_dim d_conv",
            ),
            (
                "delta-rule state update",
                "gdn",
                "recurrent",
                n,
                7 * c * state,
                2 * (state + conv_state) * F32,
                "7 c n_v dk dv",
            ),
            ("attention RMS norm", "gdn", "recurrent", n, NORM_FLOPS * c * E, E * F32, "4 c E"),
        ]

    def ffn_rows(self) -> list[TermRow]:
        """Every layer's FFN: the router and the experts the chunk touches (MoE), or the dense FFN; its norm."""
        h, c, E, n, wb = self.h, self.chunk, self.h.n_embd, self.h.n_layer, self.wb("ffn_moe")
        norm: TermRow = ("post-attention RMS norm", "ffn_moe", "all", n, NORM_FLOPS * c * E, E * F32, "4 c E")
        if not h.n_expert:
            dense = 3 * E * h.n_ff
            return [
                ("dense FFN (gate, up, down)", "ffn_moe", "all", n, 2 * c * dense, dense * wb, "2 c 3 E n_ff"),
                norm,
            ]
        touched = h.n_expert * (1 - (1 - h.n_expert_used / h.n_expert) ** c)  # experts the chunk reads
        routed = 3 * E * h.n_ff_exp
        rows: list[TermRow] = [
            ("router", "ffn_moe", "all", n, 2 * c * E * h.n_expert, E * h.n_expert * F32, "2 c E n_expert"),
            (
                "routed experts (gate, up, down)",
                "ffn_moe",
                "all",
                n,
                2 * c * h.n_expert_used * routed,
                touched * routed * wb,
                "2 c used 3 E n_ff_exp",
            ),
        ]
        if h.n_ff_shexp:
            shared = 3 * E * h.n_ff_shexp
            rows.append(
                (
                    "shared expert and its gate",
                    "ffn_moe",
                    "all",
                    n,
                    2 * c * (shared + E),
                    shared * wb + E * F32,
                    "2 c (3 E n_ff_shexp + E)",
                )
            )
        return [*rows, norm]

    def model_rows(self) -> list[TermRow]:
        """Once per layer or per model: residual adds, the LM head of the last token, the embedding rows."""
        h, c, E, wb = self.h, self.chunk, self.h.n_embd, self.wb("other")
        return [
            ("residual adds", "other", "all", h.n_layer, 2 * c * E, 0, "2 c E"),
            ("LM head (last token)", "other", "model", 1, 2 * E * h.n_vocab, E * h.n_vocab * wb, "2 E n_vocab"),
            ("embedding rows", "other", "model", 1, 0, c * E * wb, "c E (read)"),
        ]

    def bands(self, L: int) -> dict[Band, BandCost]:
        totals = {b: [0.0, 0.0] for b in BANDS}
        for t in self.terms(L):
            totals[t.band][0] += t.flops
            totals[t.band][1] += t.bytes
        return {b: BandCost(f, n) for b, (f, n) in totals.items()}

    def attn_vs_ffn(self, L: float) -> float:
        """attn_core FLOPs - ffn_moe FLOPs of a chunk at depth L (L may be fractional: linear in between)."""
        lo = int(L)
        frac = L - lo
        a0, a1 = (self.bands(d) for d in (lo, lo + 1))
        attn = a0["attn_core"].flops * (1 - frac) + a1["attn_core"].flops * frac
        return attn - a0["ffn_moe"].flops

    def crossover(self, limit: int = 1 << 24) -> float | None:
        """The depth at which attn_core does as many FLOPs as ffn_moe (None when it never does up to `limit`,
        e.g. when every attention layer has a window)."""
        if self.attn_vs_ffn(0) >= 0:
            return 0.0
        if self.attn_vs_ffn(limit) < 0:
            return None
        lo, hi = 0, limit
        while hi - lo > 1:  # attn_core FLOPs grow with L, ffn_moe's do not
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.attn_vs_ffn(mid) < 0 else (lo, mid)
        d0, d1 = self.attn_vs_ffn(lo), self.attn_vs_ffn(hi)
        return lo + (-d0) / (d1 - d0)

    def attn_flops_per_token_per_1k(self, L: int = 0) -> float:
        """How many FLOPs per token attn_core adds per 1,000 more tokens of depth (at depth L)."""
        return (self.bands(L + 1000)["attn_core"].flops - self.bands(L)["attn_core"].flops) / self.chunk


def band_label(band: Band, h: Hparams) -> str:
    """A band named for what it holds on this model: `ffn_moe` is a dense FFN on a model without experts."""
    return "ffn (dense)" if band == "ffn_moe" and not h.n_expert else band


def cost_model(h: Hparams, chunk: int) -> CostModel:
    if h.arch not in KNOWN_ARCHS:
        raise UnknownArchitecture(
            f"the cost model does not know the architecture {h.arch!r} (it knows {', '.join(KNOWN_ARCHS)})"
        )
    return CostModel(h, chunk)


def model_cost(path: Path, chunk: int) -> CostModel:
    """The cost model of a GGUF: its keys, and its tensor types where it holds tensors (a quantized file mixes
    types: a Q4_K_M file keeps matrices whose width is no multiple of 256 in Q5_0, some in Q6_K or Q8_0)."""
    m = cost_model(model_hparams(path), chunk)
    bits = band_weight_bits(read_gguf_tensors(path))
    return CostModel(m.h, chunk, bits) if bits else m


# ggml type id -> bits per weight (block bytes x 8 / block size)
GGML_BITS: dict[int, float] = {
    0: 32,
    1: 16,
    2: 4.5,
    3: 5,
    6: 5.5,
    7: 6,
    8: 8.5,
    9: 9,
    10: 2.625,
    11: 3.4375,
    12: 4.5,
    13: 5.5,
    14: 6.5625,
    15: 9.125,
    16: 2.0625,
    17: 2.3125,
    18: 3.0625,
    19: 1.5625,
    20: 4.5,
    21: 3.4375,
    22: 2.5625,
    23: 4.25,
    24: 8,
    25: 16,
    26: 32,
    27: 64,
    28: 64,
    29: 1.75,
    30: 16,
    34: 1.6875,
    35: 2.0625,
}
ROUTERS = ("ffn_gate_inp", "ffn_gate_inp_shexp")  # counted at f32 on their own


def band_weight_bits(tensors: list[TensorInfo]) -> dict[Band, float]:
    """Each band's bits per weight: its matrices' bits averaged over their elements (a tensor of an unknown
    type is left out); `other` holds the output matrix (the token embedding when the two are tied)."""
    names = {t.name for t in tensors}
    head = "output.weight" if "output.weight" in names else "token_embd.weight"
    totals: dict[Band, list[float]] = {}
    for t in tensors:
        if len(t.dims) < 2 or t.ggml_type not in GGML_BITS:
            continue
        wt = weight_token(t.name)
        band: Band | None = "other" if t.name == head else None
        if wt is not None and wt[1] not in ROUTERS:
            band = WEIGHT_EXACT.get(wt[1])
        if band is not None:
            acc = totals.setdefault(band, [0.0, 0.0])
            acc[0] += t.elements * GGML_BITS[t.ggml_type]
            acc[1] += t.elements
    return {b: bits / n for b, (bits, n) in totals.items() if n}


def cost_record(m: CostModel, depths: list[int]) -> dict[str, Any]:
    """What `lab model cost --json` prints: the terms at the first depth, the bands at every depth, the
    predicted crossover and the attention slope."""
    h = m.h
    return {
        "arch": h.arch,
        "chunk": m.chunk,
        "file_type": h.file_type,
        "weight_bits": h.weight_bits,
        "band_weight_bits": m.band_bits or {},
        "layers": {k: h.count(k) for k in ("attention", "sliding", "recurrent") if h.count(k)},
        "terms": [
            {
                "name": t.name,
                "band": t.band,
                "kind": t.kind,
                "layers": t.layers,
                "flops": t.flops,
                "bytes": t.bytes,
                "formula": t.formula,
            }
            for t in m.terms(depths[0])
        ],
        "bands": {
            str(d): {
                b: {
                    "flops_per_token": c.flops / m.chunk,
                    "bytes_per_token": c.bytes / m.chunk,
                    "intensity": c.intensity,
                }
                for b, c in m.bands(d).items()
            }
            for d in depths
        },
        "predicted_crossover_depth": m.crossover(),
        "attn_flops_per_token_per_1k": m.attn_flops_per_token_per_1k(),
    }
