"""The profile's section of the lab's settings (`profile`): the probe depths, how they are reached, the
processes and reps, and the checks' depths and tolerances."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from lab.core.settings_server import Section

PROFILE_DEPTHS = [512 * k for k in range(9)]  # the default probes: 0 to 4096


def log_depths(deepest: int) -> list[int]:
    """Log-spaced probe depths to `deepest`: 0, 1024, 2048, 4096, ... (doubling), and `deepest` itself."""
    out, d = [0], 1024
    while d < deepest:
        out.append(d)
        d *= 2
    return sorted({*out, deepest})


class ProfileSettings(Section):
    """The per-node profile: a chunk of `chunk` tokens timed FUSED and TIMED at each of `depths`, in `processes`
    instrument processes of `reps` reps each, every process followed by its llama-bench process."""

    chunk: int = Field(default=512, ge=16, le=8192)
    depths: list[int] = Field(
        default=PROFILE_DEPTHS, description="probe depths (log:D: 0, 1024, 2048, ... doubling to D)"
    )
    fill: Literal["fake", "real"] = Field(
        default="fake",
        description="how a probe reaches its depth: a fake prefix (one chunk per probe, whatever the depth) or "
        "real, the cumulative pass (every chunk to the deepest depth; depths at multiples of chunk)",
    )
    processes: int = Field(default=5, ge=2, le=50, description="instrument processes: the intervals' units")
    reps: int | None = Field(
        default=None,
        ge=1,
        le=500,
        description="reps of FUSED and TIMED per depth in each process (default 4; fill real: cumulative passes, "
        "default 1)",
    )
    max_processes: int | None = Field(
        default=None,
        ge=2,
        le=50,
        description="more processes, up to this, while an interval is wide or a check undecided",
    )
    target: float = Field(default=0.05, gt=0, lt=1, description="half-width at which the intervals are narrow enough")
    threads: int | None = Field(default=None, ge=1, description="-t (default: server.threads)")
    threads_batch: int | None = Field(default=None, ge=1, description="-tb (default: threads)")
    bench_check: bool = Field(
        default=True, description="cross-check FUSED chunk times with llama-bench (a process after every process)"
    )
    real_max_depth: int = Field(
        default=4096,
        ge=0,
        description="the deepest depth a real fill reaches: llama-bench's and the fake-vs-real check's depths "
        "are those up to it (a real fill costs the square of its depth)",
    )
    real_check: bool = Field(
        default=False,
        description="also time each depth up to real_max_depth after a real fill, paired with the fake prefix",
    )
    bench_tolerance: float = Field(default=0.05, gt=0, lt=1, description="FUSED / llama-bench agrees inside 1 +- this")
    timed_tolerance: float = Field(default=0.03, gt=0, lt=1, description="TIMED / FUSED agrees inside 1 +- this")
    real_tolerance: float = Field(default=0.03, gt=0, lt=1, description="fake / real depth agrees inside 1 +- this")
    threadpool: bool = Field(
        default=False, description="attach a persistent threadpool like llama-bench (llama-server attaches none)"
    )
    peaks: bool = Field(default=True, description="probe this host's GEMM and memcpy peaks in the same run")
    predict_depths: list[int] = Field(
        default=[8192, 16384, 32768], description="depths the run's own time model predicts each band's ms/token at"
    )
    clean_room_stop: str | None = Field(default=None, description="shell command that stops the host's server")
    clean_room_start: str | None = Field(default=None, description="shell command that starts it again")

    @field_validator("depths", mode="before")
    @classmethod
    def _log(cls, v: Any) -> Any:
        if not isinstance(v, str):
            return v
        if v.startswith("log:") and v[4:].isdigit():
            return log_depths(int(v[4:]))
        if re.fullmatch(r" *-?[0-9]+ *(, *-?[0-9]+ *)*", v):
            return [int(x) for x in v.split(",")]
        raise ValueError(f"takes depths as 0,512,1024 or log:D, not {v!r}")

    @field_validator("depths")
    @classmethod
    def _probe_depths(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("lists no depth")
        if any(d < 0 for d in v):
            raise ValueError(f"a depth is >= 0, not {min(v)}")
        twice = sorted({d for d in v if v.count(d) > 1})
        if twice:
            raise ValueError(f"lists depth {twice[0]} twice")
        return sorted(v)

    @field_validator("predict_depths")
    @classmethod
    def _depths(cls, v: list[int]) -> list[int]:
        if any(d < 0 for d in v):
            raise ValueError("depths are non-negative")
        return sorted(set(v))

    @model_validator(mode="after")
    def _processes(self) -> ProfileSettings:
        if self.max_processes is not None and self.max_processes < self.processes:
            raise ValueError(f"profile.max_processes ({self.max_processes}) < profile.processes ({self.processes})")
        return self

    @model_validator(mode="after")
    def _real_depths(self) -> ProfileSettings:
        if self.fill == "real":
            off = [d for d in self.depths if d % self.chunk]
            if off:
                raise ValueError(f"fill real reaches depths at multiples of chunk {self.chunk}, not {off[0]}")
            if self.real_check:
                raise ValueError("real_check goes with fill fake (the real fill is what it checks against)")
        return self

    @model_validator(mode="after")
    def _clean_room_pair(self) -> ProfileSettings:
        if (self.clean_room_stop is None) != (self.clean_room_start is None):
            raise ValueError("profile.clean_room_stop and profile.clean_room_start go together")
        return self

    @property
    def reps_per_process(self) -> int:
        """reps, or its default: 4 reps of a probe with a fake prefix; 1 cumulative pass with a real fill."""
        return self.reps if self.reps is not None else (4 if self.fill == "fake" else 1)

    @property
    def bench_depths(self) -> list[int]:
        """The depths llama-bench and the fake-vs-real check run at: those a real fill reaches."""
        return [d for d in self.depths if d <= self.real_max_depth]

    @property
    def check_depth(self) -> int | None:
        """The instrument's --check-depth: the deepest checked depth, or None without the check."""
        return max(self.bench_depths) if self.real_check and self.bench_depths else None
