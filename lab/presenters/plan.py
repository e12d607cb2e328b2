"""The plan's printers: the predicted wall time per arm for the lab's design beside the per-rep prefill one
(`--plan`), and `--plan` / `--budget` themselves."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from lab.core.settings import Settings
from lab.experiments.planning import budget_reps, newest_sweep_points, plans, predicted_plan, rates_for
from lab.experiments.protocol import resolve_parts
from lab.measure.plan import Plan, Where, fmt_duration, parse_duration, plan_line


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


def plan_first(
    settings: Settings, where: Where, show: bool, budget: str | None, console: Console, sides: int = 1
) -> Settings | None:
    """`--plan` (print the plan and measure nothing: returns None) and `--budget` (the reps it affords); `sides`:
    2 for an interleaved run of two configurations (`--vs`), each assumed to cost what the first does."""
    if not show and budget is None:
        return settings
    rates = rates_for(settings)
    if budget is not None:
        settings = budget_reps(settings, rates, where, parse_duration(budget))
        console.print(f"--budget {budget}: up to {settings.sweep.max_reps} reps per point", highlight=False)
    old, new = plans(settings, rates, where)
    console.print(plan_table(old, new))
    parts = resolve_parts(settings, needs_engine=True)
    before = newest_sweep_points(settings.runs_dir, parts.model_record["sha256"], parts.target.name)
    predicted = predicted_plan(settings, rates, where, *before).times(sides)
    both = f"{sides} configurations interleaved, each costing what A does: " if sides > 1 else ""
    console.print(f"plan: {both}{plan_line(predicted)}", highlight=False)
    return None if show else settings
