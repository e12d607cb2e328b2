"""The exact-rebuild toy: each layer adds the mean of its visible cached entries to its input (identity KV projections,
uniform weights), in `fractions.Fraction`. Cached rows come either from the shared boundary input or from
each layer's own input; that one choice decides whether prefilling the last K inputs again rebuilds the state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Generic, TypeVar

# Fraction, or int for inputs pre-scaled by lcm(1..W)**(D+1) so every mean divides exactly (span.py's fast path)
Num = TypeVar("Num", Fraction, int)


@dataclass(frozen=True)
class Prefill(Generic[Num]):
    hidden: list[Num]  # the last layer's outputs, one per computed position
    caches: list[list[Num]]  # per layer, the retained KV rows: the last `window` entries


def prefill(inputs: Sequence[Num], depth: int, window: int, shared: bool) -> Prefill[Num]:
    """Listing 9.1: positions before the first input are simply unavailable (s = first position)."""
    boundary = list(inputs)
    hidden = list(inputs)
    caches = []
    for _ in range(depth):
        kv = boundary if shared else hidden
        caches.append(kv[-window:])
        hidden = [value + mean(kv[max(0, i - window + 1) : i + 1]) for i, value in enumerate(hidden)]
    return Prefill(hidden, caches)


def decode(caches: Sequence[Sequence[Num]], x: Num, window: int, shared: bool) -> Num:
    """One decode step with input x, reading each layer's retained KV plus the new row's own entry."""
    hidden: Num = x
    for layer in caches:
        kv = list(layer)
        kv.append(x if shared else hidden)
        hidden = hidden + mean(kv[-window:])
    return hidden


def mean(xs: Sequence[Num]) -> Num:
    total = xs[0]
    for v in xs[1:]:
        total = total + v
    if isinstance(total, int):
        q, r = divmod(total, len(xs))
        if r:
            raise ArithmeticError("inexact integer mean: the inputs were not scaled enough")
        return q
    return total / len(xs)


@dataclass(frozen=True)
class Comparison:
    kv_source: str  # "shared" | "per-layer"
    last_full: Fraction
    last_suffix: Fraction
    next_full: Fraction
    next_suffix: Fraction
    first_diff: tuple[int, int] | None  # (layer, 1-based; position, 0-based) of the first differing cache entry

    @property
    def exact(self) -> bool:
        return self.last_full == self.last_suffix and self.next_full == self.next_suffix and self.first_diff is None


def compare(
    inputs: Sequence[Fraction], depth: int, window: int, keep: int, next_input: Fraction, shared: bool
) -> Comparison:
    """Full prefill vs rebuild from the last `keep` inputs, then one decode step from each cache."""
    if not 1 <= keep <= len(inputs):
        raise ValueError(f"keep must be within 1..{len(inputs)} (the input length), got {keep}")
    if window < 1 or depth < 1:
        raise ValueError("window and depth must be >= 1")
    full = prefill(inputs, depth, window, shared)
    suffix = prefill(inputs[-keep:], depth, window, shared)
    return Comparison(
        kv_source="shared" if shared else "per-layer",
        last_full=full.hidden[-1],
        last_suffix=suffix.hidden[-1],
        next_full=decode(full.caches, next_input, window, shared),
        next_suffix=decode(suffix.caches, next_input, window, shared),
        first_diff=first_cache_diff(full.caches, suffix.caches, len(inputs)),
    )


def first_cache_diff(
    full: Sequence[Sequence[Fraction]], rebuild: Sequence[Sequence[Fraction]], n: int
) -> tuple[int, int] | None:
    """Caches hold the last entries of an n-long sequence; a rebuild may hold fewer (a missing entry differs)."""
    for layer, (a, b) in enumerate(zip(full, rebuild, strict=True), start=1):
        for j in range(len(a)):
            pos = n - len(a) + j
            k = j - (len(a) - len(b))
            if k < 0 or a[j] != b[k]:
                return layer, pos
    return None


def integers(n: int) -> list[Fraction]:
    """The lab's inputs: 1..n."""
    return [Fraction(i) for i in range(1, n + 1)]
