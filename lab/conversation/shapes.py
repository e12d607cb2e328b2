"""Traces of step shapes: each line a `TraceStep` (a task's step: its prior depth L, its new text, maybe a
screenshot, and the agent's own recorded seconds; docs/trace-format.md), read and checked before anything runs,
synthesised for tests and demos, and derived into the steps the replay measures.

A step-shape trace holds no prompts, only their shapes: the replay measures such a step in the arms that need
none, the optimum (its L fabricated, its new text prefilled) and, when asked, no cache (all L + new prefilled).
Today's server needs the prompts themselves: a recorded conversation (lab.conversation.load).
"""

from __future__ import annotations

import random
from pathlib import Path

from lab.conversation.derive import Derived, StepTokens
from lab.conversation.load import ConversationError, trace_bytes, trace_rows
from lab.conversation.synth import AGENT_WORDS, SCREEN_SIZES
from lab.core.errors import validation_line
from lab.core.schemas import TraceStep
from lab.core.settings import Settings
from lab.engine.build import EngineInfo
from lab.engine.contract import Step, filler_tokens, text_step
from lab.engine.imagegrid import TINY_GEOMETRY, ImageGeometry
from lab.engine.media import filler_text, image_step
from lab.engine.png import make_png, png_size
from lab.engine.server import LlamaServer, adhoc_server, mmproj_args
from lab.models.resolve import resolve_projector


def load_trace(path: Path) -> list[TraceStep]:
    """Every step validated; the first bad line is reported with file and line, nothing is half-loaded."""
    steps: list[TraceStep] = []
    seen: set[tuple[str, int]] = set()
    for i, parsed in trace_rows(path, trace_bytes(path)):
        try:
            step = TraceStep.model_validate(parsed)
            step.prior_depth()
        except (ValueError, RecursionError) as e:  # ValidationError among them
            raise ConversationError(f"{path}:{i}: {validation_line(e, root='step')}") from None
        key = (step.task_id, step.step)
        if key in seen:
            raise ConversationError(f"{path}:{i}: duplicate step {step.step} of task {step.task_id!r}")
        seen.add(key)
        steps.append(step)
    if not steps:
        raise ConversationError(f"{path}: no steps")
    return steps


def check_replayable(steps: list[TraceStep], ctx_size: int, has_vision: bool, trace: Path) -> None:
    """Refuse before anything starts: screenshots without a projector, depths beyond the context."""
    for s in steps:
        name = f"{trace}: task {s.task_id!r} step {s.step}"
        if s.screenshot and not has_vision:
            raise ConversationError(f"{name} has a screenshot ({s.screenshot}) but no vision projector is loaded")
        if s.prior_depth() + (s.only_new or 1) >= ctx_size:
            raise ConversationError(f"{name}: prior depth {s.prior_depth()} does not fit server.ctx_size {ctx_size}")


def derive_shapes(
    settings: Settings, engine: EngineInfo, model: Path, steps: list[TraceStep], trace: Path, shots_dir: Path
) -> Derived:
    """Every step as the replay measures it, through a lab server of the model (its tokenizer, and the settings'
    vision projector when a step has a screenshot): L placeholder cells, then the new part (its screenshot's
    cells and its text's tokens). Refused before anything starts: screenshots without a projector or that do
    not load, depths beyond the context."""
    shots = [s for s in steps if s.screenshot]
    projector = resolve_projector(settings) if shots else None
    check_replayable(steps, settings.server.ctx_size, projector is not None, trace)
    for s in shots:
        assert s.screenshot is not None
        shot = resolve_shot(s.screenshot, shots_dir)
        try:
            png_size(shot.read_bytes())
        except (OSError, ValueError) as e:
            raise ConversationError(f"{trace}: task {s.task_id!r} step {s.step}: screenshot {shot}: {e}") from e
    geom = ImageGeometry.of_projector(projector) if projector else None
    tasks: dict[str, list[StepTokens]] = {}
    with adhoc_server(
        engine, model, settings.server, settings.cache_dir, "trace-derive", mmproj_args(projector)
    ) as srv:
        n_vocab = srv.n_vocab()
        for s in steps:  # in the trace's order
            step = step_for(srv, s, shots_dir, n_vocab, geom)
            st = StepTokens(s.task_id, s.step, [0] * (step.L + step.new), [], common=step.L)
            st.images, st.tool_s, st.shape = (1 if s.screenshot else 0), s.baseline_exec_s, s
            tasks.setdefault(s.task_id, []).append(st)
        return Derived(tasks, projector, srv.log_path)


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
