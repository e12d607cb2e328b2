"""The plan's printers: the predicted wall time per arm for the lab's design beside the per-rep prefill one, and the
one-line plan a sweep prints as it starts."""

from __future__ import annotations

from rich.table import Table

from lab.plan import (
    Plan,
    fmt_duration,
)


def plan_table(old: Plan, new: Plan) -> Table:
    r = new.rates
    t = Table(title=f"plan: {new.points} points x {new.reps} reps ({new.where}); rates {r.describe()} ({r.source})")
    for c in ("arm", "what it decodes (this lab)", "this lab", "prefill per rep"):
        t.add_column(c, justify="left" if c.startswith(("arm", "what")) else "right")
    before = {a.arm: a.seconds for a in old.arms}
    for a in new.arms:
        t.add_row(a.arm, a.what, fmt_duration(a.seconds), fmt_duration(before[a.arm]) if a.arm in before else "-")
    for arm, s in before.items():
        if arm not in {a.arm for a in new.arms}:
            t.add_row(arm, "(not measured by this lab's design)", "-", fmt_duration(s))
    t.add_row("total", "", fmt_duration(new.total_s), fmt_duration(old.total_s), style="bold")
    return t


def plan_line(new: Plan, actual_s: float | None = None, revised: Plan | None = None) -> str:
    each = sorted(set(new.reps_each))
    if new.bound_s is not None and each:  # a prediction: the reps each point is expected to need, and the bound
        reps = f"{each[0]}" if len(each) == 1 else f"{each[0]}-{each[-1]}"
        line = (
            f"predicted {fmt_duration(new.total_s)} for {new.points} points at {reps} reps each (from "
            f"{new.spread_source}); at most {fmt_duration(new.bound_s)} at {new.reps} reps"
        )
    else:
        line = f"predicted {fmt_duration(new.total_s)} for {new.points} points at up to {new.reps} reps"
    if actual_s is not None and new.total_s:
        line += f"; took {fmt_duration(actual_s)} ({actual_s / new.total_s:.2f}x the prediction"
        if revised is not None and revised.total_s:
            line += f", {actual_s / revised.total_s:.2f}x its revision to {fmt_duration(revised.total_s)}"
        line += ")"
    return line
