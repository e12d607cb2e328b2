"""Agent-trace replay: each recorded step is replayed with a fake depth-L prefix and its real
new text, giving the measured `measured_opt_prefill_s` a downstream simulator reads, and per task
opt_wall = measured_opt_prefill + baseline_decode + baseline_exec.

Trace format: JSONL, one `lab.core.schemas.TraceStep` per line (see docs/trace-format.md).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console

from lab.conversation.synth import AGENT_WORDS, SCREEN_SIZES
from lab.core.errors import LabError, validation_line
from lab.core.runs import RunFolder, utc_now
from lab.core.schemas import TraceStep, TraceStepResult, TraceTaskResult
from lab.core.schemas.raw import TRACE_STEPS, TRACE_TASKS
from lab.core.settings import Settings
from lab.core.stats import median_interval
from lab.engine.contract import ContractClient, Step, filler_tokens, text_step
from lab.engine.imagegrid import TINY_GEOMETRY, ImageGeometry
from lab.engine.media import filler_text, image_step
from lab.engine.png import make_png, png_size
from lab.engine.server import LlamaServer, mmproj_args
from lab.experiments.protocol import Experiment, OpenRun, Outcome, RunParts, progress_bar, run_experiment
from lab.models.resolve import resolve_projector


class TraceError(LabError):
    pass


def load_trace(path: Path) -> list[TraceStep]:
    """Every step validated; the first bad line is reported with file and line, nothing is half-loaded."""
    steps: list[TraceStep] = []
    seen: set[tuple[str, int]] = set()
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            step = TraceStep.model_validate(json.loads(line))
            step.prior_depth()
        except (json.JSONDecodeError, ValidationError, ValueError) as e:
            raise TraceError(f"{path}:{i}: {validation_line(e, root='step')}") from e
        key = (step.task_id, step.step)
        if key in seen:
            raise TraceError(f"{path}:{i}: duplicate step {step.step} of task {step.task_id!r}")
        seen.add(key)
        steps.append(step)
    if not steps:
        raise TraceError(f"{path}: no steps")
    return steps


def check_replayable(steps: list[TraceStep], ctx_size: int, has_vision: bool, trace: Path) -> None:
    """Refuse before anything starts: screenshots without a projector, depths beyond the context."""
    for s in steps:
        name = f"{trace}: task {s.task_id!r} step {s.step}"
        if s.screenshot and not has_vision:
            raise TraceError(f"{name} has a screenshot ({s.screenshot}) but no vision projector is loaded")
        if s.prior_depth() + (s.only_new or 1) >= ctx_size:
            raise TraceError(f"{name}: prior depth {s.prior_depth()} does not fit server.ctx_size {ctx_size}")


# --- synthetic traces ------------------------------------------------------------------------------


def synth_trace(
    n_tasks: int = 3,
    n_steps: int = 6,
    seed: int = 0,
    start_depth: int = 1024,
    max_depth: int = 12000,
    screenshots: Path | None = None,
) -> list[TraceStep]:
    """A plausible agent trace: a system prompt of `start_depth` tokens, then steps that each append an
    observation (tool output, 40-400 words) and a model reply; the prior depth grows accordingly.
    The baseline decode/exec seconds are synthetic (decode ~20 ms/token, exec 0.2-3 s).
    screenshots: a directory; each step then also appends a generated screenshot (sizes rotate) before its
    text. A step never carries two images, so two screenshots are always separated by text (mtmd merges
    adjacent same-size images into one chunk). The prior depth L counts KV cells: an image's tokens."""
    rng = random.Random(seed)
    out: list[TraceStep] = []
    for t in range(n_tasks):
        L = start_depth + rng.randrange(0, 512)
        for k in range(n_steps):
            words = rng.randint(40, 400)
            text = " ".join(rng.choice(AGENT_WORDS) for _ in range(words))
            reply = rng.randint(20, 200)
            shot, img = None, 0
            if screenshots is not None:
                size = SCREEN_SIZES[(t + k) % len(SCREEN_SIZES)]
                shot = screenshots / f"task{t:03d}_step{k}.png"
                img = TINY_GEOMETRY.tokens(*size)[0]
            if L + img + words + reply >= max_depth:
                break
            if shot is not None:
                shot.parent.mkdir(parents=True, exist_ok=True)
                shot.write_bytes(make_png(*SCREEN_SIZES[(t + k) % len(SCREEN_SIZES)], seed=seed * 1000 + t * 100 + k))
            out.append(
                TraceStep(
                    task_id=f"task{t:03d}",
                    step=k,
                    L=L,
                    only_new=words,
                    new_text=text,
                    screenshot=f"{screenshots.name}/{shot.name}" if screenshots and shot else None,  # trace-relative
                    baseline_decode_s=round(reply * 0.02, 4),
                    baseline_exec_s=round(rng.uniform(0.2, 3.0), 3),
                )
            )
            L += img + words + reply
    return out


def write_trace(steps: list[TraceStep], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(s.model_dump_json(exclude_none=True) + "\n" for s in steps))


# --- replay ----------------------------------------------------------------------------------------


def step_for(
    srv: LlamaServer, step: TraceStep, shots_dir: Path, n_vocab: int, geom: ImageGeometry | None = None
) -> Step:
    """A recorded step as the contract client sends it: L placeholder positions, then its real new text (and
    before that its real screenshot, after a text prefix of exactly L tokens)."""
    L = step.prior_depth()
    if step.screenshot is None:
        return text_step(filler_tokens(L, seed=L, n_vocab=n_vocab), srv.tokenize(step.new_text))
    assert geom is not None, "a screenshot step needs the projector's geometry"
    png = resolve_shot(step.screenshot, shots_dir).read_bytes()
    return image_step(srv, geom, filler_text(srv, L, seed=L), L, png, png_size(png), step.new_text)


def resolve_shot(path: str, trace_dir: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else trace_dir / p


def replay_step(
    client: ContractClient,
    step: TraceStep,
    shots_dir: Path,
    n_vocab: int,
    geom: ImageGeometry | None = None,
    reps: int = 1,
) -> TraceStepResult:
    """One recorded step replayed with a fake depth-L prefix, `reps` times: the median and, from two reps on, its
    95% interval."""
    s = step_for(client.srv, step, shots_dir, n_vocab, geom)
    results = []
    for _ in range(reps):
        results.append(client.run_arm_alive("fake", s, what=f"{step.task_id} step {step.step}"))
    bad = next((r for r in results if not r.ok), None)
    seconds = [r.timings.prompt_ms / 1e3 for r in results if r.ok and r.timings]
    iv = median_interval(seconds, key=f"{step.task_id}/{step.step}") if bad is None else None
    t = results[-1].timings
    png = resolve_shot(step.screenshot, shots_dir).read_bytes() if step.screenshot else None
    return TraceStepResult(
        task_id=step.task_id,
        step=step.step,
        L=s.L,
        new_tokens=s.new,
        trace_only_new=step.only_new,
        ok=bad is None,
        reason=bad.reason if bad else "",
        measured_opt_prefill_s=iv.value if iv else None,
        measured_ci=iv if iv and iv.n > 1 else None,
        reps=len(seconds),
        fake_ms=t.fake_ms if t else None,
        cache_n=t.cache_n if t else None,
        prompt_n=t.prompt_n if t else None,
        baseline_prefill_s=step.baseline_prefill_s,
        baseline_decode_s=step.baseline_decode_s,
        baseline_exec_s=step.baseline_exec_s,
        screenshot=step.screenshot,
        image_tokens=geom.tokens(*png_size(png))[0] if png and geom else None,
        encode_ms=results[-1].encode_ms,
        t_utc=utc_now(),
    )


def task_results(results: list[TraceStepResult]) -> list[TraceTaskResult]:
    by_task: dict[str, list[TraceStepResult]] = {}
    for r in results:
        by_task.setdefault(r.task_id, []).append(r)
    out = []
    for task_id, rs in by_task.items():
        ok = [r for r in rs if r.ok and r.measured_opt_prefill_s is not None]
        opt = sum(r.measured_opt_prefill_s or 0.0 for r in ok)
        dec = _sum_known([r.baseline_decode_s for r in rs])
        exe = _sum_known([r.baseline_exec_s for r in rs])
        pre = _sum_known([r.baseline_prefill_s for r in rs])
        complete = len(ok) == len(rs)
        out.append(
            TraceTaskResult(
                task_id=task_id,
                n_steps=len(rs),
                n_failed=len(rs) - len(ok),
                measured_opt_prefill_s=opt,
                baseline_prefill_s=pre,
                baseline_decode_s=dec,
                baseline_exec_s=exe,
                opt_wall_s=opt + dec + exe if complete and dec is not None and exe is not None else None,
                baseline_wall_s=pre + dec + exe if pre is not None and dec is not None and exe is not None else None,
            )
        )
    return out


def _sum_known(vals: list[float | None]) -> float | None:
    return None if any(v is None for v in vals) else sum(v for v in vals if v is not None)


class TraceReplay(Experiment):
    """Replay of a recorded agent trace, one fake-prefix request per step."""

    name = "trace_replay"
    records = ("server", "model", "mmproj")

    def __init__(self, trace: Path | None, reps: int = 1) -> None:
        self.trace = trace
        self.reps = reps
        self.steps: list[TraceStep] = []
        self.shots_dir: Path | None = None
        self.projector: Path | None = None
        self.geometry: ImageGeometry | None = None
        self.results: list[TraceStepResult] = []
        self.tasks: list[TraceTaskResult] = []

    def own_params(self, settings: Settings) -> dict[str, Any]:
        assert self.trace is not None
        return {"trace": str(self.trace.resolve()), "n_steps": len(self.steps), "reps": self.reps}

    def restore_own(self, settings: Settings, params: dict[str, Any], run: RunFolder) -> Settings:
        self.trace = run.path / "raw" / "trace.jsonl"  # the run's own copy: the original may have moved on
        self.reps = int(params.get("reps", 1))
        self.shots_dir = Path(params["trace"]).parent  # relative screenshots are relative to the original
        return settings

    def prepare(self, settings: Settings, parts: RunParts) -> None:
        """Refuse before anything starts: a bad trace line, screenshots without a projector or a broken
        screenshot, depths beyond the context."""
        if self.trace is None:
            raise TraceError("give a trace file (or --resume RUN)")
        if not self.trace.is_file():
            raise TraceError(f"{self.trace}: no such trace file")
        self.steps = load_trace(self.trace)
        if self.shots_dir is None:  # relative screenshot paths are relative to the trace file
            self.shots_dir = self.trace.resolve().parent
        shots = [s for s in self.steps if s.screenshot]
        self.projector = resolve_projector(settings) if shots else None
        self.geometry = ImageGeometry.of_projector(self.projector) if self.projector else None
        check_replayable(self.steps, settings.server.ctx_size, self.projector is not None, self.trace)
        for s in shots:
            assert s.screenshot is not None
            shot = resolve_shot(s.screenshot, self.shots_dir)
            try:
                png_size(shot.read_bytes())
            except (OSError, ValueError) as e:
                raise TraceError(f"{self.trace}: task {s.task_id!r} step {s.step}: screenshot {shot}: {e}") from e

    def measure(self, sess: OpenRun, console: Console) -> Outcome:
        run = sess.run
        assert self.trace is not None and self.shots_dir is not None
        if not sess.resumed:
            run.write_raw("trace.jsonl", self.trace.read_bytes())
        shots_dir = self.shots_dir
        done = run.finished_points(TRACE_STEPS, [], lambda r: (r.task_id, r.step))
        todo = [s for s in self.steps if (s.task_id, s.step) not in done]
        if todo:  # OpenRun.server puts the user's server.extra_args first
            extra = mmproj_args(self.projector)
            with sess.server(extra_args=extra) as srv, progress_bar(console) as progress:
                sess.record_server(srv)
                client = ContractClient(srv)
                n_vocab = srv.n_vocab()
                task = progress.add_task("replay", total=len(todo))
                for s in todo:
                    progress.update(task, description=f"{s.task_id} step {s.step}")
                    r = replay_step(client, s, shots_dir, n_vocab, self.geometry, self.reps)
                    run.append(TRACE_STEPS, [r])
                    done[(s.task_id, s.step)] = r
                    progress.advance(task)
        self.results = [done[(s.task_id, s.step)] for s in self.steps]
        self.tasks = task_results(self.results)
        run.rewrite(TRACE_TASKS, self.tasks)
        return Outcome()

    def tables(self) -> dict[str, Any]:
        return {
            "steps": [r.model_dump(mode="json") for r in self.results],
            "tasks": [t.model_dump(mode="json") for t in self.tasks],
        }


def run_replay(
    settings: Settings,
    trace: Path | None,
    resume: RunFolder | None = None,
    console: Console | None = None,
    reps: int = 1,
) -> RunFolder:
    return run_experiment(TraceReplay(trace, reps), settings, resume, console)
