"""Run folders written by `lab arms` before it became `lab sweep --where inproc` (experiment "arms"): their row
schemas, and each row as the sweep's table family holds it (`current()`), so old runs ingest, render and
compare beside new ones. Nothing writes these any more.

The oldest of them ran before the genuine arm became a restore: their `restore` arm is today's genuine hit and
their `genuine` (which decoded L every rep, and never timed a memcpy) today's plain one, and they are read so.
What does not carry over: the server figures an InprocPoint kept beside its own (the run's server_samples carry
over as the server's samples, with no server point of their own)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from lab.schemas import ArmStats, Interval, SweepPoint, SweepSample, Verdict

InprocArm = Literal["baseline", "fake", "genuine", "plain", "restore"]
# genuine: the new tokens after restoring the really decoded depth-L state of a cumulative fill (its prep_ms is
# the restore); plain: after decoding L in the same sequence first (the proof that a restored state is a
# genuine hit). `restore` is only in runs made before the genuine arm became a restore (it was that arm).


class InprocSample(BaseModel):
    """raw/inproc_samples.jsonl: one timed step of one in-process arm (lab/inproc/arms.cpp, no server)."""

    point: str
    L: int
    new: int
    arm: InprocArm
    rep: int
    ok: bool
    reason: str = ""
    decode_ms: float | None = Field(default=None, description="llama_decode of the new tokens (baseline: L + new)")
    prep_ms: float | None = Field(default=None, description="fake: fabricating the prefix; genuine: the restore")
    copy_ms: float | None = Field(default=None, description="genuine: a plain memcpy of blob_bytes, same rep")
    blob_bytes: int | None = Field(default=None, description="genuine: the depth-L state blob (flags 0)")
    pos_max: int = Field(description="the sequence's max position before the new tokens (-1: empty)")

    def current(self) -> SweepSample:
        arm = self.arm
        if arm == "restore":
            arm = "genuine"
        elif arm == "genuine" and self.ok and self.copy_ms is None:  # the oldest runs' genuine decoded L
            arm = "plain"
        return SweepSample(
            where="inproc", prompt_ms=self.decode_ms, **self.model_dump(exclude={"decode_ms", "arm"}), arm=arm
        )


class InprocPoint(BaseModel):
    """raw/inproc_points.jsonl: one (L, new) point of `lab arms`, written when all its samples are in.
    Ratios are paired by rep (a rep's arms run back to back in one process); server/in-process is unpaired."""

    point: str
    L: int
    new: int
    n_kv_padded: int = Field(description="GGML_PAD(L + new, 256): attended KV columns")
    measurable: bool = Field(description="False below the 256-column floor, where L changes nothing")
    reps: int
    baseline: ArmStats = Field(description="decode ms of L + new from an empty sequence (direct reps)")
    fake: ArmStats = Field(description="decode ms of the new tokens after the fabricated prefix")
    genuine: ArmStats = Field(description="decode ms of the new tokens after a genuine depth-L state")
    plain: ArmStats = Field(default_factory=ArmStats, description="the same after decoding L in the same sequence")
    restore: ArmStats = Field(default_factory=ArmStats, description="older runs: the restore arm's decode ms")
    baseline_fill: ArmStats = Field(
        default_factory=ArmStats, description="time to reach L + new from empty, from the cumulative fill passes"
    )
    estimate_ci: Interval | None = Field(
        default=None, description="the fill passes' chunk of `new` at depth L: only_new / prefill_tps(L), ms"
    )
    fake_prep_ci: Interval | None = Field(default=None, description="ms to fabricate the prefix")
    restore_prep_ci: Interval | None = Field(default=None, description="ms of set_data_ext: the cache read")
    memcpy_ci: Interval | None = Field(default=None, description="ms of a plain memcpy of the blob's bytes")
    blob_bytes: int | None = None
    predicted_blob_bytes: int | None = Field(default=None, description="from the GGUF (lab.models.memshape)")
    restore_gbps_ci: Interval | None = Field(default=None, description="blob bytes / restore ms, GB/s")
    memcpy_gbps_ci: Interval | None = Field(default=None, description="blob bytes / memcpy ms, GB/s")
    restore_vs_memcpy_ci: Interval | None = Field(
        default=None, description="memcpy ms / restore ms: the share of copy bandwidth the restore reaches"
    )
    fake_vs_genuine_ci: Interval | None = Field(default=None, description="fake / genuine decode ms")
    genuine_vs_plain_ci: Interval | None = Field(
        default=None, description="genuine (restored) / plain genuine decode ms: the restore's proof"
    )
    fake_vs_estimate_ci: Interval | None = Field(default=None, description="fake / the fill's chunk (unpaired)")
    restore_vs_genuine_ci: Interval | None = Field(default=None, description="older runs: restore / genuine")
    restore_step_vs_genuine_ci: Interval | None = Field(
        default=None, description="(restore ms + decode ms) / decode ms: what the no-patch fallback pays"
    )
    fake_vs_baseline_ci: Interval | None = Field(default=None, description="fake / baseline")
    cache_read_share_ci: Interval | None = Field(
        default=None, description="restore ms / (restore ms + decode ms) of the genuine arm"
    )
    genuine_verdict: Verdict = Field(default="undecided", description="fake / genuine within 1 +- tolerance?")
    plain_verdict: Verdict = Field(default="undecided", description="genuine / plain within 1 +- tolerance?")
    restore_verdict: Verdict = Field(default="undecided", description="older runs: restore / genuine")
    reps_to_decide: int | None = None
    server: dict[str, ArmStats] = Field(default_factory=dict, description="where=both: prompt_ms per server arm")
    server_vs_inproc: dict[str, Interval] = Field(
        default_factory=dict, description="per arm: server prompt_ms / in-process decode ms (the server's share)"
    )
    server_fake_vs_genuine_ci: Interval | None = Field(default=None, description="the same ratio through HTTP")
    rep_s: Interval | None = Field(default=None, description="wall seconds of one rep without the direct baseline")
    diagnostics: list[str] = Field(default_factory=list)

    def current(self) -> SweepPoint:
        old = {"restore", "restore_vs_genuine_ci", "restore_verdict", "server", "server_vs_inproc"}
        row = self.model_dump(exclude={*old, "server_fake_vs_genuine_ci"})
        if self.restore.n_ok:  # the oldest runs: restore is today's genuine, their genuine today's plain
            row.update(genuine=self.restore, plain=self.genuine, genuine_vs_plain_ci=self.restore_vs_genuine_ci)
            row.update(plain_verdict=self.restore_verdict)  # fake/genuine stays: fake vs a genuine hit, the plain one
        return SweepPoint(where="inproc", **row)
