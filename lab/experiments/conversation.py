"""`lab trace replay CONVERSATION`: every step of a recorded (or synthetic) conversation in three arms,
interleaved, with intervals over reps:

    today      the conversation replayed in order to a server configured the way users run it (lab.conversation.
               today): what today's prompt cache achieves, with its reuse and restores from the server's log
    optimum    the fake prefix: only the step's new part, after everything it shares with the step before
    no cache   the baseline: the whole prompt from empty

Lifecycle (the protocol's, lab.experiments.protocol):

    prepare   load the trace (one line per bad step), derive every step's tokens through a lab server's chat
              template and tokenizer, refuse a step beyond the context: nothing is created before
    measure   per rep: a fresh server as users run it (one start per rep: a rep is a whole conversation, and its
              cache must start empty), then per step the three arms in an order rotated by rep and step; the
              controls run on the lab's server (checkpoints and RAM cache off); a rep's samples are appended
              once the rep is whole, so a resumed run keeps its whole reps (lab.runs.RunFolder.keep_whole)
    summary   per step each arm's median prompt ms [95% interval] and whether optimum <= today <= no cache holds
              within the intervals; per task the three totals and the share of the optimum's saving that today's
              server realises, paired by rep
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from rich.console import Console

from lab.conversation.arms import no_cache_step, optimum_step
from lab.conversation.derive import StepTokens, Templater, derive_task
from lab.conversation.load import ConversationError, images, load_conversation
from lab.conversation.today import today_step, users_server
from lab.engine.contract import ContractClient, Step
from lab.engine.imagegrid import ImageGeometry
from lab.engine.server import LlamaServer, LogTail
from lab.experiments.protocol import Experiment, OpenRun, Outcome, RunParts, progress_bar, run_experiment
from lab.models.resolve import resolve_projector
from lab.runs import RunFolder, atomic_write, utc_now
from lab.schemas import (
    ConversationArm,
    ConversationSample,
    ConversationStep,
    ConversationStepResult,
    ConversationTaskResult,
    Interval,
)
from lab.settings import Settings
from lab.stats import median_interval

SAMPLES, STEPS, TASKS = "conversation_samples", "conversation_steps", "conversation_tasks"
ARMS: tuple[ConversationArm, ...] = ("today", "optimum", "no_cache")
Order = Literal["holds", "violated", "-"]


class ConversationReplay(Experiment):
    name = "conversation"
    records = ("server", "model", "mmproj")

    def __init__(self, trace: Path | None = None, reps: int = 3) -> None:
        self.trace, self.reps = trace, reps
        self.projector: Path | None = None
        self.tasks: dict[str, list[StepTokens]] = {}
        self.raw: dict[str, list[ConversationStep]] = {}
        self.optimum: dict[tuple[str, int], Step] = {}
        self.steps: list[ConversationStepResult] = []
        self.totals: list[ConversationTaskResult] = []

    def own_params(self, settings: Settings) -> dict[str, Any]:
        assert self.trace is not None
        return {"trace": str(self.trace.resolve()), "reps": self.reps}

    def restore_own(self, settings: Settings, params: dict[str, Any], run: RunFolder) -> Settings:
        self.trace, self.reps = run.path / "raw" / "conversation.jsonl", int(params["reps"])
        return settings

    def prepare(self, settings: Settings, parts: RunParts) -> None:
        if self.trace is None or not self.trace.is_file():
            raise ConversationError(f"{self.trace}: no such conversation trace" if self.trace else "give a trace")
        assert parts.engine is not None and parts.model is not None
        raw = self.raw = load_conversation(self.trace)
        if any(True for steps in raw.values() for s in steps for m in s.request["messages"] for _ in images(m)):
            self.projector = resolve_projector(settings)
        log = settings.cache_dir / "logs" / "conversation-derive.log"
        with LlamaServer(parts.engine, parts.model, settings.server, log, extra_args=self._extra()) as srv:
            t = Templater(srv, ImageGeometry.of_projector(self.projector) if self.projector else None)
            self.tasks = {k: derive_task(t, v, settings.server.ctx_size, str(self.trace)) for k, v in raw.items()}

    @staticmethod
    def _users(settings: Settings) -> Any:
        """The server as users run it, the user's own server.extra_args included."""
        return users_server(settings.server)

    def _extra(self) -> list[str]:
        return ["--mmproj", str(self.projector)] if self.projector else []

    def measure(self, sess: OpenRun, console: Console) -> Outcome:
        run, settings = sess.run, sess.settings
        assert self.trace is not None
        if not sess.resumed:  # the run's own copy, its images inlined: a resume needs nothing else
            steps = [s for task in self.raw.values() for s in task]
            atomic_write(run.path / "raw" / "conversation.jsonl", "".join(s.model_dump_json() + "\n" for s in steps))
        n_steps = sum(len(v) for v in self.tasks.values())
        whole = len(ARMS) * n_steps
        done = run.keep_whole(SAMPLES, ConversationSample, lambda r: r.rep, lambda _r, rows: len(rows) == whole)
        samples = [r for rows in done.values() for r in rows]
        todo = [r for r in range(self.reps) if r not in done]
        if todo:
            with sess.server(extra_args=self._extra()) as lab_srv, progress_bar(console) as progress:
                sess.record_server(lab_srv)
                t = Templater(lab_srv, ImageGeometry.of_projector(self.projector) if self.projector else None)
                client = ContractClient(lab_srv)
                bar = progress.add_task("conversation", total=len(todo) * n_steps)
                for rep in todo:
                    rows = []
                    for task_steps in self.tasks.values():  # a fresh server per conversation: its cache starts empty
                        log = run.path / "logs" / "today-server.log"
                        today = LlamaServer(sess.engine, sess.model, self._users(settings), log, self._extra())
                        sess.servers.append(today)  # its context switches count in the run's noise
                        with today:
                            rows += self._rep(rep, task_steps, t, client, today, lambda: progress.advance(bar))
                    run.append(SAMPLES, rows)
                    samples += rows
        self.steps, self.totals = summarize(self.tasks, samples)
        run.rewrite(STEPS, self.steps)
        run.rewrite(TASKS, self.totals)
        return Outcome()

    def _rep(
        self, rep: int, steps: list[StepTokens], t: Templater, client: ContractClient, today: LlamaServer, tick: Any
    ) -> list[ConversationSample]:
        """One conversation's steps in one rep, each step's arms in an order rotated by rep and step."""
        tail = LogTail(today.log_path)
        tail.read()
        rows: list[ConversationSample] = []
        for k, st in enumerate(steps):
            shift = (rep + k) % len(ARMS)
            previous = None
            for arm in ARMS[shift:] + ARMS[:shift]:
                if arm != "today" and previous in (None, "today"):
                    warm_up(client.srv)  # a process that wakes after another one's work finds its caches cold
                rows.append(self._sample(arm, rep, st, self._optimum(t, st), client, today, tail))
                previous = arm
            tick()
        return rows

    def _optimum(self, t: Templater, st: StepTokens) -> Step:
        """The step's optimum request, built once per run (it may template and tokenize), not once per rep."""
        key = (st.task_id, st.step)
        if key not in self.optimum:
            self.optimum[key] = optimum_step(t, st)
        return self.optimum[key]

    @staticmethod
    def _sample(
        arm: ConversationArm,
        rep: int,
        st: StepTokens,
        optimum: Step,
        client: ContractClient,
        today: LlamaServer,
        tail: LogTail,
    ) -> ConversationSample:
        if arm == "today":
            return today_step(today, tail, st, rep)
        base: dict[str, Any] = {"task_id": st.task_id, "step": st.step, "rep": rep, "arm": arm, "t_utc": utc_now()}
        step = optimum if arm == "optimum" else no_cache_step(st)
        n_out = st.n_out if arm == "optimum" and st.n_out >= 2 else 0  # the reply, decoded at depth L + new
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

    def present(self, sess: OpenRun, outcome: Outcome, console: Console) -> None:
        from lab.presenters.conversation import replay_tables

        for table in replay_tables(self.steps, self.totals):
            console.print(table)


def warm_up(srv: LlamaServer) -> None:
    """An untimed request of a few tokens with the cache off (the lab's server holds nothing between arms)."""
    srv.completion({"prompt": "warm up the threads", "n_predict": 1, "cache_prompt": False, "temperature": 0.0})


def summarize(
    tasks: dict[str, list[StepTokens]], samples: list[ConversationSample]
) -> tuple[list[ConversationStepResult], list[ConversationTaskResult]]:
    """Per step and per task, from every rep's samples (see the module's docstring)."""
    ms = {(s.task_id, s.step, s.arm, s.rep): s.prompt_ms for s in samples if s.ok and s.prompt_ms is not None}
    steps_out, tasks_out = [], []
    for task, steps in tasks.items():
        reps = sorted({s.rep for s in samples if s.task_id == task})
        for st in steps:
            mine = [s for s in samples if (s.task_id, s.step) == (task, st.step)]
            ivs = {
                a: median_interval([ms[k] for k in ms if k[:3] == (task, st.step, a)], f"{task}/{st.step}/{a}")
                for a in ARMS
            }
            first = next((s for s in sorted(mine, key=lambda s: s.rep) if s.arm == "today"), None)
            steps_out.append(
                ConversationStepResult(
                    task_id=task,
                    step=st.step,
                    prompt_cells=st.cells,
                    common=st.common,
                    new=st.new,
                    diverged_at=st.at_message,
                    reply_tokens=st.n_out,
                    images=st.images,
                    today_ms=ivs["today"],
                    optimum_ms=ivs["optimum"],
                    no_cache_ms=ivs["no_cache"],
                    today_cache_n=first.cache_n if first else None,
                    decode_ms_per_token=median_interval(
                        [s.decode_ms for s in mine if s.decode_ms is not None], f"{task}/{st.step}/decode"
                    ),
                    tool_s=st.tool_s,
                    checkpoint_restores=sum(s.checkpoint_restore for s in mine),
                    ram_cache_restores=sum(s.ram_cache_restore for s in mine),
                    order=order(ivs["optimum"], ivs["today"], ivs["no_cache"]),
                )
            )
        totals = {a: {r: sum(ms.get((task, st.step, a, r), 0.0) for st in steps) / 1e3 for r in reps} for a in ARMS}
        whole = [r for r in reps if all((task, st.step, a, r) in ms for st in steps for a in ARMS)]
        realised = [
            (totals["no_cache"][r] - totals["today"][r]) / (totals["no_cache"][r] - totals["optimum"][r])
            for r in whole
            if totals["no_cache"][r] > totals["optimum"][r]
        ]
        decode = {
            (s.step, s.rep): s.decode_ms * (s.n_out or 0) / 1e3 for s in samples if s.task_id == task and s.decode_ms
        }
        tools = [st.tool_s for st in steps if st.tool_s is not None]
        tasks_out.append(
            ConversationTaskResult(
                task_id=task,
                n_steps=len(steps),
                today_s=median_interval([totals["today"][r] for r in whole], f"{task}/today"),
                optimum_s=median_interval([totals["optimum"][r] for r in whole], f"{task}/optimum"),
                no_cache_s=median_interval([totals["no_cache"][r] for r in whole], f"{task}/no_cache"),
                realised=median_interval(realised, f"{task}/realised"),
                decode_s=median_interval(
                    [sum(v for (_, r), v in decode.items() if r == rep) for rep in whole], f"{task}/decode"
                )
                if decode
                else None,
                tool_s=sum(tools) if tools else None,
            )
        )
    return steps_out, tasks_out


def arm_ms(ms: dict[tuple[str, int, str, int], float], task: str, step: int, arm: str) -> list[float]:
    return [v for (t, k, a, _rep), v in ms.items() if (t, k, a) == (task, step, arm)]


def order(optimum: Interval | None, today: Interval | None, no_cache: Interval | None) -> Order:
    """`holds` when optimum <= today <= no cache within the intervals (no pair wholly the wrong way round)."""
    if optimum is None or today is None or no_cache is None:
        return "-"
    wrong = optimum.lo > today.hi or today.lo > no_cache.hi or optimum.lo > no_cache.hi
    return "violated" if wrong else "holds"


def run_conversation(settings: Settings, trace: Path | None, reps: int, resume: RunFolder | None = None) -> RunFolder:
    return run_experiment(ConversationReplay(trace, reps), settings, resume)
