"""A replay's summary, from its samples (lab.experiments.conversation measures them): per step each arm's
median prompt ms [95% interval, over the reps' processes], whether optimum <= today <= no cache holds within the
intervals, and what today's server reused beside what the policy model predicts; per task the three totals and
the share of the optimum's saving today's server realises, paired by rep; per cause of departure what it cost
in each arm."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

from lab.conversation.arms import ARMS
from lab.conversation.derive import StepTokens
from lab.conversation.prediction import Predicted
from lab.conversation.window import WindowCache
from lab.core.schemas import (
    ConversationArm,
    ConversationCauseResult,
    ConversationSample,
    ConversationStepResult,
    ConversationTaskResult,
    Interval,
    TraceStep,
)
from lab.core.stats import median_interval
from lab.core.units import MIB

Order = Literal["holds", "violated", "-"]


def summarize(
    tasks: dict[str, list[StepTokens]],
    samples: list[ConversationSample],
    window: WindowCache | None = None,
    arms: tuple[ConversationArm, ...] = ARMS,
    predicted: dict[tuple[str, int], Predicted] | None = None,
) -> tuple[list[ConversationStepResult], list[ConversationTaskResult]]:
    """Per step and per task, from every rep's samples of the arms measured (see the module's docstring);
    `window`: today's server's window cache, for whether each step departs beyond it (as the policy model
    predicts: a step not served from the slot as it was)."""
    by_step: dict[tuple[str, int], list[ConversationSample]] = defaultdict(list)
    for s in samples:
        by_step[(s.task_id, s.step)].append(s)
    steps_out, tasks_out = [], []
    proc_of = {s.rep: s.process for s in samples}  # each rep in processes of its own
    for task, steps in tasks.items():
        # prompt seconds per arm and rep, each step's arms by rep
        per_rep: dict[int, dict[tuple[int, str], float]] = defaultdict(dict)
        for k, st in enumerate(steps):
            mine = sorted(by_step[(task, st.step)], key=lambda s: s.rep)
            for s in mine:
                if s.ok and s.prompt_ms is not None:
                    per_rep[s.rep][(st.step, s.arm)] = s.prompt_ms
            row = step_result(task, st, mine, (predicted or {}).get((task, st.step)))
            if window is not None and k > 0 and row.predicted_source is not None:  # held: the previous prompt, reply
                row.window_departure = row.predicted_source != "slot"
            steps_out.append(row)
        tasks_out.append(task_result(task, steps, by_step, per_rep, arms, proc_of))
    return steps_out, tasks_out


def task_result(
    task: str,
    steps: list[StepTokens],
    by_step: dict[tuple[str, int], list[ConversationSample]],
    per_rep: dict[int, dict[tuple[int, str], float]],
    arms: tuple[ConversationArm, ...],
    proc_of: dict[int, int],
) -> ConversationTaskResult:
    """One task's totals from the reps that measured every step in every arm (`per_rep`: prompt ms per (step, arm)
    and rep): each arm's prompt seconds, the share of the optimum's saving today's server realises, the replies'
    decode seconds, and the trace's own recorded seconds."""
    whole = [r for r, got in sorted(per_rep.items()) if len(got) == len(arms) * len(steps)]
    totals = {a: {r: sum(v for (_, arm), v in per_rep[r].items() if arm == a) / 1e3 for r in whole} for a in arms}
    every = {a: totals.get(a, {}) for a in ARMS}
    realised = [
        (every["no_cache"][r] - every["today"][r]) / (every["no_cache"][r] - every["optimum"][r])
        for r in whole
        if set(arms) == set(ARMS) and every["no_cache"][r] > every["optimum"][r]
    ]
    decode: dict[int, float] = defaultdict(float)  # the replies' decode seconds per rep
    for st in steps:
        for s in by_step[(task, st.step)]:
            if s.decode_ms is not None:
                decode[s.rep] += s.decode_ms * (s.n_out or 0) / 1e3
    tools = [st.tool_s for st in steps if st.tool_s is not None]
    procs = [proc_of[r] for r in whole]
    realised_procs = [proc_of[r] for r in whole if realised and every["no_cache"][r] > every["optimum"][r]]
    arm_s = {a: median_interval(list(totals[a].values()), f"{task}/{a}", procs) if a in totals else None for a in ARMS}
    recorded = recorded_seconds(steps)
    return ConversationTaskResult(
        task_id=task,
        n_steps=len(steps),
        today_s=arm_s["today"],
        optimum_s=arm_s["optimum"],
        no_cache_s=arm_s["no_cache"],
        realised=median_interval(realised, f"{task}/realised", realised_procs),
        decode_s=median_interval([decode[r] for r in whole], f"{task}/decode", procs) if decode else None,
        tool_s=sum(tools) if tools else None,
        **recorded,
        opt_wall_s=opt_wall(arm_s["optimum"], recorded),
    )


def cause_results(
    tasks: dict[str, list[StepTokens]], samples: list[ConversationSample]
) -> list[ConversationCauseResult]:
    """Per cause of departure: its steps' prefill in each arm, summed per rep, and today's beyond the optimum's."""
    cause_of = {(st.task_id, st.step): st.cause for steps in tasks.values() for st in steps if st.cause}
    sums: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    for s in samples:
        if s.ok and s.prompt_ms is not None and (cause := cause_of.get((s.task_id, s.step))):
            sums[cause][s.arm][s.rep] += s.prompt_ms / 1e3
    out = []
    for cause in sorted(set(cause_of.values())):
        arm = sums[cause]

        def iv(values: dict[int, float], what: str, c: str = cause) -> Interval | None:
            return median_interval(list(values.values()), f"cause/{c}/{what}", list(values))

        extra = {r: arm["today"][r] - arm["optimum"][r] for r in arm["today"].keys() & arm["optimum"].keys()}
        out.append(
            ConversationCauseResult(
                cause=cause,
                departures=sum(1 for c in cause_of.values() if c == cause),
                today_s=iv(arm["today"], "today"),
                optimum_s=iv(arm["optimum"], "optimum"),
                no_cache_s=iv(arm["no_cache"], "no_cache"),
                today_extra_s=iv(extra, "extra"),
            )
        )
    return out


def recorded_seconds(steps: list[StepTokens]) -> dict[str, float | None]:
    """A step-shape trace's own seconds per task, summed over its steps (None where a step lacks them)."""
    shapes = [st.shape for st in steps if st.shape is not None]
    if not shapes or len(shapes) != len(steps):
        return {}
    out: dict[str, float | None] = {}
    for name in ("baseline_prefill_s", "baseline_decode_s", "baseline_exec_s"):
        values = [getattr(x, name) for x in shapes]
        out[name] = None if any(v is None for v in values) else sum(values)
    return out


def opt_wall(optimum: Interval | None, recorded: dict[str, float | None]) -> Interval | None:
    """A task's wall time with a perfect prefix cache: the optimum's prefill plus the trace's own decode and
    exec seconds (exact numbers: the interval shifts by them)."""
    decode, exec_s = recorded.get("baseline_decode_s"), recorded.get("baseline_exec_s")
    if optimum is None or decode is None or exec_s is None:
        return None
    k = decode + exec_s
    return optimum.model_copy(update={"value": optimum.value + k, "lo": optimum.lo + k, "hi": optimum.hi + k})


def step_result(
    task: str, st: StepTokens, mine: list[ConversationSample], predicted: Predicted | None = None
) -> ConversationStepResult:
    """One step's row from its samples (sorted by rep): each arm's median prompt ms with its interval, and what
    today's server reused beside what the policy model predicts."""
    timed = [s for s in mine if s.ok and s.prompt_ms is not None]
    ivs = {
        a: median_interval(
            [s.prompt_ms for s in timed if s.arm == a],
            f"{task}/{st.step}/{a}",
            [s.process for s in timed if s.arm == a],
        )
        for a in ARMS
    }
    decoded = [s for s in mine if s.decode_ms is not None]
    first = next((s for s in mine if s.arm == "today"), None)
    return ConversationStepResult(
        task_id=task,
        step=st.step,
        prompt_cells=st.cells,
        common=st.common,
        new=st.new,
        diverged_at=st.at_message,
        cause=st.cause,
        reply_tokens=st.n_out,
        images=st.images,
        today_ms=ivs["today"],
        optimum_ms=ivs["optimum"],
        no_cache_ms=ivs["no_cache"],
        today_cache_n=first.cache_n if first else None,
        decode_ms_per_token=median_interval(
            [s.decode_ms for s in decoded], f"{task}/{st.step}/decode", [s.process for s in decoded]
        ),
        tool_s=st.tool_s,
        checkpoint_restores=sum(s.checkpoint_restore for s in mine),
        ram_cache_restores=sum(s.ram_cache_restore for s in mine),
        full_reprocesses=sum(s.full_reprocess for s in mine),
        order=order(ivs["optimum"], ivs["today"], ivs["no_cache"]),
        prompt_n=next((s.prompt_n for s in mine if s.arm == "optimum" and s.prompt_n is not None), None),
        cache_n=next((s.cache_n for s in mine if s.arm == "optimum" and s.cache_n is not None), None),
        **(shape_fields(st.shape) if st.shape is not None else {}),
        **(predicted_fields(predicted, [s for s in mine if s.arm == "today" and s.ok]) if predicted else {}),
    )


def predicted_fields(p: Predicted, today: list[ConversationSample]) -> dict[str, Any]:
    """The model's prediction of a step beside what today's server did and logged (its first rep)."""
    first = today[0] if today else None
    return {
        "predicted_cache_n": p.reuse.cache_n,
        "predicted_source": p.reuse.source,
        "predicted_exact": sum(s.cache_n == p.reuse.cache_n for s in today) if today else None,
        "ram_cache_mib": first.ram_cache_mib if first else None,
        "predicted_ram_cache_mib": None if p.ram_logged is None else p.ram_logged / MIB,
        "checkpoint_mib": first.checkpoint_mib if first else None,
        "predicted_checkpoint_mib": None if p.checkpoint_made is None else p.checkpoint_made / MIB,
        "predicted_held_mib": p.held_bytes / MIB,
    }


def shape_fields(shape: TraceStep) -> dict[str, Any]:
    """What a step-shape trace recorded of a step, kept beside what the replay measured."""
    keys = ("baseline_prefill_s", "baseline_decode_s", "baseline_exec_s", "screenshot")
    return {"trace_only_new": shape.only_new, **{k: getattr(shape, k) for k in keys}}


def order(optimum: Interval | None, today: Interval | None, no_cache: Interval | None) -> Order:
    """`holds` when optimum <= today <= no cache within the intervals (no pair wholly the wrong way round)."""
    if optimum is None or today is None or no_cache is None:
        return "-"
    wrong = optimum.lo > today.hi or today.lo > no_cache.hi or optimum.lo > no_cache.hi
    return "violated" if wrong else "holds"
