"""Agent-trace replay (seed 000 §5): each recorded step is replayed with a fake depth-L prefix and its real
new text, giving the measured `measured_opt_prefill_s` a downstream simulator reads, and per task
opt_wall = measured_opt_prefill + baseline_decode + baseline_exec.

Trace format: JSONL, one `lab.schemas.TraceStep` per line (see docs/trace-format.md).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from lab.engine.contract import TRANSPORT, Timings, check_fake, filler_tokens
from lab.engine.media import ImageStep, LogTail, filler_text, image_tokens, run_image_arm
from lab.engine.models import resolve_projector
from lab.engine.png import make_png, png_size
from lab.engine.server import LlamaServer
from lab.experiments.session import open_session, progress_bar
from lab.runs import RunError, RunFolder, utc_now
from lab.schemas import TraceStep, TraceStepResult, TraceTaskResult
from lab.settings import Settings

STEPS, TASKS = "steps", "tasks"


class TraceError(ValueError):
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
            raise TraceError(f"{path}:{i}: {_why(e)}") from e
        key = (step.task_id, step.step)
        if key in seen:
            raise TraceError(f"{path}:{i}: duplicate step {step.step} of task {step.task_id!r}")
        seen.add(key)
        steps.append(step)
    if not steps:
        raise TraceError(f"{path}: no steps")
    return steps


def _why(e: Exception) -> str:
    if isinstance(e, ValidationError):
        return "; ".join(f"{'.'.join(map(str, x['loc'])) or 'step'}: {x['msg']}" for x in e.errors()[:3])
    return str(e)


def check_replayable(steps: list[TraceStep], ctx_size: int, has_vision: bool, trace: Path) -> None:
    """Refuse before anything starts: screenshots without a projector, depths beyond the context."""
    for s in steps:
        name = f"{trace}: task {s.task_id!r} step {s.step}"
        if s.screenshot and not has_vision:
            raise TraceError(f"{name} has a screenshot ({s.screenshot}) but no vision projector is loaded")
        if s.prior_depth() + (s.only_new or 1) >= ctx_size:
            raise TraceError(f"{name}: prior depth {s.prior_depth()} does not fit server.ctx_size {ctx_size}")


# --- synthetic traces ------------------------------------------------------------------------------

_WORDS = (
    "click",
    "button",
    "window",
    "file",
    "open",
    "save",
    "error",
    "output",
    "test",
    "result",
    "page",
    "scroll",
    "field",
    "value",
    "list",
    "item",
    "form",
    "search",
    "input",
    "submit",
    "dialog",
    "menu",
    "select",
    "option",
    "table",
    "row",
    "column",
    "text",
    "label",
    "link",
    "image",
    "panel",
    "tab",
    "view",
    "run",
    "command",
    "terminal",
    "log",
    "warning",
    "build",
    "pass",
    "fail",
    "check",
    "update",
    "status",
    "message",
    "user",
    "task",
    "step",
    "next",
)


SCREEN_SIZES = ((320, 200), (640, 400), (1280, 800))


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
            text = " ".join(rng.choice(_WORDS) for _ in range(words))
            reply = rng.randint(20, 200)
            shot, img = None, 0
            if screenshots is not None:
                size = SCREEN_SIZES[(t + k) % len(SCREEN_SIZES)]
                shot = screenshots / f"task{t:03d}_step{k}.png"
                img = image_tokens(*size)[0]
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


def replay_image_step(srv: LlamaServer, step: TraceStep, trace_dir: Path, tail: LogTail) -> TraceStepResult:
    """The step's real screenshot, then its text, after a fabricated text prefix of the prior depth."""
    L = step.prior_depth()
    assert step.screenshot is not None
    png = resolve_shot(step.screenshot, trace_dir).read_bytes()
    size = png_size(png)
    new = len(srv.tokenize(step.new_text))
    istep = ImageStep(filler_text(srv, L, seed=L), L, png, size, step.new_text, new)
    r, encode_ms, _ = run_image_arm(srv, "fake", istep, tail)
    t = r.timings
    return TraceStepResult(
        task_id=step.task_id, step=step.step, L=L, new_tokens=istep.expected_new, trace_only_new=step.only_new,
        ok=r.ok, reason=r.reason, measured_opt_prefill_s=t.prompt_ms / 1e3 if t else None,
        fake_ms=t.fake_ms if t else None, cache_n=t.cache_n if t else None, prompt_n=t.prompt_n if t else None,
        baseline_prefill_s=step.baseline_prefill_s, baseline_decode_s=step.baseline_decode_s,
        baseline_exec_s=step.baseline_exec_s, screenshot=step.screenshot, image_tokens=image_tokens(*size)[0],
        encode_ms=encode_ms, t_utc=utc_now(),
    )  # fmt: skip


def resolve_shot(path: str, trace_dir: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else trace_dir / p


def replay_step(srv: LlamaServer, step: TraceStep, n_vocab: int) -> TraceStepResult:
    L = step.prior_depth()
    new_tokens = srv.tokenize(step.new_text)
    prefix = filler_tokens(L, seed=L, n_vocab=n_vocab)  # placeholders: exactly L text positions
    base: dict[str, Any] = {
        "task_id": step.task_id,
        "step": step.step,
        "L": L,
        "new_tokens": len(new_tokens),
        "trace_only_new": step.only_new,
        "baseline_prefill_s": step.baseline_prefill_s,
        "baseline_decode_s": step.baseline_decode_s,
        "baseline_exec_s": step.baseline_exec_s,
        "t_utc": utc_now(),
    }
    body = {"prompt": prefix + new_tokens, "n_fake_cached": L, "n_predict": 1, "cache_prompt": False, "temperature": 0}
    try:
        r = srv.completion(body)
    except httpx.TransportError as e:
        return TraceStepResult(ok=False, reason=f"{TRANSPORT}: {type(e).__name__}: {e}", **base)
    if r.status_code != 200:
        return TraceStepResult(ok=False, reason=f"HTTP {r.status_code}: {r.text[:300]}", **base)
    t = Timings.model_validate(r.json()["timings"])
    reason = check_fake(t, L, len(new_tokens))
    return TraceStepResult(
        ok=not reason,
        reason=reason,
        measured_opt_prefill_s=t.prompt_ms / 1e3,
        fake_ms=t.fake_ms,
        cache_n=t.cache_n,
        prompt_n=t.prompt_n,
        **base,
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


def run_replay(
    settings: Settings, trace: Path | None, resume: RunFolder | None = None, console: Console | None = None
) -> RunFolder:
    console = console or Console()
    if resume is not None:
        trace = resume.path / "raw" / "trace.jsonl"
    if trace is None:
        raise TraceError("give a trace file (or --resume RUN)")
    steps = load_trace(trace)
    # relative screenshot paths are relative to the original trace file (a resume reads the run's copy)
    shots_dir = Path(resume.manifest().params["trace"]).parent if resume is not None else trace.resolve().parent
    shots = [s for s in steps if s.screenshot]
    projector = resolve_projector(settings) if shots else None
    check_replayable(steps, settings.server.ctx_size, has_vision=projector is not None, trace=trace)
    for s in shots:  # refuse before starting: a missing or broken screenshot, named with its step
        assert s.screenshot is not None
        shot = resolve_shot(s.screenshot, shots_dir)
        try:
            png_size(shot.read_bytes())
        except (OSError, ValueError) as e:
            raise TraceError(f"{trace}: task {s.task_id!r} step {s.step}: screenshot {shot}: {e}") from e
    params = {"trace": str(trace.resolve()), "n_steps": len(steps), "server": settings.server.model_dump(mode="json")}
    sess = open_session(settings, "trace_replay", params, resume)
    run = sess.run
    if resume is None:
        shutil.copyfile(trace, run.path / "raw" / "trace.jsonl")
    console.print(f"run folder: {run.path}")
    with run.guard():
        done = {(r.task_id, r.step): r for r in run.read(STEPS, TraceStepResult, tolerate_torn_tail=True)}
        run.rewrite(STEPS, done.values())
        todo = [s for s in steps if (s.task_id, s.step) not in done]
        if todo:
            extra = [*settings.server.extra_args, *(["--mmproj", str(projector)] if projector else [])]
            with sess.server(extra_args=extra) as srv, progress_bar(console) as progress:
                sess.record_server(srv)
                n_vocab = int(srv.props().get("model_vocab_n_tokens") or 0) or 151936
                tail = LogTail(srv.log_path)
                task = progress.add_task("replay", total=len(todo))
                for s in todo:
                    progress.update(task, description=f"{s.task_id} step {s.step}")
                    r = replay_image_step(srv, s, shots_dir, tail) if s.screenshot else replay_step(srv, s, n_vocab)
                    if srv.died(r.reason, TRANSPORT):
                        raise RunError(f"llama-server died replaying {s.task_id} step {s.step}; see {srv.log_path}")
                    run.append(STEPS, [r])
                    done[(s.task_id, s.step)] = r
                    progress.advance(task)
        results = [done[(s.task_id, s.step)] for s in steps]
        tasks = task_results(results)
        run.rewrite(TASKS, tasks)
        run.complete()
    console.print(replay_table(tasks))
    for r in results:
        if not r.ok:
            console.print(f"[red]failed[/red] {r.task_id} step {r.step}: {r.reason}")
    return run


def replay_table(tasks: list[TraceTaskResult]) -> Table:
    t = Table(title="trace replay: measured optimum prefill (fake prefix) and opt_wall per task")
    for col in ("task", "steps", "failed", "opt prefill s", "baseline prefill s", "decode s", "exec s", "opt_wall s"):
        t.add_column(col, justify="right")

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    for r in tasks:
        t.add_row(
            r.task_id, str(r.n_steps), str(r.n_failed), f(r.measured_opt_prefill_s), f(r.baseline_prefill_s),
            f(r.baseline_decode_s), f(r.baseline_exec_s), f(r.opt_wall_s),
        )  # fmt: skip
    return t
