"""The trace replay's printer: per task, the steps' measured prefill with a fake prefix against the trace's own."""

from __future__ import annotations

from rich.table import Table

from lab.core.schemas import TraceTaskResult


def replay_table(tasks: list[TraceTaskResult]) -> Table:
    t = Table(title="trace replay: measured optimum prefill (fake prefix) and opt_wall per task")
    for col in ("task", "steps", "failed", "opt prefill s", "baseline prefill s", "decode s", "exec s", "opt_wall s"):
        t.add_column(col, justify="right")

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    for r in tasks:
        t.add_row(
            r.task_id,
            str(r.n_steps),
            str(r.n_failed),
            f(r.measured_opt_prefill_s),
            f(r.baseline_prefill_s),
            f(r.baseline_decode_s),
            f(r.baseline_exec_s),
            f(r.opt_wall_s),
        )
    return t
