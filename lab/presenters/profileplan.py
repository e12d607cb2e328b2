"""`lab profile --plan`: the profile's predicted wall time per part (lab.measure.profileplan drafts it), what it
leaves out, and the reps a `--budget` affords."""

from __future__ import annotations

from rich.table import Table

from lab.core.console import shown
from lab.measure.plan import fmt_duration
from lab.measure.profileplan import ProfilePlan


def profile_plan_table(plan: ProfilePlan) -> Table:
    p, r = plan.profile, plan.rates
    title = (
        f"profile plan: {len(p.depths)} depths ({depth_list(p.depths)}) reps {plan.reps}, {p.processes} "
        f"processes, chunk {p.chunk}, fill {p.fill}; rates {r.describe()} ({shown(r.source)})"
    )
    t = Table("part", "what it decodes (per process)", title=title)
    t.add_column("time", justify="right")
    for a in plan.parts:
        t.add_row(a.arm, a.what, fmt_duration(a.seconds))
    t.add_row("total", "", fmt_duration(plan.total_s), style="bold")
    return t


def profile_plan_notes(plan: ProfilePlan, sides: int = 1) -> list[str]:
    """What the table leaves out or rests on: the depths llama-bench references, the deeper ones it does not,
    the process starts, more processes (max_processes), a second configuration (`--vs`)."""
    p, out = plan.profile, []
    if plan.unreferenced != p.depths:
        out.append(f"llama-bench runs at bench_depths {depth_list(p.bench_depths)} (real_max_depth {p.real_max_depth})")
    if plan.unreferenced:
        check = f"up to {max(p.bench_depths)}" if p.check_depth is not None else "off here: --real-check"
        no_bench = "llama-bench is off (--no-bench)" if not p.bench_check else "deeper than real_max_depth"
        out.append(
            f"the probes at {depth_list(plan.unreferenced)} have no llama-bench reference ({no_bench}): they rest "
            f"on the fake-vs-real check ({check})"
        )
    if plan.rates.process_start_s is None:
        out.append("process starts and model loads are not in it (the rates carry no process_start_s)")
    if plan.bound_s is not None:
        out.append(f"at most {fmt_duration(plan.bound_s)} if it takes all {p.max_processes} processes (max_processes)")
    if sides > 1:
        out.append(
            f"--vs: {sides} configurations interleaved, each costing about this: {fmt_duration(sides * plan.total_s)}"
        )
    return out


def profile_budget_line(budget: str, reps: int | None, one: ProfilePlan) -> str:
    """`--budget`: the reps it affords, or what one rep already takes (`one`: the plan at 1 rep)."""
    if reps is not None:
        return f"--budget {budget}: --reps {reps} (per depth, in each process)"
    return (
        f"--budget {budget}: even --reps 1 takes about {fmt_duration(one.bound_s or one.total_s)}; give more time, "
        "fewer or shallower depths, or a lower --real-max-depth"
    )


def depth_list(depths: list[int]) -> str:
    return ", ".join(map(str, depths)) if depths else "none"
