"""One schema per table, shared by every writer (experiments) and reader (catalog, reports, compare).

Units are in the field names. `L` counts prior KV cells (tokens) the new tokens attend over, not positions:
for text the two are equal; an image's tokens outnumber its positions.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ArmName = Literal["baseline", "fake", "genuine", "plain"]
Where = Literal["server", "inproc"]  # through llama-server's HTTP API, or in one process with libllama (lab/inproc)
Verdict = Literal["agree", "disagree", "undecided"]


class Interval(BaseModel):
    """A point estimate with its 95% interval (lab.stats), and how many samples (or pairs) it rests on."""

    value: float
    lo: float
    hi: float
    n: int = Field(ge=1)

    @property
    def half_width(self) -> float:
        """Half the interval's width, relative to the estimate (0.03: +-3%)."""
        return (self.hi - self.lo) / 2 / abs(self.value) if self.value else float("inf")

    def fmt(self, pct: bool = False, digits: int = 3) -> str:
        """`1.012 [0.998, 1.027]`, or with pct=True, as a change: `+1.2% [-0.2%, +2.7%]`."""
        if pct:
            return f"{self.value - 1:+.1%} [{self.lo - 1:+.1%}, {self.hi - 1:+.1%}]"
        return f"{self.value:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


# Where prefill time goes, per profiled graph node (lab.experiments.bands sorts nodes into these):
Band = Literal["ffn_moe", "attn_core", "proj", "gdn", "other"]
BANDS: tuple[Band, ...] = ("ffn_moe", "attn_core", "proj", "gdn", "other")

KV_PAD = 256  # llama_kv_cache::get_n_kv pads the attended columns to a multiple of max(n_pad, 256)


def ggml_pad(n: int, to: int = KV_PAD) -> int:
    return (n + to - 1) // to * to


class SweepSample(BaseModel):
    """raw/samples.jsonl: one timed step of one arm. Through the server (`where` server) prompt_ms is the
    request's prompt time from the server's timings; in one process (`where` inproc, lab/inproc/arms.cpp) it is
    the llama_decode of the new tokens (baseline: L + new), and prep_ms/copy_ms/blob_bytes say how the prefix
    got there."""

    where: Where = "server"
    point: str
    L: int
    new: int
    arm: ArmName
    rep: int
    ok: bool
    reason: str = ""
    prompt_ms: float | None = None
    prompt_n: int | None = None
    cache_n: int | None = None
    fake_ms: float | None = None
    image: str | None = Field(default=None, description="screenshot size WxH in the new part; None: text only")
    image_tokens: int | None = Field(default=None, description="prompt tokens the image adds (incl. 2 markers)")
    image_positions: int | None = Field(default=None, description="positions the image advances (M-RoPE)")
    encode_ms: float | None = Field(default=None, description="vision encoder time (server log, whole ms)")
    image_decode_ms: float | None = Field(default=None, description="LM prefill of the image tokens (server log)")
    warm: Literal["restore", "prefill"] | None = Field(
        default=None, description="genuine, plain: the prefix restored from the slot's saved state, or prefilled"
    )
    prep_ms: float | None = Field(default=None, description="inproc: fabricating the prefix (fake), the restore")
    copy_ms: float | None = Field(default=None, description="inproc genuine: a plain memcpy of blob_bytes")
    blob_bytes: int | None = Field(default=None, description="inproc genuine: the depth-L state blob (flags 0)")
    pos_max: int | None = Field(default=None, description="inproc: the sequence's max position before the step")
    t_utc: str = ""


class PrefillTps(BaseModel):
    """raw/prefill_tps.jsonl: prefill throughput of a `chunk`-token chunk at `depth`, measured separately. In a
    sweep a row with a `rep` is an estimate sample taken interleaved with the arms of its point, so machine drift
    hits both alike: the in-process driver's chunk at depth L after restoring a really decoded state (`tool`
    lab-inproc-arms; runs before it used one `llama-bench -d` call per sample). A row without a `rep` is the
    independent cross-check, llama-bench -p chunk -d depth on the same build, model and threads."""

    point: str | None = None
    rep: int | None = None
    depth: int
    chunk: int
    tps: float
    avg_ms: float
    stddev_ms: float
    reps: int
    tool: str = "llama-bench"
    samples_ms: list[float] = Field(default_factory=list, description="llama-bench: each rep's chunk ms")


class ArmStats(BaseModel):
    median_ms: float | None = None
    median_lo_ms: float | None = Field(default=None, description="the median's 95% interval, low end")
    median_hi_ms: float | None = Field(default=None, description="the median's 95% interval, high end")
    min_ms: float | None = None
    max_ms: float | None = None
    n_ok: int = 0
    n_failed: int = 0


class SweepPoint(BaseModel):
    """raw/points.jsonl: one (L, new) point measured in one place, written when all its samples are in."""

    where: Where = "server"
    point: str
    L: int
    new: int
    n_kv_padded: int = Field(description="GGML_PAD(L + new, 256): attended KV columns")
    measurable: bool = Field(description="False below the 256-column floor, where L changes nothing")
    baseline: ArmStats
    fake: ArmStats
    genuine: ArmStats
    plain: ArmStats = Field(default_factory=ArmStats, description="the genuine hit prefilling its prefix per rep")
    baseline_fill: ArmStats = Field(
        default_factory=ArmStats, description="in-process: time to reach L + new from empty, from the fill passes"
    )
    prefill_tps: float | None = None
    opt_prefill_ms: float | None = Field(default=None, description="only_new / prefill_tps(L)")
    estimate_ci: Interval | None = Field(default=None, description="the estimate's samples (ms): their median")
    fake_vs_estimate: float | None = Field(default=None, description="median over reps of fake / estimate - 1")
    fake_vs_genuine: float | None = Field(default=None, description="median over reps of fake / genuine - 1")
    fake_vs_baseline: float | None = Field(default=None, description="median over reps of fake / baseline")
    fake_vs_estimate_ci: Interval | None = Field(default=None, description="fake / estimate, paired by rep")
    fake_vs_genuine_ci: Interval | None = Field(default=None, description="fake / genuine, paired by rep")
    fake_vs_baseline_ci: Interval | None = Field(default=None, description="fake / baseline, paired by rep")
    genuine_verdict: Verdict = Field(default="undecided", description="fake / genuine within 1 +- tolerance?")
    estimate_verdict: Verdict = Field(default="undecided", description="fake / estimate within 1 +- tolerance?")
    reps: int = Field(default=0, description="interleaved reps measured at this point")
    reps_to_decide: int | None = Field(default=None, description="undecided: about how many reps would decide")
    diagnostics: list[str] = Field(default_factory=list)
    image: str | None = Field(default=None, description="screenshot size WxH; None: a text-only step")
    image_tokens: int | None = Field(default=None, description="prompt tokens of the image (nx*ny + 2 markers)")
    image_positions: int | None = Field(default=None, description="positions it advances: L counts cells, not these")
    encode_ms: float | None = Field(default=None, description="median vision encode ms of the fake arm")
    lm_ms: float | None = Field(default=None, description="median fake prompt_ms - encode_ms: the LM part")
    encode_ci: Interval | None = Field(default=None, description="the fake arm's vision encode ms")
    lm_ci: Interval | None = Field(default=None, description="the fake arm's LM part (prompt_ms - encode_ms)")
    genuine_vs_plain_ci: Interval | None = Field(
        default=None, description="genuine (restored) / plain genuine, paired by rep: the restore's proof"
    )
    plain_verdict: Verdict = Field(default="undecided", description="genuine / plain within 1 +- tolerance?")
    bench_check_ci: Interval | None = Field(
        default=None, description="llama-bench's chunk ms at depth L (mean, 95% interval from its reps)"
    )
    genuine_warm: str = Field(default="", description="how the genuine arm's prefix got into the slot")
    baseline_source: str = Field(default="", description="direct reps, or the fill passes' prefix sums")
    rep_s: Interval | None = Field(default=None, description="wall seconds of one rep past the direct baseline's")
    # in one process: what having the prefix cost (the cache read a server would do, against memcpy)
    fake_prep_ci: Interval | None = Field(default=None, description="inproc: ms to fabricate the prefix")
    restore_prep_ci: Interval | None = Field(default=None, description="inproc: ms of set_data_ext, the cache read")
    memcpy_ci: Interval | None = Field(default=None, description="inproc: ms of a plain memcpy of the blob's bytes")
    blob_bytes: int | None = None
    predicted_blob_bytes: int | None = Field(default=None, description="from the GGUF (lab.engine.memshape)")
    restore_gbps_ci: Interval | None = Field(default=None, description="blob bytes / restore ms, GB/s")
    memcpy_gbps_ci: Interval | None = Field(default=None, description="blob bytes / memcpy ms, GB/s")
    restore_vs_memcpy_ci: Interval | None = Field(default=None, description="memcpy ms / restore ms, paired")
    restore_step_vs_genuine_ci: Interval | None = Field(
        default=None, description="(restore + decode) / genuine decode: the no-patch fallback's step"
    )
    cache_read_share_ci: Interval | None = Field(default=None, description="restore ms / (restore + decode) ms")
    vs_inproc: dict[str, Interval] = Field(
        default_factory=dict, description="server points of a both-places sweep: server / in-process per arm"
    )


class InprocFill(BaseModel):
    """raw/inproc_fills.jsonl: one cumulative fill pass, row by row. A `fill` row is the segment decoded from
    `start` up to depth L (its prefix sum over a pass is the time to reach L from empty) and the state blob kept
    there; a `chunk` row is `new` tokens decoded at depth L right after restoring that state (what
    `llama-bench -p new -d L` times: only_new / prefill_tps(L))."""

    kind: Literal["fill", "chunk"]
    fill_pass: int
    L: int
    start: int | None = Field(default=None, description="fill: where the segment began")
    new: int | None = Field(default=None, description="chunk: its tokens")
    ms: float
    ok: bool = True
    reason: str = ""
    capture_ms: float | None = Field(default=None, description="fill: keeping the depth-L state (get_data_ext)")
    blob_bytes: int | None = Field(default=None, description="fill: the depth-L state blob (flags 0)")


class ArmsSummary(BaseModel):
    """raw/arms_summary.json: the restore cost explained over the grid: the blob's size against L (a least-
    squares line, and the GGUF's prediction), and the restore's bandwidth against memcpy, pooled over points."""

    bytes_per_cell: float | None = Field(default=None, description="slope of blob bytes vs L (measured)")
    fixed_bytes: float | None = Field(default=None, description="intercept: the depth-independent state")
    predicted_bytes_per_cell: int | None = Field(default=None, description="K + V rows x attention layers + meta")
    predicted_fixed_bytes: int | None = Field(default=None, description="recurrent layers x (conv + state)")
    attention_layers: int | None = None
    recurrent_layers: int | None = None
    restore_ms_per_1k_cells: float | None = Field(default=None, description="slope of median restore ms vs L")
    restore_gbps_ci: Interval | None = Field(default=None, description="all restore samples, GB/s")
    memcpy_gbps_ci: Interval | None = None
    restore_vs_memcpy_ci: Interval | None = Field(default=None, description="memcpy ms / restore ms, paired")
    fake_vs_genuine_ci: Interval | None = Field(default=None, description="median over every point's reps")
    restore_step_vs_genuine_ci: Interval | None = Field(default=None, description="median over every point's reps")
    genuine_vs_plain_ci: Interval | None = Field(default=None, description="restored / plain genuine, every rep")
    fill_passes: int = Field(default=0, description="cumulative fill passes measured")
    fill_s: float = Field(default=0.0, description="their wall seconds, summed")
    rep_s_ci: Interval | None = Field(default=None, description="seconds per rep, median over the points")


class TraceStep(BaseModel):
    """One recorded agent step (a line of a trace JSONL). Give the prior depth either as `L` or as
    `depth` + `only_new` (then L = depth - only_new)."""

    task_id: str
    step: int = Field(ge=0)
    L: int | None = Field(default=None, ge=0, description="prior KV cells (tokens) treated as cached")
    depth: int | None = Field(default=None, ge=1, description="context length after this step's new tokens")
    only_new: int | None = Field(default=None, ge=1, description="tokens this step appends")
    new_text: str = Field(min_length=1)
    screenshot: str | None = Field(default=None, description="path of the step's new screenshot (PNG)")
    baseline_prefill_s: float | None = Field(default=None, ge=0)
    baseline_decode_s: float | None = Field(default=None, ge=0)
    baseline_exec_s: float | None = Field(default=None, ge=0)

    def prior_depth(self) -> int:
        if self.L is not None and self.depth is None:
            return self.L
        if self.L is None and self.depth is not None and self.only_new is not None:
            if self.only_new > self.depth:
                raise ValueError(f"only_new ({self.only_new}) > depth ({self.depth})")
            return self.depth - self.only_new
        raise ValueError("give either L, or depth and only_new")


class TraceStepResult(BaseModel):
    """raw/steps.jsonl: one replayed step."""

    task_id: str
    step: int
    L: int
    new_tokens: int
    trace_only_new: int | None = None
    ok: bool
    reason: str = ""
    measured_opt_prefill_s: float | None = Field(
        default=None, description="prompt_ms / 1e3 of the fake request (the median when measured several times)"
    )
    measured_ci: Interval | None = Field(default=None, description="its 95% interval (seconds), from two reps on")
    reps: int = Field(default=1, description="times the step was measured")
    fake_ms: float | None = None
    cache_n: int | None = None
    prompt_n: int | None = None
    baseline_prefill_s: float | None = None
    baseline_decode_s: float | None = None
    baseline_exec_s: float | None = None
    screenshot: str | None = None
    image_tokens: int | None = Field(default=None, description="prompt tokens of the screenshot (incl. markers)")
    encode_ms: float | None = Field(default=None, description="vision encode ms (server log); inside prompt_ms")
    t_utc: str


class TraceTaskResult(BaseModel):
    """raw/tasks.jsonl: per task, opt_wall = measured_opt_prefill + baseline_decode + baseline_exec."""

    task_id: str
    n_steps: int
    n_failed: int
    measured_opt_prefill_s: float
    baseline_prefill_s: float | None = None
    baseline_decode_s: float | None = None
    baseline_exec_s: float | None = None
    opt_wall_s: float | None = None
    baseline_wall_s: float | None = None


class ProfileWall(BaseModel):
    """raw/profile_walls.jsonl: llama_decode wall of one chunk at `depth` in one pass of one cycle."""

    mode: Literal["fused", "timed"]
    cycle: int
    depth: int
    ms: float


class BandDepth(BaseModel):
    """raw/profile_bands.jsonl: one band at one depth (medians over cycles)."""

    depth: int
    band: str
    timed_ms: float = Field(description="the band's TIMED per-node sum for the chunk")
    share: float = Field(description="band / all bands, TIMED")
    fused_chunk_ms: float = Field(description="FUSED llama_decode wall of the chunk")
    ms_per_token: float = Field(description="share x fused_chunk_ms / chunk")
    ms_per_token_lo: float | None = Field(default=None, description="its 95% interval (bootstrap over cycles)")
    ms_per_token_hi: float | None = None
    flops_per_token: float | None = Field(default=None, description="predicted from the GGUF (lab.costmodel)")
    bytes_per_token: float | None = Field(default=None, description="predicted bytes moved per token")
    intensity: float | None = Field(default=None, description="predicted FLOPs per byte moved")
    gflops: float | None = Field(default=None, description="achieved: predicted FLOPs / measured ms")
    gflops_lo: float | None = Field(default=None, description="its 95% interval (from the ms interval)")
    gflops_hi: float | None = None
    peak_share: float | None = Field(default=None, description="gflops / this host's GEMM GFLOP/s (probed)")


class BandCycle(BaseModel):
    """raw/profile_band_cycles.jsonl: one band at one depth in one cycle (the samples behind BandDepth)."""

    cycle: int
    depth: int
    band: str
    timed_ms: float = Field(description="the band's TIMED per-node sum for the chunk, this cycle")
    ms_per_token: float = Field(description="this cycle's TIMED share x its FUSED chunk ms / chunk")


class BandAt(BaseModel):
    """raw/profile_predicted.jsonl: a band's predicted ms/token at a depth, from a profile's own rates
    (lab.timemodel); also what `lab model cost --rates` prints."""

    depth: int
    band: str = Field(description="a band, or total (all bands)")
    ms_per_token: Interval


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
    cycles: int = Field(default=0, description="cycles the medians and the intervals rest on")
    crossover_ci: Interval | None = Field(default=None, description="the crossover depth's 95% interval")
    attn_slope_ci: Interval | None = Field(default=None, description="ms/token per 1k depth (bootstrap over cycles)")
    attn_r2_ci: Interval | None = None
    timed_vs_fused_gap_ci: dict[str, Interval] = Field(
        default_factory=dict, description="per depth: TIMED node sum / FUSED wall (a ratio) and its interval"
    )
    fused_vs_bench_ci: dict[str, Interval] = Field(default_factory=dict, description="per depth (over cycles)")
    cost_model: str = Field(default="", description="what the predictions come from, or why there are none")
    predicted_crossover_depth: float | None = Field(default=None, description="attn_core FLOPs = ffn_moe FLOPs")
    crossover_vs_predicted_ci: Interval | None = Field(default=None, description="measured / predicted crossover")
    attn_flops_per_token_per_1k: float | None = Field(default=None, description="predicted FLOP slope of attn_core")
    predicted_attn_slope_ms_per_token_per_1k: float | None = Field(
        default=None, description="the FLOP slope at the rate ffn_moe achieves (median over depths)"
    )
    attn_slope_vs_predicted_ci: Interval | None = Field(default=None, description="measured / predicted slope")
    peak_gemm_gflops_ci: Interval | None = Field(default=None, description="this host's GEMM GFLOP/s (lab.peaks)")
    peak_copy_gbps_ci: Interval | None = Field(default=None, description="this host's memcpy GB/s (lab.peaks)")
    peak_gemm_shape: list[int] = Field(default_factory=list, description="(m, k, n) of the probed GEMM")
    time_crossover_ci: Interval | None = Field(
        default=None, description="predicted in time: attn_core ms/token = ffn_moe's, from this profile's rates"
    )
    time_crossover_note: str = Field(default="", description="why there is none, or how many resamples lack one")
    band_gflops_ci: dict[str, Interval] = Field(
        default_factory=dict, description="per band: GFLOP/s its counted FLOPs run at (lab.timemodel)"
    )
    attn_overhead_ms_ci: Interval | None = Field(
        default=None, description="attn_core's per-token time that does not grow with depth (lab.timemodel)"
    )


# --- replay labs: exact values are kept as fraction strings ("57/2") beside their floats ---------


class ReplayExactRow(BaseModel):
    """raw/replay_exact.jsonl: full prefill vs replay of the last `keep` inputs, then one decode step."""

    kv_source: Literal["shared", "per-layer"]
    window: int
    depth: int
    length: int
    keep: int
    next_input: str
    last_full: str
    last_suffix: str
    next_full: str
    next_suffix: str
    last_full_value: float
    last_suffix_value: float
    next_full_value: float
    next_suffix_value: float
    first_diff_layer: int | None = Field(None, description="1-based layer of the first differing cache entry")
    first_diff_pos: int | None = Field(None, description="its 0-based position")
    exact: bool


class ReplaySpanRow(BaseModel):
    """raw/replay_span.jsonl: the exhaustive 0/1 check of R = W + (D-1)(W-1) at one (window, depth)."""

    window: int
    depth: int
    span: int
    cases: int
    shared_window_exact: int
    per_layer_span_exact: int
    shorter_fails: int
    counterexample: list[int]
    ok: bool


class ReplayCostRow(BaseModel):
    """raw/replay_cost.jsonl: consumer rows and visible SWA pairs of one example chunk in one mode."""

    case: str
    window: int
    keep: int
    length: int
    start: int
    end: int
    valid_start: int
    mode: Literal["off", "mask", "compact"]
    rows: int
    pairs: int
    reference_rows: int
    reference_pairs: int


class ReplayRowWork(BaseModel):
    """raw/replay_row_work.jsonl: equal-cost layer-row work, full vs compact, one prefill chunk."""

    length: int
    producer_layers: int
    consumer_layers: int
    keep: int
    full: int
    compact: int
    ratio: float
