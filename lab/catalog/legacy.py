"""Run folders of experiments that became others, read as they are, so old runs ingest, render and compare
beside new ones; nothing writes these any more:

- `lab arms` before it became `lab sweep --where inproc` (experiment "arms"): their row schemas, and each row as
  the sweep's table family holds it (`current()`);
- the step-shape trace replay before it became the one replay (experiment "trace_replay"): its step and task
  rows, in tables of their own.

The oldest of them ran before the genuine arm became a restore: their `restore` arm is today's genuine hit and
their `genuine` (which decoded L every rep, and never timed a memcpy) today's plain one, and they are read so.
What does not carry over: the server figures an InprocPoint kept beside its own (the run's server_samples carry
over as the server's samples, with no server point of their own)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from lab.core.rawtable import RawTable
from lab.core.schemas import ArmStats, InprocFill, Interval, SweepPoint, SweepSample, Verdict

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


# what an InprocPoint kept that today's point does not: the oldest runs' restore arm, and the server's figures
OLDER_ONLY = {"restore", "restore_vs_genuine_ci", "restore_verdict", "server", "server_vs_inproc"}


class InprocPoint(SweepPoint):
    """raw/inproc_points.jsonl: one (L, new) point of `lab arms`, written when all its samples are in: today's
    point's fields (those it had mean the same), `reps` required, and what only it kept (OLDER_ONLY and the server's
    fake/genuine). Ratios are paired by rep (a rep's arms run back to back in one process); server/in-process is
    unpaired."""

    reps: int
    restore: ArmStats = Field(default_factory=ArmStats, description="older runs: the restore arm's decode ms")
    restore_vs_genuine_ci: Interval | None = Field(default=None, description="older runs: restore / genuine")
    restore_verdict: Verdict = Field(default="undecided", description="older runs: restore / genuine")
    server: dict[str, ArmStats] = Field(default_factory=dict, description="where=both: prompt_ms per server arm")
    server_vs_inproc: dict[str, Interval] = Field(
        default_factory=dict, description="per arm: server prompt_ms / in-process decode ms (the server's share)"
    )
    server_fake_vs_genuine_ci: Interval | None = Field(default=None, description="the same ratio through HTTP")

    def current(self) -> SweepPoint:
        row = self.model_dump(exclude={*OLDER_ONLY, "server_fake_vs_genuine_ci", "where"})
        if self.restore.n_ok:  # the oldest runs: restore is today's genuine, their genuine today's plain
            row.update(genuine=self.restore, plain=self.genuine, genuine_vs_plain_ci=self.restore_vs_genuine_ci)
            row.update(plain_verdict=self.restore_verdict)  # fake/genuine stays: fake vs a genuine hit, the plain one
        return SweepPoint(where="inproc", **row)


# an "arms" run's tables: its points and samples in the old schemas above, its server samples and fills as now
ARMS_POINTS = RawTable("inproc_points", InprocPoint)
ARMS_SAMPLES = RawTable("inproc_samples", InprocSample)
ARMS_SERVER_SAMPLES = RawTable("server_samples", SweepSample)
ARMS_FILLS = RawTable("inproc_fills", InprocFill)


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


# a "trace_replay" run's tables
TRACE_STEPS = RawTable("steps", TraceStepResult)
TRACE_TASKS = RawTable("tasks", TraceTaskResult)
