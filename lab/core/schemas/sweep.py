"""The sweep's rows: per-rep samples, prefill_tps, points with their arms, ratios and verdicts, the in-process fill
passes, the pooled arms summary."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from lab.core.schemas.base import ArmName, ArmStats, Components, Interval, Verdict, Where


class SweepSample(BaseModel):
    """raw/samples.jsonl: one timed step of one arm. Through the server (`where` server) prompt_ms is the
    request's prompt time from the server's timings; in one process (`where` inproc, lab/inproc/driver.cpp) it is
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
    pos_min: int | None = Field(
        default=None, description="inproc: the sequence's first held position before the step (a window's start)"
    )
    pos_max: int | None = Field(default=None, description="inproc: the sequence's max position before the step")
    predicted_n: int | None = Field(default=None, description="sweep.n_out: the tokens the fake arm generated")
    predicted_ms: float | None = Field(default=None, description="sweep.n_out: first to last generated token, ms")
    decode_ms: float | None = Field(default=None, description="sweep.n_out: predicted_ms / (predicted_n - 1)")
    process: int = Field(default=0, description="the run's server or driver process that measured it (0 before)")
    t_utc: str = ""


# the batch-size reference: llama-bench's default -p and llama.cpp's default batch, the size a prefill_tps(L) is
# usually quoted at; the fill passes time a chunk of it beside each step's own (SweepPoint.batch_effect_ci)
BATCH_CHUNK = 512

# where a point's baseline in one process comes from without direct reps: the run's fill passes' prefix sums
FILL_PASSES: Literal["fill passes"] = "fill passes"


class PrefillTps(BaseModel):
    """raw/prefill_tps.jsonl: prefill throughput of a `chunk`-token chunk at `depth`, measured separately. In a
    sweep a row with a `rep` is an estimate sample taken interleaved with the arms of its point, so machine drift
    hits both alike: the in-process driver's chunk at depth L after restoring a really decoded state (`tool`
    lab-inproc-driver; runs before it used one `llama-bench -d` call per sample), beside the server's arms or, in
    one process (`where` inproc), beside the driver's own. A row without a `rep` is the independent cross-check,
    llama-bench -p chunk -d depth on the same build, model and threads."""

    where: Where = Field(default="server", description="the place whose rep the estimate sample stands beside")
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
    process: int = Field(default=0, description="an estimate sample: the run's driver process that measured it")


class PointCore(BaseModel):
    """What every place fills in a sweep point: the arms, the estimate, the ratios with their verdicts, the spread,
    decode at depth."""

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
    fill_step_ci: Interval | None = Field(
        default=None,
        description="in one process (libllama, no server): the step's new tokens after the fill pass's real depth-L "
        "prefix, the cached step of the engine alone; the interval resamples the passes' processes",
    )
    fill_speedup_ci: Interval | None = Field(
        default=None,
        description="in one process: the fill pass's re-prefill (L + new from empty) / its cached step, paired by "
        "fill pass (each pass one process)",
    )
    prefill_tps: float | None = None
    opt_prefill_ms: float | None = Field(default=None, description="only_new / prefill_tps(L)")
    estimate_ci: Interval | None = Field(default=None, description="the estimate's samples (ms): their median")
    fake_vs_estimate_ci: Interval | None = Field(default=None, description="fake / estimate, paired by rep")
    fake_vs_genuine_ci: Interval | None = Field(default=None, description="fake / genuine, paired by rep")
    fake_vs_baseline_ci: Interval | None = Field(default=None, description="fake / baseline, paired by rep")
    genuine_vs_estimate_ci: Interval | None = Field(
        default=None,
        description="genuine / estimate, paired by rep: through the server its per-request share (the same chunk "
        "from the same restored depth-L state, through llama-server and in the bare engine); in one process the "
        "same work twice. fake / estimate = fake / genuine x this",
    )
    server_share_ms_ci: Interval | None = Field(
        default=None, description="through the server its per-request share in ms: genuine - estimate, paired by rep"
    )
    batch_effect_ci: Interval | None = Field(
        default=None,
        description="ms per token of a chunk of the step's size over a BATCH_CHUNK-token chunk's at depth L, paired "
        "by fill pass: what the step's batch size does to the rate (1: nothing), which an estimate quoted "
        "at 512 tokens would miss",
    )
    genuine_verdict: Verdict = Field(default="undecided", description="fake / genuine within 1 +- tolerance?")
    estimate_verdict: Verdict | None = Field(
        default="undecided",
        description="in one process: fake / estimate within 1 +- tolerance? Through the server none: there fake / "
        "estimate is the estimate plus the server's per-request share, a measurement (server_share_ms_ci)",
    )
    reps: int = Field(default=0, description="interleaved reps measured at this point")
    processes: int = Field(default=1, description="the run's processes its reps were spread over (1 before)")
    components: dict[str, Components] = Field(
        default_factory=dict, description="per arm and fake/genuine: the spread between processes and within one"
    )
    reps_to_decide: int | None = Field(default=None, description="undecided: about how many reps would decide")
    diagnostics: list[str] = Field(default_factory=list)
    image: str | None = Field(default=None, description="screenshot size WxH; None: a text-only step")
    genuine_vs_plain_ci: Interval | None = Field(
        default=None, description="genuine (restored) / plain genuine, paired by rep: the restore's proof"
    )
    plain_verdict: Verdict = Field(default="undecided", description="genuine / plain within 1 +- tolerance?")
    genuine_warm: str = Field(default="", description="how the genuine arm's prefix got into the slot")
    baseline_source: str = Field(default="", description="direct reps, or the fill passes' prefix sums")
    rep_s: Interval | None = Field(default=None, description="wall seconds of one rep past the direct baseline's")
    n_out: int = Field(default=0, description="tokens the fake arm generated after the step (sweep.n_out; 0: none)")
    decode_ci: Interval | None = Field(
        default=None, description="sweep.n_out: the fake arm's decode ms per token at depth L + new (server)"
    )

    def verdict_spread(self) -> Components | None:
        """The spread the adaptive stop sizes a further process by: fake/genuine's, else the fake arm's."""
        return self.components.get("fake/genuine") or self.components.get("fake")


class ServerPointFields(BaseModel):
    """What the server adds: an image step's parts, llama-bench's cross-check, its own share per arm."""

    image_tokens: int | None = Field(default=None, description="prompt tokens of the image (nx*ny + 2 markers)")
    image_positions: int | None = Field(default=None, description="positions it advances: L counts cells, not these")
    encode_ms: float | None = Field(default=None, description="median vision encode ms of the fake arm")
    lm_ms: float | None = Field(default=None, description="median fake prompt_ms - encode_ms: the LM part")
    encode_ci: Interval | None = Field(default=None, description="the fake arm's vision encode ms")
    lm_ci: Interval | None = Field(default=None, description="the fake arm's LM part (prompt_ms - encode_ms)")
    bench_check_ci: Interval | None = Field(
        default=None, description="llama-bench's chunk ms at depth L (mean, 95% interval from its reps)"
    )
    vs_inproc: dict[str, Interval] = Field(
        default_factory=dict, description="server points of a both-places sweep: server / in-process per arm"
    )


class InprocPointFields(BaseModel):
    """What one process adds: what having the prefix cost (the cache read a server would do, against memcpy)."""

    fake_prep_ci: Interval | None = Field(default=None, description="inproc: ms to fabricate the prefix")
    restore_prep_ci: Interval | None = Field(default=None, description="inproc: ms of set_data_ext, the cache read")
    memcpy_ci: Interval | None = Field(default=None, description="inproc: ms of a plain memcpy of the blob's bytes")
    blob_bytes: int | None = None
    predicted_blob_bytes: int | None = Field(default=None, description="from the GGUF (lab.models.memshape)")
    restore_gbps_ci: Interval | None = Field(default=None, description="blob bytes / restore ms, GB/s")
    memcpy_gbps_ci: Interval | None = Field(default=None, description="blob bytes / memcpy ms, GB/s")
    restore_vs_memcpy_ci: Interval | None = Field(default=None, description="memcpy ms / restore ms, paired by rep")
    restore_step_vs_genuine_ci: Interval | None = Field(
        default=None, description="(restore + decode) / genuine decode: the no-patch fallback's step"
    )
    cache_read_share_ci: Interval | None = Field(default=None, description="restore ms / (restore + decode) ms")


class SweepPoint(InprocPointFields, ServerPointFields, PointCore):
    """raw/points.jsonl: one (L, new) point measured in one place, written when all its samples are in. Stored
    flat: the core, then the server's fields, then one process's (each empty where its place did not measure)."""


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
    process: int = Field(default=0, description="the run's driver process that made the pass (0 before)")


class SweepRound(BaseModel):
    """raw/rounds.jsonl: one point's reps in one of the run's processes are all in (its samples written before
    this row): the unit a resumed sweep keeps."""

    where: Where = "server"
    point: str
    process: int
    reps: int
    wall_s: list[float] = Field(default_factory=list, description="each rep's wall seconds")
    baseline: list[bool] = Field(default_factory=list, description="each rep: it ran the direct baseline")


class ServerShare(BaseModel):
    """raw/server_share.json: the server's per-request share over the grid, a measurement, not a verdict: what a
    user adds to the engine's own time for the new tokens (`new / prefill_tps(L)`, the estimate) to predict what
    their server pays for a step with the cache. Per rep genuine - estimate (ms, paired by rep); a plane
    fixed + per_new x new + per_1k x L / 1000 fitted in each process over the text points it measured, each
    coefficient's interval over processes."""

    fixed_ms_ci: Interval | None = Field(default=None, description="ms per request")
    per_new_ms_ci: Interval | None = Field(default=None, description="ms per new token")
    per_1k_cached_ms_ci: Interval | None = Field(default=None, description="ms per 1k cached tokens (L)")
    share_ci: Interval | None = Field(
        default=None, description="genuine / estimate: each process's median over its text points' reps (in %)"
    )
    points: int = Field(default=0, description="text points fitted")
    processes: int = Field(default=0, description="processes with a fit")


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
    restore_vs_memcpy_ci: Interval | None = Field(default=None, description="memcpy ms / restore ms, paired by rep")
    fake_vs_genuine_ci: Interval | None = Field(default=None, description="median over every point's reps")
    restore_step_vs_genuine_ci: Interval | None = Field(default=None, description="median over every point's reps")
    genuine_vs_plain_ci: Interval | None = Field(default=None, description="restored / plain genuine, every rep")
    fill_passes: int = Field(default=0, description="cumulative fill passes measured")
    fill_s: float = Field(default=0.0, description="their wall seconds, summed")
    rep_s_ci: Interval | None = Field(default=None, description="seconds per rep, median over the points")
