"""What every table shares: the arms, the verdicts, an interval, the bands, an arm's statistics.

Units are in the field names. `L` counts prior KV cells (tokens) the new tokens attend over, not positions:
for text the two are equal; an image's tokens outnumber its positions.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ArmName = Literal["baseline", "fake", "genuine", "plain"]
Where = Literal["server", "inproc"]  # through llama-server's HTTP API, or in one process with libllama (lab/inproc)
Verdict = Literal["agree", "disagree", "undecided"]


MIN_SUPPORT = 5  # fewer samples, or processes resampled, than this: a "95%" interval is about their range


class Interval(BaseModel):
    """A point estimate with its 95% interval (lab.core.stats), and how many samples (or pairs) it rests on."""

    value: float
    lo: float
    hi: float
    n: int = Field(ge=1)
    processes: int = Field(
        default=1, ge=1, description="processes its bootstrap resampled (1: a within-run interval, one process)"
    )

    @property
    def scope(self) -> str:
        """What variance the interval carries: across `processes` processes, or within one run's process."""
        return f"{self.processes} processes" if self.processes > 1 else "within-run"

    @property
    def thin(self) -> bool:
        """Whether it rests on fewer than MIN_SUPPORT samples, or resamples fewer than MIN_SUPPORT processes (one
        process is a within-run interval, which its scope names): printed with what it rests on."""
        return self.n < MIN_SUPPORT or 1 < self.processes < MIN_SUPPORT

    @property
    def support(self) -> str:
        """What it rests on, the fewer of its samples and processes: `3 processes`, `2 samples`."""
        k, unit = (self.processes, "process") if 1 < self.processes < self.n else (self.n, "sample")
        return f"{k} {unit}{'' if k == 1 else 'es' if unit == 'process' else 's'}"

    @property
    def half_width(self) -> float:
        """Half the interval's width, relative to the estimate (0.03: +-3%)."""
        return (self.hi - self.lo) / 2 / abs(self.value) if self.value else float("inf")

    def divided(self, by: float) -> Interval:
        """The interval divided by an exact positive number (a prediction, a count)."""
        return self.model_copy(update={"value": self.value / by, "lo": self.lo / by, "hi": self.hi / by})

    def complement(self) -> Interval:
        """1 - the interval (its ends swap): a share lost as the share kept."""
        return self.model_copy(update={"value": 1 - self.value, "lo": 1 - self.hi, "hi": 1 - self.lo})

    def inverse(self) -> Interval | None:
        """1 / the interval (its ends swap); None when it holds 0 or less."""
        if self.lo <= 0:
            return None
        return self.model_copy(update={"value": 1 / self.value, "lo": 1 / self.hi, "hi": 1 / self.lo})

    def fmt(self, pct: bool = False, digits: int = 3) -> str:
        """`1.012 [0.998, 1.027]`, or with pct=True, as a change: `+1.2% [-0.2%, +2.7%]`; a thin one adds what it
        rests on: `1.012 [0.998, 1.027] (only 3 processes)`."""
        if pct:
            text = f"{self.value - 1:+.1%} [{self.lo - 1:+.1%}, {self.hi - 1:+.1%}]"
        else:
            text = f"{self.value:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"
        return text + self.thin_note()

    def thin_note(self) -> str:
        return f" (only {self.support})" if self.thin else ""


class Components(BaseModel):
    """A metric's spread at two levels (lab.core.components.variance_components): between the run's processes and within
    one, as standard deviations of its log values (about a relative spread: 0.05 is 5%)."""

    between: float
    within: float
    processes: int
    reps: int


def cell(iv: Interval | None, digits: int = 3, pct: bool = False, share: bool = False) -> str:
    """An interval as a table cell, `-` when there is none: `1.012 [0.998, 1.027]` (the value alone from fewer
    than two samples); with pct, as a change (`+1.2% [-0.2%, +2.7%]`); with share, as a share (`12.3% [...]`)."""
    if iv is None:
        return "-"
    if share:
        return f"{iv.value:.1%} [{iv.lo:.1%}, {iv.hi:.1%}]{iv.thin_note()}"
    return iv.fmt(pct=pct, digits=digits) if iv.n > 1 or pct else f"{iv.value:.{digits}f}"


# Where prefill time goes, per profiled graph node (lab.models.bands sorts nodes into these):
Band = Literal["ffn_moe", "attn_core", "proj", "gdn", "other"]
BANDS: tuple[Band, ...] = ("ffn_moe", "attn_core", "proj", "gdn", "other")

KV_PAD = 256  # llama_kv_cache::get_n_kv pads the attended columns to a multiple of max(n_pad, 256)


def ggml_pad(n: int, to: int = KV_PAD) -> int:
    return (n + to - 1) // to * to


class ArmStats(BaseModel):
    median_ms: float | None = None
    median_lo_ms: float | None = Field(default=None, description="the median's 95% interval, low end")
    median_hi_ms: float | None = Field(default=None, description="the median's 95% interval, high end")
    min_ms: float | None = None
    max_ms: float | None = None
    n_ok: int = 0
    n_failed: int = 0
    processes: int = Field(default=1, description="processes the interval resampled (1: within one process)")

    @property
    def median(self) -> Interval | None:
        """The median with its interval (None for a run measured before intervals existed)."""
        if self.median_ms is None or self.median_lo_ms is None or self.median_hi_ms is None:
            return None
        n = max(self.n_ok, 1)
        return Interval(value=self.median_ms, lo=self.median_lo_ms, hi=self.median_hi_ms, n=n, processes=self.processes)

    @property
    def thin(self) -> bool:
        """Whether the median's interval is thin (Interval.thin)."""
        return self.median is not None and self.median.thin
