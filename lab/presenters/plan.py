"""The plan's printers: the predicted wall time per arm for the lab's design beside the per-rep prefill one
(`--plan`), the reps a `--budget` affords, and the plan at the reps each point is predicted to need (the CLI
passes the plan lab.experiments.sweep.planning drafted)."""

from __future__ import annotations

from rich.table import Table

from lab.measure.plan import Plan, fmt_duration, plan_line


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


def budget_line(budget: str, max_reps: int) -> str:
    """`--budget`: the reps it affords."""
    return f"--budget {budget}: up to {max_reps} reps per point"


def predicted_line(predicted: Plan, sides: int = 1) -> str:
    """The plan at the reps each point is predicted to need; `sides` configurations interleaved (`--vs`)."""
    both = f"{sides} configurations interleaved, each costing what A does: " if sides > 1 else ""
    return f"plan: {both}{plan_line(predicted)}"
