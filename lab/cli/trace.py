"""`lab trace synth|replay|record`: agent traces (JSONL of recorded steps), written and replayed with a fake prefix;
real conversations recorded through a pass-through."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lab.cli.common import (
    AsJson,
    CtxSize,
    EngineOpt,
    HostOk,
    Mmproj,
    ModelOpt,
    ReplayResume,
    RunsDir,
    Seed,
    Threads,
    TraceMaxDepth,
    group,
    run_command,
    settings_for,
    str_list,
)

if TYPE_CHECKING:
    from lab.core.settings import Settings
    from lab.experiments.tune import Tune


app = group("agent traces (JSONL of recorded steps)")

TodayServer = Annotated[
    Path | None,
    typer.Option(
        "--today-server",
        help="a llama-server of your own as today's server (conversation.today_server; e.g. a stock build); the "
        "optimum and no cache run the patched release its --version names unless --engine says",
    ),
]


def controls_release(release: str | None, today_server: Path | None) -> str | None:
    """The release the lab's own arms run: --engine, else the one a named today's server's --version names."""
    if release is not None or today_server is None:
        return release
    from lab.engine.serverflags import release_of, users_server

    return release_of(users_server(today_server)[1].version)


@app.command("synth")
def trace_synth(
    out: Annotated[Path, typer.Option("--out", "-o", help="trace JSONL to write")] = Path("trace.jsonl"),
    tasks: Annotated[int, typer.Option("--tasks", min=1)] = 3,
    steps: Annotated[int, typer.Option("--steps", min=1)] = 6,
    start_depth: Annotated[int, typer.Option("--start-depth", min=1)] = 1024,
    max_depth: TraceMaxDepth = 12000,
    seed: Seed = 0,
    screenshots: Annotated[
        bool, typer.Option("--screenshots", help="each step also appends a generated screenshot (next to --out)")
    ] = False,
    conversation: Annotated[
        bool,
        typer.Option(
            "--conversation", help="a conversation trace: chat requests and replies, with evictions and screenshots"
        ),
    ] = False,
    reasoning: Annotated[
        int,
        typer.Option(
            "--reasoning",
            min=0,
            help="a conversation: each reply opens with a reasoning block of this many words, which the agent "
            "drops from the history it sends back (the next prompt departs at the previous reply)",
        ),
    ] = 0,
    text_only: Annotated[
        bool,
        typer.Option("--text-only", help="a conversation without screenshots (a model with no vision projector)"),
    ] = False,
) -> None:
    """Write a synthetic but plausible agent trace (deterministic from the seed)."""
    if conversation:
        from lab.conversation.synth import SynthConversation, synth_conversation

        spec = SynthConversation(tasks=tasks, steps=steps, seed=seed, reasoning_words=reasoning)
        typer.echo(str(synth_conversation(spec, out, shots=not text_only)))
        return
    if text_only:
        from lab.core.errors import UsageError

        raise UsageError("--text-only: only with --conversation (a step-shape trace has screenshots only if asked)")
    if reasoning:
        from lab.core.errors import UsageError

        raise UsageError("--reasoning: only with --conversation (a step-shape trace has no replies)")
    from lab.conversation.shapes import synth_trace, write_trace

    shots = out.parent / f"{out.stem}_screenshots" if screenshots else None
    write_trace(synth_trace(tasks, steps, seed, start_depth, max_depth, shots), out)
    typer.echo(str(out))


@app.command("derive")
def trace_derive(
    trace: Annotated[
        Path, typer.Argument(help="conversation trace JSONL (lab.core.schemas.ConversationStep per line)")
    ],
    ctx_size: CtxSize = None,
    model: ModelOpt = None,
    mmproj: Mmproj = None,
    release: EngineOpt = None,
    as_json: AsJson = False,
) -> None:
    """Each step of a conversation in tokens (the model's own chat template and tokenizer): its prompt, what it
    shares with the step before (the optimum's L), its new part, where it diverges (evictions), its reply."""
    from lab.conversation.derive import derive_conversation
    from lab.core.console import lab_console
    from lab.presenters.conversation import tokens_table

    s = settings_for(None, {"sdist_version": release}, model=model, mmproj=mmproj, server={"ctx_size": ctx_size})
    tasks = derive_conversation(s, trace)
    if as_json:
        import json

        typer.echo(json.dumps([st.record() for steps in tasks.values() for st in steps], indent=1))
    else:
        lab_console().print(tokens_table(tasks))


@app.command("replay")
def trace_replay(
    trace: Annotated[
        Path | None, typer.Argument(help="trace JSONL: a conversation (ConversationStep) or step shapes (TraceStep)")
    ] = None,
    threads: Threads = None,
    ctx_size: CtxSize = None,
    model: ModelOpt = None,
    mmproj: Mmproj = None,
    release: EngineOpt = None,
    today_server: TodayServer = None,
    runs_dir: RunsDir = None,
    resume: ReplayResume = None,
    host_ok: HostOk = False,
    reps: Annotated[
        int | None, typer.Option("--reps", min=1, help="replays of the whole trace, each in processes of its own (5)")
    ] = None,
    arms: Annotated[
        str | None,
        typer.Option(
            "--arms",
            help="of today, optimum, no_cache (conversation.arms; default: every arm the trace allows, a "
            "conversation all three, a trace of step shapes the optimum)",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Replay an agent trace, every step in its arms, interleaved, with intervals over reps: today's server (as
    users run it), the optimum (the fake prefix: only the new part prefilled) and no cache. A trace of step shapes
    has no prompts for today's server: its optimum gives each step's measured prefill and each task's opt_wall."""
    from lab.experiments.conversation import Replay

    s = settings_for(
        None,
        {"sdist_version": controls_release(release, today_server)},
        model=model,
        mmproj=mmproj,
        runs_dir=runs_dir,
        server={"threads": threads, "ctx_size": ctx_size},
        conversation={"reps": reps, "arms": str_list(arms), "today_server": today_server},
    )
    run_command(Replay(trace, s.conversation.reps, s.conversation.arms), s, resume, as_json, host_ok=host_ok)


@app.command("record")
def trace_record(
    upstream: Annotated[str, typer.Option("--upstream", help="the OpenAI-compatible server to forward to")],
    listen: Annotated[int, typer.Option("--listen", min=1, max=65535, help="port the agent's base_url points at")],
    out: Annotated[Path, typer.Option("--out", "-o", help="conversation trace JSONL to write")],
    task: Annotated[str, typer.Option("--task", help="task id; a request's X-Lab-Task header wins")] = "task000",
    host: Annotated[str, typer.Option("--host", help="address to listen on")] = "127.0.0.1",
    append: Annotated[bool, typer.Option("--append", help="add to an existing trace (steps continue)")] = False,
    token: Annotated[
        str | None,
        typer.Option("--token", help="a secret every request must carry in X-Lab-Token (record.token)"),
    ] = None,
    read_timeout: Annotated[
        float | None,
        typer.Option("--read-timeout", help="seconds the upstream may stay silent (record.read_timeout_s)"),
    ] = None,
) -> None:
    """Record a real agent: forward its OpenAI requests unchanged, one ConversationStep line per chat exchange."""
    from lab.conversation.record import Recording, record

    s = settings_for(record={"token": token, "read_timeout_s": read_timeout})
    n = record(Recording(upstream, listen, out, task, host, append, s.record))
    typer.echo(f"{n} steps written to {out}")


@app.command("tune")
def trace_tune(
    trace: Annotated[
        Path | None, typer.Argument(help="a conversation trace JSONL (recorded with `lab trace record`, or synthetic)")
    ] = None,
    ram: Annotated[
        str | None,
        typer.Option(
            "--ram", help="memory the prompt caches may hold, checkpoints and RAM cache (tune.ram; e.g. 4GiB)"
        ),
    ] = None,
    candidates: Annotated[
        int | None, typer.Option("--candidates", min=1, max=8, help="settings from the predicted front measured (2)")
    ] = None,
    plan: Annotated[bool, typer.Option("--plan", help="predict and plan only: the front and what measuring costs")] = (
        False
    ),
    threads: Threads = None,
    ctx_size: CtxSize = None,
    model: ModelOpt = None,
    mmproj: Mmproj = None,
    release: EngineOpt = None,
    today_server: TodayServer = None,
    runs_dir: RunsDir = None,
    resume: ReplayResume = None,
    host_ok: HostOk = False,
    reps: Annotated[
        int | None, typer.Option("--reps", min=1, help="replays of the conversation, each in processes of its own (12)")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """The llama-server cache flags for this conversation, for the server's version: every setting on a grid
    predicted by a model of that version's cache policy, the front (prefill seconds against memory) measured with
    the defaults (conversation.*) in the three-arm replay, interleaved, and the recommendation the evidence decides
    (a decided gain, else the same with less memory, else the defaults) as flags to paste."""
    from lab.core.units import parse_size
    from lab.experiments.tune import Tune

    s = settings_for(
        None,
        {"sdist_version": controls_release(release, today_server)},
        model=model,
        mmproj=mmproj,
        runs_dir=runs_dir,
        server={"threads": threads, "ctx_size": ctx_size},
        conversation={"today_server": today_server},
        tune={"reps": reps, "candidates": candidates, "ram": ram},
    )
    t = s.tune
    experiment = Tune(trace, t.reps, parse_size(t.ram) if t.ram else None, t.candidates)
    if plan:
        _print_tune_plan(experiment, s)
        return
    run_command(experiment, s, resume, as_json, host_ok=host_ok)


def _print_tune_plan(experiment: Tune, s: Settings) -> None:
    """`lab trace tune --plan`: the predicted front and what measuring it costs, with no run created."""
    from lab.core.console import lab_console
    from lab.experiments.protocol import resolve_parts
    from lab.presenters.tune import front_table

    experiment.prepare(s, resolve_parts(s, needs_engine=True))
    console = lab_console()
    console.print(front_table(experiment.predicted_rows()))
    assert experiment.plan is not None
    console.print(experiment.plan.describe(), highlight=False, soft_wrap=True)
