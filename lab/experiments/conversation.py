"""`lab trace replay TRACE`: the one replay. Every step of a trace in the arms asked for (conversation.arms),
interleaved, with intervals over reps. A recorded (or synthetic) conversation can take all three; a trace of step
shapes (lab.conversation.shapes: a prior depth and the new text, no prompts) the optimum and no cache:

    today      the conversation replayed in order to a server configured the way users run it (lab.conversation.
               today): what today's prompt cache achieves, with its reuse and restores from the server's log
    optimum    the fake prefix: only the step's new part, after everything it shares with the step before
    no cache   the baseline: the whole prompt from empty

Lifecycle (the protocol's, lab.experiments.protocol):

    prepare   load the trace (one line per bad step), derive every step's tokens through a lab server's chat
              template and tokenizer, refuse a step beyond the context: nothing is created before
    measure   per rep, processes of its own: the lab's server for the controls (checkpoints and RAM cache
              off), and per conversation a fresh server as users run it (a rep is a whole conversation, and its
              cache must start empty); per step the three arms in an order rotated by rep and step; a rep's
              samples are appended once the rep is whole, so a resumed run keeps its whole reps
              (lab.core.runs.RunFolder.keep_whole)
    summary   per step each arm's median prompt ms [95% interval, over the reps' processes] and whether
              optimum <= today <= no cache holds within the intervals; per task the three totals and the share
              of the optimum's saving that today's server realises, paired by rep
"""

from __future__ import annotations

import contextlib
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any, ClassVar, Literal

from rich.console import Console

from lab.conversation.arms import no_cache_step, optimum_step
from lab.conversation.derive import StepTokens, Templater, derive_tasks
from lab.conversation.load import ConversationError, is_conversation, load_conversation
from lab.conversation.policy import MIB, CacheSetting, Predicted, predict_conversation
from lab.conversation.shapes import derive_shapes, load_trace, step_for
from lab.conversation.today import sample_base, today_step, users_server, warm_step
from lab.conversation.window import WindowCache
from lab.core.errors import UsageError
from lab.core.gguf_io import read_gguf_metadata
from lab.core.runs import RunFolder
from lab.core.schemas import (
    ConversationArm,
    ConversationCauseResult,
    ConversationSample,
    ConversationStep,
    ConversationStepResult,
    ConversationTaskResult,
    Interval,
    TraceStep,
)
from lab.core.schemas.raw import CONVERSATION_CAUSES, CONVERSATION_SAMPLES, CONVERSATION_STEPS, CONVERSATION_TASKS
from lab.core.settings import Settings
from lab.core.settings_server import ConversationSettings
from lab.core.stats import median_interval, rotated
from lab.engine.contract import ContractClient, Step
from lab.engine.server import LlamaServer, LogTail, mmproj_args
from lab.experiments.protocol import Experiment, OpenRun, Outcome, RunParts, progress_bar, run_experiment
from lab.models.hparams import HparamsError

ARMS: tuple[ConversationArm, ...] = ("today", "optimum", "no_cache")
ArmKey = tuple[ConversationArm, str]  # an arm, and for today's the setting's key ("": the replay's own)
Order = Literal["holds", "violated", "-"]


class Replay(Experiment):
    """A trace replayed in its arms: a conversation, or a trace of step shapes (`shapes`)."""

    name = "conversation"
    records: ClassVar[tuple[str, ...]] = ("server", "model", "mmproj")

    def __init__(self, trace: Path | None = None, reps: int = 3, arms: list[ConversationArm] | None = None) -> None:
        self.trace, self.reps, self.asked = trace, reps, arms
        self.arms: tuple[ConversationArm, ...] = ARMS
        self.shapes = False  # a trace of step shapes (no prompts: no today's arm)
        self.shape_steps: list[TraceStep] = []
        self.shots_dir: Path | None = None  # a step-shape trace's screenshots are relative to the original trace
        self.projector: Path | None = None
        self.tasks: dict[str, list[StepTokens]] = {}
        self.raw: dict[str, list[ConversationStep]] = {}
        self.optimum: dict[tuple[str, int], Step] = {}
        self.steps: list[ConversationStepResult] = []
        self.totals: list[ConversationTaskResult] = []
        self.window: WindowCache | None = None  # today's server's window cache (sliding-window models)
        self.memory: dict[str, Any] = {}  # what today's server's caches hold, from its log
        self.derive_log: Path | None = None  # the server that derived the steps, before the run folder existed
        self.predicted: dict[tuple[str, int], Predicted] = {}  # today's reuse, as the policy model predicts it
        self.todays: dict[str, CacheSetting] = {}  # today's settings by key ("": conversation.*)
        self.samples: list[ConversationSample] = []
        self.causes: list[ConversationCauseResult] = []
        self.image_pos: dict[str, int] = {}  # the positions each image takes (lab.conversation.derive.Templater)
        self.decode_replies = True  # the optimum arm also decodes each step's reply at depth

    def own_params(self, settings: Settings) -> dict[str, Any]:
        assert self.trace is not None
        return {"trace": str(self.trace.resolve()), "reps": self.reps, "arms": list(self.arms), "shapes": self.shapes}

    def restore_own(self, settings: Settings, params: dict[str, Any], run: RunFolder) -> Settings:
        """The run's own copy of its trace (a step-shape trace's screenshots stay beside the original)."""
        self.shapes, self.reps = bool(params.get("shapes")), int(params["reps"])
        self.trace = run.path / "raw" / ("trace.jsonl" if self.shapes else "conversation.jsonl")
        self.shots_dir = Path(params["trace"]).parent if self.shapes else None
        self.asked = list(params.get("arms", ARMS))
        return settings

    def prepare(self, settings: Settings, parts: RunParts) -> None:
        if self.trace is None or not self.trace.is_file():
            raise ConversationError(f"{self.trace}: no such trace" if self.trace else "give a trace (or --resume RUN)")
        assert parts.engine is not None and parts.model is not None
        self.shapes = self.shapes or not is_conversation(self.trace)
        self.arms = replay_arms(self.asked, self.shapes)
        if self.shapes:
            self.shape_steps = load_trace(self.trace)
            self.shots_dir = self.shots_dir or self.trace.resolve().parent
            derived = derive_shapes(settings, parts.engine, parts.model, self.shape_steps, self.trace, self.shots_dir)
        else:
            self.raw = load_conversation(self.trace)
            derived = derive_tasks(settings, parts.engine, parts.model, self.raw, str(self.trace))
        self.tasks, self.projector, self.derive_log = derived.tasks, derived.projector, derived.log
        self.image_pos = derived.image_pos
        today = settings.server.with_overrides(**users_server(settings.conversation))
        meta = read_gguf_metadata(parts.model)
        self.window = WindowCache.of(meta, today.ubatch_size, today.ctx_size, today.swa_full_on)
        if "today" in self.arms:
            self.todays = self.todays or {"": todays_setting(settings)}
            own = self.todays[next(iter(self.todays))]
            with contextlib.suppress(UsageError, HparamsError):  # a memory layout the policy does not model
                self.predicted = predict_conversation(self.tasks, meta, own, today.ctx_size, self.image_pos)

    def measure(self, sess: OpenRun, console: Console) -> Outcome:
        run = sess.run
        assert self.trace is not None
        if not sess.resumed and self.shapes:  # the run's own copy (its screenshots stay beside the original)
            run.write_raw("trace.jsonl", self.trace.read_bytes())
        elif not sess.resumed:  # the run's own copy, its images inlined: a resume needs nothing else
            steps = [s for task in self.raw.values() for s in task]
            run.write_raw("conversation.jsonl", "".join(s.model_dump_json() + "\n" for s in steps))
        if self.derive_log is not None and self.derive_log.exists():  # derived before the run folder existed
            shutil.copyfile(self.derive_log, run.path / "logs" / f"derive-{self.derive_log.name}")
        n_steps = sum(len(v) for v in self.tasks.values())
        whole = len(self.arm_keys()) * n_steps
        done = run.keep_whole(CONVERSATION_SAMPLES, lambda r: r.rep, lambda _r, rows: len(rows) == whole)
        samples = [r for rows in done.values() for r in rows]
        todo = [r for r in range(self.reps) if r not in done]
        if todo:
            with progress_bar(console) as progress:
                bar = progress.add_task("conversation", total=len(todo) * n_steps)
                for rep in todo:  # each rep in processes of its own: a process is a level of variance of its own
                    self.optimum.clear()  # its requests carry their server's media marker
                    with sess.server(extra_args=mmproj_args(self.projector)) as lab_srv:
                        sess.record_server(lab_srv)
                        t = Templater(lab_srv, self.projector)
                        client = ContractClient(lab_srv)
                        rows = []
                        for task_steps in self.tasks.values():  # a fresh today's server per conversation: empty cache
                            with contextlib.ExitStack() as stack:
                                servers = self._today(sess)
                                for srv in servers.values():  # launched side by side, then each waited for
                                    stack.callback(srv.stop)
                                    srv.launch()
                                today = {k: srv.start() for k, srv in servers.items()}
                                if "" in today:
                                    self.memory = today_memory(today[""])
                                rows += self._rep(rep, task_steps, t, client, today, lambda: progress.advance(bar))
                    run.append(CONVERSATION_SAMPLES, rows)
                    samples += rows
        own = next(iter(self.todays), "")  # the tables are the replay's own setting's (tune adds the others)
        mine = [x for x in samples if x.arm != "today" or x.setting == own]
        self.steps, self.totals = summarize(self.tasks, mine, self.window, self.arms, self.predicted)
        self.causes = cause_results(self.tasks, mine)
        run.rewrite(CONVERSATION_CAUSES, self.causes)
        self.samples = samples
        run.rewrite(CONVERSATION_STEPS, self.steps)
        run.rewrite(CONVERSATION_TASKS, self.totals)
        return Outcome(results={"today_server": self.memory} if self.memory else {})

    def arm_keys(self) -> list[ArmKey]:
        """The arms a step is measured in: today's once per setting (its key), then the controls."""
        today: list[ArmKey] = [("today", k) for k in self.todays] if "today" in self.arms else []
        return [*today, *((a, "") for a in self.arms if a != "today")]

    def _today(self, sess: OpenRun) -> dict[str, LlamaServer]:
        """Today's servers, one per setting (the replay's own: conversation.*), not started yet."""
        out = {}
        for key, setting in self.todays.items():
            over = setting_overrides(setting, sess.settings.conversation)
            over["extra_args"] = [*over["extra_args"], *mmproj_args(self.projector)]
            out[key] = sess.server(log=f"today-{key}.log" if key else "today-server.log", **over)
        return out

    def _rep(
        self,
        rep: int,
        steps: list[StepTokens],
        t: Templater,
        client: ContractClient,
        today: dict[str, LlamaServer],
        tick: Any,
    ) -> list[ConversationSample]:
        """One conversation's steps in one rep, each step's arms (today's once per setting) in an order rotated by
        rep and step. Each today's new process is warmed up first, leaving its caches empty
        (lab.conversation.today.warm_step): its first request would pay its start-up, and with a projector, its
        vision encoder's first image."""
        tails = {}
        for key, srv in today.items():
            ContractClient(srv).warm_up(step=warm_step(srv, self.projector))
            tails[key] = LogTail(srv.log_path)
            tails[key].read()
        rows: list[ConversationSample] = []
        for k, st in enumerate(steps):
            previous = None
            for arm, key in rotated(self.arm_keys(), rep + k):
                if arm != "today" and previous in (None, "today"):
                    client.warm_up()  # after the other process's work
                if arm == "today":
                    rows.append(today_step(today[key], tails[key], st, rep).model_copy(update={"setting": key}))
                else:
                    rows.append(self._sample(arm, rep, st, self._optimum(t, st), client, self.decode_replies))
                previous = arm
            tick()
        return rows

    def _optimum(self, t: Templater, st: StepTokens) -> Step:
        """The step's optimum request, built once per run (it may template and tokenize), not once per rep."""
        key = (st.task_id, st.step)
        if key not in self.optimum and st.shape is not None:
            assert self.shots_dir is not None
            self.optimum[key] = step_for(t.srv, st.shape, self.shots_dir, t.srv.n_vocab(), t.geometry)
        elif key not in self.optimum:
            self.optimum[key] = optimum_step(t, st)
        return self.optimum[key]

    @staticmethod
    def _sample(
        arm: ConversationArm, rep: int, st: StepTokens, optimum: Step, client: ContractClient, decode: bool
    ) -> ConversationSample:
        base = sample_base(st, rep, arm)
        # no cache: all of the prompt from empty (a step shape's optimum request holds it all: L placeholders, new)
        step = optimum if arm == "optimum" or st.shape is not None else no_cache_step(st)
        n_out = st.n_out if decode and arm == "optimum" and st.n_out >= 2 else 0  # the reply, decoded at depth
        what = f"{st.task_id} step {st.step}"
        a = client.run_arm_alive("fake" if arm == "optimum" else "baseline", step, what=what, n_out=n_out)
        tm = a.timings
        return ConversationSample(
            **base,
            ok=a.ok,
            reason=a.reason,
            prompt_ms=tm.prompt_ms if tm else None,
            prompt_n=tm.prompt_n if tm else None,
            cache_n=tm.cache_n if tm else None,
            n_out=n_out or None,
            decode_ms=tm.decode_ms if tm and n_out else None,
        )

    def tables(self) -> dict[str, Any]:
        return {
            "steps": [s.model_dump(mode="json") for s in self.steps],
            "tasks": [t.model_dump(mode="json") for t in self.totals],
            "causes": [c.model_dump(mode="json") for c in self.causes],
        }


def today_memory(srv: LlamaServer) -> dict[str, Any]:
    """What today's server's attention caches hold (MiB, both children of a sliding-window one) and its window
    cache's cells, as its log says (--swa-full's cost is the difference)."""
    c = srv.config
    return {"kv_mib": c.kv_mib, "kv_cells": c.kv_cells, "swa_cells": c.swa_cells, "swa_full": c.swa_full}


def replay_arms(asked: list[ConversationArm] | None, shapes: bool) -> tuple[ConversationArm, ...]:
    """The arms a replay measures, in their order: those asked for, or every arm the trace allows (a step-shape
    trace: the optimum alone; its no cache prefills every step's whole depth, so it is measured when asked)."""
    if asked is None:
        return ("optimum",) if shapes else ARMS
    if shapes and "today" in asked:
        raise UsageError("--arms today: today's server replays recorded prompts; a trace of step shapes has none")
    if not asked:
        raise UsageError("--arms: give at least one of today, optimum, no_cache")
    return tuple(a for a in ARMS if a in asked)


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
    proc_of = {s.rep: s.process for s in samples}  # each rep in processes of its own (0 for all: runs before)
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
        arm_s = {
            a: median_interval(list(totals[a].values()), f"{task}/{a}", procs) if a in totals else None for a in ARMS
        }
        recorded = recorded_seconds(steps)
        tasks_out.append(
            ConversationTaskResult(
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
        )
    return steps_out, tasks_out


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


def setting_overrides(setting: CacheSetting, conversation: ConversationSettings) -> dict[str, Any]:
    """The server settings of today's server under a cache setting (with the user's own extra flags)."""
    return {
        "checkpoints": setting.checkpoints,
        "checkpoint_min_step": setting.checkpoint_min_step,
        "cache_ram_mib": setting.cache_ram_mib,
        "cache_reuse": setting.cache_reuse,
        "swa_full": setting.swa_full,
        "ubatch_size": setting.ubatch,
        "batch_size": setting.batch,
        "extra_args": list(conversation.extra_args),
    }


def todays_setting(settings: Settings) -> CacheSetting:
    """The cache flags of today's server (conversation.* over the lab server's batch sizes)."""
    c, today = settings.conversation, settings.server.with_overrides(**users_server(settings.conversation))
    return CacheSetting(
        checkpoints=c.checkpoints,
        checkpoint_min_step=c.checkpoint_min_step,
        cache_ram_mib=c.cache_ram_mib,
        cache_reuse=c.cache_reuse,
        swa_full=today.swa_full_on,
        ubatch=today.ubatch_size,
        batch=today.batch_size,
    )


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


def run_conversation(
    settings: Settings, trace: Path | None, reps: int, resume: RunFolder | None = None, console: Console | None = None
) -> RunFolder:
    return run_experiment(Replay(trace, reps, settings.conversation.arms), settings, resume, console)
