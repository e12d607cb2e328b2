"""`lab trace tune`'s recommendation as the evidence decides it: a decided gain, else a decided equivalence that
holds less memory, else the defaults kept with the reps that would decide the closest candidate; the flags named
for the server's version."""

from __future__ import annotations

import pytest

from lab.core.schemas import Interval
from lab.core.schemas.trace import EQUIVALENT, TuneSetting
from lab.core.stats import reps_to_decide, verdict
from lab.experiments.tune.decide import recommend
from lab.presenters.tune import recommendation

pytestmark = pytest.mark.fast
LATEST = "0.5.0-dev (build 1, commit 0c1e57098)"


def row(
    key: str,
    role: str = "candidate",
    vs: tuple[float, float, float] | None = None,
    peak: float = 100.0,
    ram: int = 8192,
    checkpoints: int = 32,
    preserve: bool | None = True,
) -> TuneSetting:
    diff = Interval(value=vs[1], lo=vs[0], hi=vs[2], n=12) if vs else None
    called = verdict(diff, EQUIVALENT, center=0.0) if diff else None
    return TuneSetting(
        key=key,
        flags=f"--ctx-checkpoints {checkpoints} --cache-ram {ram}"
        + (" --no-reasoning-preserve" if not preserve else ""),
        server_version=LATEST,
        checkpoints=checkpoints,
        checkpoint_min_step=8192,
        cache_ram_mib=ram,
        reasoning_preserve=preserve,
        role=role,  # type: ignore[arg-type]
        on_front=True,
        predicted_prefill_s=1.0,
        predicted_peak_mib=peak,
        predicted_reused=10,
        within_budget=True,
        realised=Interval(value=0.9, lo=0.88, hi=0.92, n=12),
        vs_defaults=diff,
        verdict=called,
        reps_to_decide=reps_to_decide(diff, EQUIVALENT, center=0.0) if called == "undecided" else None,
        differing_steps=2 if diff else None,
        vs_defaults_differing=diff,
        vs_defaults_alike=Interval(value=0.0, lo=-0.002, hi=0.002, n=12) if diff else None,
    )


def test_a_decided_gain_is_recommended_the_largest_first() -> None:
    rows = [row("d", "defaults"), row("a", vs=(0.02, 0.03, 0.04)), row("b", vs=(0.03, 0.05, 0.07))]
    recommend(rows)
    assert [r.key for r in rows if r.recommended] == ["b"] and rows[2].recommended_as == "gain"
    text = recommendation(rows)
    assert text.startswith("for llama.cpp 0c1e57098 (latest: llama-cpp-python 0.3.36): llama-server ... ")
    assert "(decided better: realises 90.0% [88.0%, 92.0%] of the saving, 5.0% [3.0%, 7.0%] on the defaults'" in text


def test_an_undecided_point_gain_keeps_the_defaults_and_says_what_would_decide_it() -> None:
    """The case the issue measured: +1.8 [-4.6, +6.6] points, undecided; the defaults stay."""
    rows = [row("d", "defaults"), row("c", vs=(-0.046, 0.018, 0.066), ram=0, checkpoints=8)]
    recommend(rows)
    assert rows[0].recommended and rows[0].recommended_as == "defaults" and not rows[1].recommended
    assert rows[1].verdict == "undecided" and rows[1].reps_to_decide and rows[1].reps_to_decide > 12
    text = recommendation(rows)
    assert "the defaults kept" in text and f"about {rows[1].reps_to_decide} reps would decide it" in text


def test_a_decided_equivalence_with_less_memory_is_recommended_and_says_what_it_frees() -> None:
    rows = [
        row("d", "defaults", peak=8292.0),
        row("same", vs=(-0.004, 0.001, 0.006), peak=100.0, ram=0),
        row("heavier", vs=(-0.005, 0.0, 0.005), peak=9000.0),
    ]
    recommend(rows)
    assert [r.key for r in rows if r.recommended] == ["same"] and rows[1].recommended_as == "less memory"
    text = recommendation(rows)
    assert "the same within 1% of the saving, holding 8192.0 MiB less at most: the RAM prompt cache (8192 MiB) off" in (
        text
    )


def test_a_decided_loss_is_never_recommended() -> None:
    rows = [row("d", "defaults"), row("worse", vs=(-0.09, -0.06, -0.03), peak=1.0)]
    recommend(rows)
    assert rows[0].recommended and not rows[1].recommended
    assert "worse" in recommendation(rows) and "would decide" not in recommendation(rows)


def test_turning_reasoning_preserve_off_says_it_changes_what_the_model_reads() -> None:
    rows = [row("d", "defaults"), row("off", vs=(0.05, 0.08, 0.11), preserve=False)]
    recommend(rows)
    assert rows[1].recommended
    assert "--no-reasoning-preserve also changes what the model reads" in recommendation(rows)


def test_a_server_the_lab_does_not_know_is_named_by_its_version_line() -> None:
    rows = [row("d", "defaults")]
    rows[0].server_version = "9999 (abcdef123)"
    recommend(rows)
    assert recommendation(rows).startswith("for llama-server 9999 (abcdef123): llama-server ... ")
