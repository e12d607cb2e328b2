"""Rebuild span: a window grows backwards across layers. To rebuild the retained KV of depth D with window W from
per-layer caches, rebuild R = W + (D-1)(W-1) inputs; with shared KV, one window is enough. Checked
exhaustively on every 0/1 input two positions longer than the span, and R-1 is shown to be too short."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from lab.rebuild.toy import Num, Prefill, decode, prefill


def span(window: int, depth: int) -> int:
    """Input positions needed to rebuild the last window at layer `depth` (9.1): the current position is
    shared by every layer's window, so each earlier layer adds W - 1, not W."""
    return window + (depth - 1) * (window - 1)


@dataclass
class SpanVerdict:
    window: int
    depth: int
    span: int
    cases: int = 0
    shared_window_exact: int = 0  # cases where a shared-KV rebuild of one window reproduced everything
    per_layer_span_exact: int = 0  # cases where a per-layer rebuild of R positions did
    shorter_fails: int = 0  # cases where a per-layer rebuild of R-1 changed the final row or the decode step
    counterexample: list[int] = field(default_factory=list)  # the first such input

    @property
    def ok(self) -> bool:
        return (
            self.shared_window_exact == self.cases
            and self.per_layer_span_exact == self.cases
            and (self.shorter_fails > 0 or self.span == 1)
        )


def rebuild_outcome(
    full: Prefill[Num], inputs: Sequence[Num], keep: int, depth: int, window: int, shared: bool, x: Num
) -> tuple[bool, bool]:
    """Rebuild the last `keep` inputs: (final row and decode output unchanged, retained KV unchanged too)."""
    part = prefill(inputs[-keep:], depth, window, shared)
    same = full.hidden[-1] == part.hidden[-1] and decode(full.caches, x, window, shared) == decode(
        part.caches, x, window, shared
    )
    return same, same and full.caches == part.caches


def check_span(window: int, depth: int, next_input: int = 2, exact_type: str = "int") -> SpanVerdict:
    """exact_type "int": inputs scaled by lcm(1..W)**(D+1), so all D layers and the decode step divide
    exactly in integers (the results are the Fraction results times that scale; ~6x faster).
    "fraction": plain fractions.Fraction, as the lab prints them."""
    r = span(window, depth)
    v = SpanVerdict(window, depth, r)
    scale = math.lcm(*range(1, window + 1)) ** (depth + 1)
    for bits in itertools.product((0, 1), repeat=r + 2):
        v.cases += 1
        if exact_type == "int":
            ints = [b * scale for b in bits]
            ok = outcomes(ints, r, depth, window, next_input * scale)
        else:
            ok = outcomes([Fraction(b) for b in bits], r, depth, window, Fraction(next_input))
        v.shared_window_exact += ok[0]
        v.per_layer_span_exact += ok[1]
        if r > 1 and not ok[2]:
            if not v.shorter_fails:
                v.counterexample = list(bits)
            v.shorter_fails += 1
    return v


def outcomes(inputs: Sequence[Num], r: int, depth: int, window: int, x: Num) -> tuple[bool, bool, bool]:
    """(shared rebuild of one window exact, per-layer rebuild of R exact, per-layer rebuild of R-1 unchanged)"""
    shared_full = prefill(inputs, depth, window, True)
    layer_full = prefill(inputs, depth, window, False)
    shared_ok = rebuild_outcome(shared_full, inputs, window, depth, window, True, x)[1]
    span_ok = rebuild_outcome(layer_full, inputs, r, depth, window, False, x)[1]
    shorter_same = rebuild_outcome(layer_full, inputs, r - 1, depth, window, False, x)[0] if r > 1 else True
    return shared_ok, span_ok, shorter_same


def check_all(
    windows: Sequence[int], depths: Sequence[int], next_input: int = 2, exact_type: str = "int"
) -> list[SpanVerdict]:
    return [check_span(w, d, next_input, exact_type) for w in windows for d in depths]
