"""`lab trace tune`'s rows and decision: every setting's predictions and, for the measured ones, their intervals
over reps against the defaults (paired by rep); the recommendation as the evidence decides it."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from lab.conversation.cache_setting import CacheSetting
from lab.core.schemas import ConversationSample, Interval
from lab.core.schemas.trace import EQUIVALENT, RecommendedAs, TuneSetting
from lab.core.stats import called, median_interval, reps_to_decide, step_median_share, verdict
from lab.core.units import MIB
from lab.experiments.tune.grid import Option, setting_key

Step = tuple[str, int]
Rows = dict[int, list[float]]


def seconds(samples: list[ConversationSample], arm: str, setting: str, steps: list[Step]) -> Rows:
    """One arm's prefill seconds by rep, a row over the steps (NaN where a step failed or is missing)."""
    col = {st: j for j, st in enumerate(steps)}
    rows: Rows = {}
    for s in samples:
        if s.arm == arm and s.setting == setting:
            row = rows.setdefault(s.rep, [math.nan] * len(steps))
            if s.ok and s.prompt_ms is not None:
                row[col[(s.task_id, s.step)]] = s.prompt_ms / 1e3
    return rows


def minus(a: Rows, b: Rows, cols: list[int] | None = None) -> Rows:
    """a - b in the reps both have, step by step (only the columns `cols` when given)."""
    keep = cols if cols is not None else range(len(next(iter(a.values()), [])))
    return {r: [a[r][j] - b[r][j] for j in keep] for r in sorted(a.keys() & b.keys())}


def differing(samples: list[ConversationSample], a: str, b: str) -> set[Step]:
    """The steps whose measured reuse under setting b differs from a's in some rep."""
    reuse = {(s.setting, s.rep, s.task_id, s.step): s.cache_n for s in samples if s.arm == "today"}
    return {
        (t, st)
        for (k, rep, t, st), n in reuse.items()
        if k == a and (b, rep, t, st) in reuse and reuse[(b, rep, t, st)] != n
    }


class Baseline(NamedTuple):
    """What every measured setting is weighed against, read from the samples once: the steps, the optimum's
    prefill, the saving (no cache minus the optimum) and the defaults' prefill, by rep."""

    steps: list[Step]
    optimum: Rows
    saving: Rows
    defaults: Rows

    @classmethod
    def of(cls, samples: list[ConversationSample], defaults_key: str) -> Baseline:
        steps = sorted({(s.task_id, s.step) for s in samples})
        optimum = seconds(samples, "optimum", "", steps)
        saving = minus(seconds(samples, "no_cache", "", steps), optimum)
        return cls(steps, optimum, saving, seconds(samples, "today", defaults_key, steps))


def measured_fields(samples: list[ConversationSample], keys: list[str], o: Option, base: Baseline) -> dict[str, Any]:
    """A measured setting's intervals. Each is a sum over steps of each step's median over reps, as a share of the
    optimum's saving (no cache minus the optimum, the same way): realised, from its own prefill; vs the defaults,
    from the defaults' prefill minus its, paired by rep (both run in every rep, side by side), in all and split
    into the steps whose reuse differs (what the setting changes) and those alike (its bookkeeping, and noise)."""
    k = o.key
    own = seconds(samples, "today", k, base.steps)
    today = [x for x in samples if x.arm == "today" and x.setting == k and x.cache_n is not None]
    totals = {r: sum(v for v in row if not math.isnan(v)) for r, row in own.items()}
    lost = step_median_share(minus(own, base.optimum), base.saving, f"tune/{k}/lost")  # no cache only in the scale
    out = {
        "predicted_exact": sum(x.cache_n == o.cache_n.get((x.task_id, x.step)) for x in today),
        "measured_steps": len(today),
        "today_s": median_interval(list(totals.values()), f"tune/{k}/today", list(totals)),
        "realised": lost.complement() if lost else None,
    }
    if k == keys[0]:
        return out
    diff = differing(samples, keys[0], k)
    differ = [j for j, st in enumerate(base.steps) if st in diff]
    alike = [j for j in range(len(base.steps)) if j not in differ]

    def vs(cols: list[int] | None, what: str) -> Interval | None:
        return step_median_share(minus(base.defaults, own, cols), base.saving, f"tune/{k}/{what}")

    total = vs(None, "diff")
    called_as = verdict(total, EQUIVALENT, center=0.0)
    return out | {
        "vs_defaults": total,
        "verdict": called_as,
        "reps_to_decide": reps_to_decide(total, EQUIVALENT, center=0.0) if called_as == "undecided" else None,
        "differing_steps": len(diff),
        "vs_defaults_differing": vs(differ, "ndiff"),
        "vs_defaults_alike": vs(alike, "alike"),
    }


def tune_results(
    options: list[Option],
    on_front: list[Option],
    chosen: list[CacheSetting],
    samples: list[ConversationSample],
    ram_bytes: int | None,
    version: str = "",
) -> list[TuneSetting]:
    """Every setting's row: the grid's predictions, and for the measured ones their intervals over reps. The
    recommendation as the evidence decides it (`recommend`)."""
    keys = [setting_key(s) for s in chosen]
    measured = {s.setting for s in samples if s.arm == "today"}
    base = Baseline.of(samples, keys[0]) if keys else None
    front_keys = {o.key for o in on_front}
    rows = []
    for o in options:
        k = o.key
        rows.append(
            TuneSetting(
                key=k,
                flags=" ".join(o.setting.flags()),
                server_version=version,
                checkpoints=o.setting.checkpoints,
                checkpoint_min_step=o.setting.checkpoint_min_step,
                cache_ram_mib=o.setting.cache_ram_mib,
                swa_full=o.setting.swa_full,
                reasoning_preserve=o.setting.reasoning_preserve,
                role="defaults" if keys and k == keys[0] else "candidate" if k in keys else "grid",
                on_front=k in front_keys,
                predicted_prefill_s=o.prefill_s,
                predicted_peak_mib=o.peak_bytes / MIB,
                predicted_reused=o.reused,
                within_budget=ram_bytes is None or o.peak_bytes <= ram_bytes,
                **(measured_fields(samples, keys, o, base) if base and k in keys and k in measured else {}),
            )
        )
    recommend(rows)
    return rows


def _gain(r: TuneSetting) -> float:
    return r.vs_defaults.value if r.vs_defaults else 0.0


def gaining(r: TuneSetting) -> tuple[float, float]:
    """The order candidates are weighed in: the gain on the defaults, then the lighter."""
    return _gain(r), -r.predicted_peak_mib


def recommend(rows: list[TuneSetting]) -> None:
    """Mark the recommendation, which the evidence decides: the measured candidate (within --ram) decided better
    than the defaults that gains most; else one decided the same (within EQUIVALENT) that holds less memory, the
    lightest; else the defaults. Defaults beyond --ram: the candidate within it not decided worse that gains most."""
    measured = [r for r in rows if r.role != "grid" and r.realised is not None]
    defaults = next((r for r in measured if r.role == "defaults"), None)
    candidates = [r for r in measured if r.role == "candidate" and r.within_budget]
    better = [r for r in candidates if called(r.verdict, _gain(r)) == "better"]
    lighter = [
        r
        for r in candidates
        if r.verdict == "agree" and defaults is not None and r.predicted_peak_mib < defaults.predicted_peak_mib
    ]
    fits = [r for r in candidates if called(r.verdict, _gain(r)) != "worse"]
    why: RecommendedAs
    if better:
        best, why = max(better, key=gaining), "gain"
    elif lighter:
        best, why = min(lighter, key=lambda r: r.predicted_peak_mib), "less memory"
    elif defaults is not None and defaults.within_budget:
        best, why = defaults, "defaults"
    elif fits:
        best, why = max(fits, key=gaining), "within budget"
    else:
        return
    best.recommended, best.recommended_as = True, why
