"""What `lab trace tune` will cost, from the host's rates, printed before anything is measured."""

from __future__ import annotations

from dataclasses import dataclass

from lab.conversation.derive import cells
from lab.experiments.tune.grid import Option
from lab.measure.plan import Rates, fmt_duration


@dataclass(frozen=True)
class TunePlan:
    """What measuring costs, predicted from the host's rates: seconds per rep by part, and in all."""

    reps: int
    settings: int
    tasks: int
    controls_s: float  # the optimum and no cache, every step
    today_s: float  # today's server, every setting: each step's prompt past its reuse and its reply held
    starts_s: float  # today's servers started (one per setting and task) and the lab's own

    @property
    def total_s(self) -> float:
        return self.reps * (self.controls_s + self.today_s + self.starts_s)

    def describe(self, took_s: float | None = None) -> str:
        took = f"; it took {fmt_duration(took_s)} ({took_s / self.total_s:.2f}x the plan)" if took_s else ""
        return (
            f"plan: {self.reps} reps x ({self.settings} settings x {self.tasks} tasks of today's server, the optimum "
            f"and no cache): about {fmt_duration(self.total_s)} (per rep: controls {self.controls_s:.1f} s, "
            f"today's {self.today_s:.1f} s, server starts {self.starts_s:.1f} s){took}"
        )


def tune_plan(chosen: list[Option], rates: Rates, reps: int) -> TunePlan:
    """Per rep: every step's optimum (its new part) and no cache (the defaults' rendering); for every setting each
    step's prompt (as its server renders it) past the predicted reuse and its reply held; the servers started
    (each task's side by side)."""
    tasks = chosen[0].tasks if chosen else {}
    steps = [st for v in tasks.values() for st in v]
    controls = sum(rates.ms(st.common, st.cells) + rates.ms(0, st.cells) for st in steps) / 1e3
    today = 0.0
    for o in chosen:
        for st in (st for v in o.tasks.values() for st in v):
            today += rates.ms(o.cache_n[(st.task_id, st.step)], st.cells) + rates.ms(st.cells, cells(st.held))
    start = rates.process_start_s or 1.0
    return TunePlan(reps, len(chosen), len(tasks), controls, today / 1e3, start * (1 + len(chosen) * len(tasks)))
