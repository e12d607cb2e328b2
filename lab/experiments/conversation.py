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
    summary   lab.conversation.summary, from the samples: per step each arm's median prompt ms [95% interval]
              and whether optimum <= today <= no cache holds; per task the three totals and the share of the
              optimum's saving that today's server realises, paired by rep; per cause what it cost
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any, ClassVar

from rich.console import Console

from lab.conversation.arms import ARMS, no_cache_step, optimum_step
from lab.conversation.cache_setting import CacheSetting, todays_setting
from lab.conversation.derive import StepTokens, Templater, derive_tasks
from lab.conversation.load import ConversationError, is_conversation, load_conversation
from lab.conversation.prediction import Predicted, predict_conversation
from lab.conversation.rules import PIN, rules_for
from lab.conversation.shapes import derive_shapes, load_trace, step_for
from lab.conversation.summary import cause_results, summarize
from lab.conversation.today import sample_base, setting_overrides, today_step, warm_step
from lab.conversation.window import WindowCache
from lab.core.console import progress_bar
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
    TraceStep,
)
from lab.core.schemas.raw import CONVERSATION_CAUSES, CONVERSATION_SAMPLES, CONVERSATION_STEPS, CONVERSATION_TASKS
from lab.core.settings import Settings
from lab.core.stats import rotated
from lab.engine.build import EngineInfo
from lab.engine.contract import ContractClient, Step
from lab.engine.server import LlamaServer, LogTail, mmproj_args
from lab.engine.serverflags import ServerDefaults, read_defaults, users_server
from lab.experiments.protocol import Experiment, OpenRun, Outcome, RunParts
from lab.models.hparams import HparamsError

ArmKey = tuple[ConversationArm, str]  # an arm, and for today's the setting's key ("": the replay's own)


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
        self.unpreserved: dict[str, list[StepTokens]] | None = None  # as --no-reasoning-preserve renders them
        self.raw: dict[str, list[ConversationStep]] = {}
        self.optimum: dict[tuple[str, int], Step] = {}
        self.steps: list[ConversationStepResult] = []
        self.totals: list[ConversationTaskResult] = []
        self.window: WindowCache | None = None  # today's server's window cache (sliding-window models)
        self.memory: dict[str, Any] = {}  # what today's server's caches hold, from its log
        self.derive_log: Path | None = None  # the server that derived the steps, before the run folder existed
        self.predicted: dict[tuple[str, int], Predicted] = {}  # today's reuse, as the policy model predicts it
        self.todays: dict[str, CacheSetting] = {}  # today's settings by key ("": conversation.*)
        self.server_defaults: ServerDefaults | None = None  # today's server's own, from its --help
        self.rules = PIN  # how its version's prompt cache behaves (lab.conversation.rules)
        self.today_engine: EngineInfo | None = None  # the run's engine, or its server replaced by the user's own
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
        self.image_pos, self.unpreserved = derived.image_pos, derived.unpreserved
        self.today_engine = parts.engine
        if (binary := settings.conversation.today_server) is not None:  # the user's own server as today's
            b, self.server_defaults = users_server(binary)
            self.today_engine = parts.engine.model_copy(update={"server": b, "lib_dir": b.parent})
        else:
            self.server_defaults = read_defaults(parts.engine.server, parts.engine.lib_dir)
        self.rules = rules_for(self.server_defaults.version)
        mine = todays_setting(settings.conversation, settings.server, self.server_defaults)
        meta = read_gguf_metadata(parts.model)
        self.window = WindowCache.of(meta, mine.ubatch, settings.server.ctx_size, mine.swa_full)
        if "today" in self.arms:
            self.todays = self.todays or {"": mine}
            own = self.todays[next(iter(self.todays))]
            with contextlib.suppress(UsageError, HparamsError):  # a memory layout the policy does not model
                ctx = settings.server.ctx_size
                tasks = self.tasks_for(own)
                self.predicted = predict_conversation(tasks, meta, own, ctx, self.image_pos, self.rules)

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
        today = {**self.memory, **self._today_record(own)}
        return Outcome(results={"today_server": today} if today else {})

    def _today_record(self, own: str) -> dict[str, Any]:
        """Which server today's arm ran (its --version) and the flags it ran with."""
        if own not in self.todays or self.server_defaults is None:
            return {}
        binary = str(self.today_engine.server) if self.today_engine else None
        return {"version": self.server_defaults.version, "binary": binary, "setting": vars(self.todays[own])}

    def arm_keys(self) -> list[ArmKey]:
        """The arms a step is measured in: today's once per setting (its key), then the controls."""
        today: list[ArmKey] = [("today", k) for k in self.todays] if "today" in self.arms else []
        return [*today, *((a, "") for a in self.arms if a != "today")]

    def tasks_for(self, setting: CacheSetting) -> dict[str, list[StepTokens]]:
        """The steps as today's server under `setting` renders them (without earlier reasoning on
        --no-reasoning-preserve)."""
        if setting.reasoning_preserve is False and self.unpreserved is not None:
            return self.unpreserved
        return self.tasks

    def _today(self, sess: OpenRun) -> dict[str, LlamaServer]:
        """Today's servers, one per setting (the replay's own: conversation.*), not started yet."""
        out = {}
        for key, setting in self.todays.items():
            over = setting_overrides(setting, sess.settings.conversation)
            over["extra_args"] = [*over["extra_args"], *mmproj_args(self.projector)]
            log = f"today-{key}.log" if key else "today-server.log"
            out[key] = sess.server(log=log, engine=self.today_engine, **over)
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
                    mine = self.tasks_for(self.todays[key])[st.task_id][k]  # as this setting's server renders it
                    rows.append(today_step(today[key], tails[key], mine, rep).model_copy(update={"setting": key}))
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
