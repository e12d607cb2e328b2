"""The profile's rows: walls, bands per depth and per process, predicted bands, and the run's summary."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from lab.core.schemas.base import Interval, Verdict


class ProfileWall(BaseModel):
    """raw/profile_walls.jsonl: llama_decode wall of one chunk at `depth`: one rep of one mode in one process."""

    mode: Literal["fused", "timed"]
    fill: Literal["fake", "real"] = Field(
        default="real",
        description="how the chunk reached its depth: a fake prefix or a real fill (the cumulative pass, the only "
        "way profiles written without this field had)",
    )
    check: bool = Field(default=False, description="a rep of the fake-vs-real check (not of the profile)")
    process: int = Field(default=0, description="the run's instrument process")
    rep: int = Field(default=0, description="the rep within the process (fill real: the cumulative pass)")
    visit: int = Field(
        default=0, description="the depth's place in its rep's order (each rep visits the depths in its own)"
    )
    depth: int
    ms: float


class BandDepth(BaseModel):
    """raw/profile_bands.jsonl: one band at one depth (medians over processes)."""

    depth: int
    band: str
    timed_ms: float = Field(description="the band's TIMED per-node sum for the chunk")
    share: float = Field(description="band / all bands, TIMED")
    fused_chunk_ms: float = Field(description="FUSED llama_decode wall of the chunk")
    ms_per_token: float = Field(description="share x fused_chunk_ms / chunk")
    ms_per_token_lo: float | None = Field(default=None, description="its 95% interval (bootstrap over processes)")
    ms_per_token_hi: float | None = None
    flops_per_token: float | None = Field(default=None, description="predicted from the GGUF (lab.measure.costmodel)")
    bytes_per_token: float | None = Field(default=None, description="predicted bytes moved per token")
    intensity: float | None = Field(default=None, description="predicted FLOPs per byte moved")
    gflops: float | None = Field(default=None, description="achieved: predicted FLOPs / measured ms")
    gflops_lo: float | None = Field(default=None, description="its 95% interval (from the ms interval)")
    gflops_hi: float | None = None
    peak_share: float | None = Field(default=None, description="gflops / this host's GEMM GFLOP/s (probed)")


class BandProcess(BaseModel):
    """raw/profile_band_processes.jsonl: one band at one depth in one process, the medians over its reps (the
    samples behind BandDepth: the intervals resample processes)."""

    process: int
    depth: int
    band: str
    timed_ms: float = Field(description="the band's TIMED per-node sum for the chunk (median over reps)")
    ms_per_token: float = Field(description="the band's TIMED share x the FUSED chunk ms / chunk (medians over reps)")


class BandAt(BaseModel):
    """raw/profile_predicted.jsonl: a band's predicted ms/token at a depth, from a profile's own rates
    (lab.measure.timemodel); also what `lab model cost --rates` prints."""

    depth: int
    band: str = Field(description="a band, or total (all bands)")
    ms_per_token: Interval


class AttnKind(BaseModel):
    """attn_core of one kind of attention layer (a sliding-window model's full-attention or window layers):
    its share of the band's TIMED nodes x FUSED chunk ms / chunk, per depth, and its slope in depth."""

    kind: Literal["full", "window"]
    layers: int = Field(description="layers of this kind")
    window: int | None = Field(default=None, description="keys a window layer's query reads (n_swa)")
    ms_per_token: dict[str, Interval] = Field(default_factory=dict, description="per depth, over processes")
    fit_from: int = Field(default=0, description="the slope's first depth (a window layer's: the window)")
    slope_ci: Interval | None = Field(default=None, description="ms/token per 1k depth from fit_from on")


class ProfileSummary(BaseModel):
    """raw/profile_summary.json: the derived results of a profile run."""

    max_depth: int
    crossover_depth: float | None = Field(
        default=None, description="attn_core overtakes ffn_moe (interpolated); None: not reached by max_depth"
    )
    crossover_note: str = Field(description="the crossover as printed, or 'not reached by depth D'")
    attn_slope_ms_per_token_per_1k: float
    attn_intercept_ms_per_token: float
    attn_r2: float
    flat_cv: dict[str, float]
    timed_vs_fused_gap: dict[str, float] = Field(description="per depth: TIMED node sum / FUSED wall - 1")
    timed_vs_fused_gap_mean: float
    dump_json_bytes: int | None = None
    dump_parquet_bytes: int | None = None
    fused_vs_bench: dict[str, float] = Field(
        default_factory=dict, description="per depth: FUSED chunk ms / llama-bench -p chunk -d depth ms"
    )
    fill: Literal["fake", "real"] = Field(default="fake", description="how the probes reached their depths")
    reps: int = Field(default=0, description="reps of each mode per depth in each process")
    processes: int = Field(default=1, description="instrument processes: the intervals' units")
    depths: list[int] = Field(default_factory=list, description="the probe depths")
    bench_depths: list[int] = Field(
        default_factory=list, description="the depths llama-bench and the fake-vs-real check ran at (a real fill's)"
    )
    crossover_ci: Interval | None = Field(default=None, description="the crossover depth's 95% interval")
    attn_slope_ci: Interval | None = Field(default=None, description="ms/token per 1k depth (bootstrap over processes)")
    attn_r2_ci: Interval | None = None
    band_slope_ci: dict[str, Interval] = Field(
        default_factory=dict, description="per band: ms/token per 1k depth, a linear fit over the depths"
    )
    band_r2_ci: dict[str, Interval] = Field(default_factory=dict, description="per band: that fit's R^2")
    timed_vs_fused_gap_ci: dict[str, Interval] = Field(
        default_factory=dict,
        description="per depth: TIMED node sum / FUSED wall (a ratio), paired by rep, its interval over processes",
    )
    fused_vs_bench_ci: dict[str, Interval] = Field(
        default_factory=dict,
        description="per depth: FUSED / llama-bench paired by process pair (each instrument process with the "
        "llama-bench process after it), its interval over those pairs",
    )
    timed_vs_fused_all: Interval | None = Field(
        default=None, description="TIMED / FUSED over all depths: per process the geometric mean of its depths'"
    )
    timed_vs_fused_all_verdict: Verdict | None = None
    fused_vs_bench_all: Interval | None = Field(
        default=None,
        description="FUSED / llama-bench over their depths: per process pair the geometric mean of its depths'",
    )
    fused_vs_bench_all_verdict: Verdict | None = None
    fused_vs_bench_verdict: dict[str, Verdict] = Field(
        default_factory=dict, description="per depth, at bench_tolerance"
    )
    timed_vs_fused_verdict: dict[str, Verdict] = Field(
        default_factory=dict, description="per depth, at timed_tolerance"
    )
    bench_tolerance: float | None = Field(default=None, description="FUSED / llama-bench agrees inside 1 +- this")
    timed_tolerance: float | None = Field(default=None, description="TIMED / FUSED agrees inside 1 +- this")
    real_tolerance: float | None = Field(default=None, description="fake / real depth agrees inside 1 +- this")
    fake_vs_real: dict[str, dict[str, Interval]] = Field(
        default_factory=dict,
        description="per depth: the chunk after a fake prefix / after a restored real fill, paired by rep: FUSED "
        "wall (total) and each band's TIMED ms",
    )
    fake_vs_real_verdict: dict[str, dict[str, Verdict]] = Field(
        default_factory=dict, description="per depth: total and each band holding >= 5% of the time, at real_tolerance"
    )
    fake_vs_real_all: dict[str, Interval] = Field(
        default_factory=dict,
        description="total and each band over all checked depths: per process the geometric mean of its depths'",
    )
    fake_vs_real_all_verdict: dict[str, Verdict] = Field(
        default_factory=dict, description="the total and each band holding >= 5% of the time, at real_tolerance"
    )
    layout: str = Field(
        default="",
        description="with the real check: whether a chunk after a fake prefix sees what it sees after the restored "
        "real fill (n_kv, cells, mask tiles; lab.instrument.layout), at the checked depths",
    )
    cost_model: str = Field(default="", description="what the predictions come from, or why there are none")
    predicted_crossover_depth: float | None = Field(default=None, description="attn_core FLOPs = ffn_moe FLOPs")
    crossover_vs_predicted_ci: Interval | None = Field(default=None, description="measured / predicted crossover")
    attn_flops_per_token_per_1k: float | None = Field(default=None, description="predicted FLOP slope of attn_core")
    predicted_attn_slope_ms_per_token_per_1k: float | None = Field(
        default=None, description="the FLOP slope at the rate ffn_moe achieves (median over depths)"
    )
    attn_slope_vs_predicted_ci: Interval | None = Field(default=None, description="measured / predicted slope")
    peak_gemm_gflops_ci: Interval | None = Field(
        default=None, description="this host's GEMM GFLOP/s (lab.measure.peaks)"
    )
    peak_copy_gbps_ci: Interval | None = Field(default=None, description="this host's memcpy GB/s (lab.measure.peaks)")
    peak_gemm_shape: list[int] = Field(default_factory=list, description="(m, k, n) of the probed GEMM")
    time_crossover_ci: Interval | None = Field(
        default=None, description="predicted in time: attn_core ms/token = ffn_moe's, from this profile's rates"
    )
    time_crossover_note: str = Field(default="", description="why there is none, or how many resamples lack one")
    band_gflops_ci: dict[str, Interval] = Field(
        default_factory=dict, description="per band: GFLOP/s its counted FLOPs run at (lab.measure.timemodel)"
    )
    attn_overhead_ms_ci: Interval | None = Field(
        default=None, description="attn_core's per-token time that does not grow with depth (lab.measure.timemodel)"
    )
    attn_kinds: list[AttnKind] = Field(
        default_factory=list, description="attn_core split by layer kind (sliding-window models only)"
    )
