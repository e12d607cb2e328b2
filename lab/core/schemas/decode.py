"""Decoding at depth: llama-bench's generation rows, and `lab engine decode`'s cross-check per depth (the server's
fake arm generating n_out tokens after L + new against `llama-bench -p 0 -n N -d L+new`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from lab.core.schemas.base import Interval, Verdict


class BenchDecode(BaseModel):
    """llama-bench -p 0 -n n_gen -d depth: generating n_gen tokens after a depth-token fill, every rep's ms per
    generated token."""

    depth: int
    n_gen: int
    samples_ms: list[float] = Field(default_factory=list, description="each rep: its generation ms / n_gen")


class DecodeDepth(BaseModel):
    """One depth of `lab engine decode`: decode ms per token at depth L + new, through the server (the fake arm,
    interleaved rep by rep with llama-bench) and in llama-bench, and their ratio."""

    depth: int = Field(description="L + new: where the first generated token attends from")
    L: int = Field(description="the fake prefix (n_fake_cached)")
    new: int = Field(description="new tokens prefilled after it")
    n_out: int = Field(description="tokens each server sample and llama-bench rep generates")
    server_ms: Interval | None = Field(default=None, description="server: predicted_ms / (predicted_n - 1)")
    bench_ms: Interval | None = Field(default=None, description="llama-bench: generation ms / n_gen")
    ratio: Interval | None = Field(
        default=None, description="server / llama-bench, unpaired, over both sides' processes"
    )
    verdict: Verdict = "undecided"
    tolerance: float = Field(description="agree: the ratio's interval inside 1 +- tolerance")
    server_samples_ms: list[float] = Field(default_factory=list)
    bench_samples_ms: list[float] = Field(default_factory=list)
    server_processes: list[int] = Field(default_factory=list, description="each server sample's process (rep)")
    bench_processes: list[int] = Field(default_factory=list, description="each llama-bench sample's call")
    failed: list[str] = Field(default_factory=list, description="the server samples that failed, and why")
