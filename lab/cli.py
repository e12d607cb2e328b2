"""`lab` command line: thin commands that map flags to settings and call library functions.

Heavy modules are imported inside commands so `lab --help` stays instant.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    help="prefill lab: measured prefill cost on CPU",
)
engine_app = typer.Typer(no_args_is_help=True, help="the patched llama.cpp engine")
model_app = typer.Typer(no_args_is_help=True, help="models (the tiny synthetic default)")
trace_app = typer.Typer(no_args_is_help=True, help="agent traces (JSONL of recorded steps)")
app.add_typer(engine_app, name="engine")
app.add_typer(model_app, name="model")
replay_app = typer.Typer(no_args_is_help=True, help="replay labs: approximate state reconstruction (seed 001)")
app.add_typer(trace_app, name="trace")
app.add_typer(replay_app, name="replay")

SourceMode = Annotated[str | None, typer.Option("--source-mode", help="sdist | git | path")]
SourcePath = Annotated[Path | None, typer.Option("--path", help="existing llama.cpp checkout (mode path)")]
FlavorOpt = Annotated[str, typer.Option("--flavor", help="release | assert (asserts on, for tests)")]
CacheDir = Annotated[Path | None, typer.Option("--cache-dir", help="sources, builds, models")]


def _settings(cache_dir: Path | None = None, engine: dict[str, Any] | None = None, **kw: Any) -> Any:
    from lab.settings import load_settings

    try:
        return load_settings(cache_dir=cache_dir, engine=engine or {}, **kw)
    except Exception as e:  # pydantic ValidationError names the offending key
        typer.secho(f"invalid settings: {e}", fg="red", err=True)
        raise typer.Exit(2) from e


def _fail(e: Exception) -> typer.Exit:
    typer.secho(str(e), fg="red", err=True)
    return typer.Exit(1)


@engine_app.command("build")
def engine_build(
    flavor: FlavorOpt = "release",
    source_mode: SourceMode = None,
    path: SourcePath = None,
    cache_dir: CacheDir = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Obtain llama.cpp at the pin, apply patches/, build it (cached: a repeat is a no-op)."""
    info = _build(_settings(cache_dir, {"source_mode": source_mode, "path": path}), flavor, quiet)
    typer.echo(f"{info.server}")


@engine_app.command("info")
def engine_info(
    flavor: FlavorOpt = "release",
    as_json: Annotated[bool, typer.Option("--json")] = False,
    source_mode: SourceMode = None,
    path: SourcePath = None,
    cache_dir: CacheDir = None,
) -> None:
    """Where the built engine is, which source and patch it came from, and its flags."""
    from lab.engine.build import engine_info_json

    info = _build(_settings(cache_dir, {"source_mode": source_mode, "path": path}), flavor, quiet=True)
    if as_json:
        typer.echo(engine_info_json(info))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(show_header=False)
    for k, v in info.model_dump().items():
        t.add_row(k, str(v))
    Console().print(t)


@engine_app.command("check")
def engine_check(
    L: Annotated[int, typer.Option("--L", help="fake prefix length")] = 1024,
    new: Annotated[int, typer.Option("--new", help="new tokens")] = 64,
    model: Annotated[Path | None, typer.Option("--model")] = None,
    cache_dir: CacheDir = None,
) -> None:
    """Start the patched server and show the three arms (baseline, fake, genuine) once each."""
    from lab.engine.check import run_check

    s = _settings(cache_dir, model=model)
    try:
        run_check(s, L=L, new=new)
    except Exception as e:
        raise _fail(e) from e


def _int_list(v: str | None) -> list[int] | None:
    if v is None:
        return None
    try:
        return [int(x) for x in v.split(",") if x.strip()]
    except ValueError as e:
        typer.secho(f"expected comma-separated integers, got {v!r}", fg="red", err=True)
        raise typer.Exit(2) from e


@app.command("sweep")
def sweep(
    Ls: Annotated[str | None, typer.Option("--Ls", help="fake prefix lengths, e.g. 512,2048,6000")] = None,
    news: Annotated[str | None, typer.Option("--news", help="new tokens per step, e.g. 64,256")] = None,
    reps: Annotated[int | None, typer.Option("--reps", help="samples per arm and point")] = None,
    threads: Annotated[int | None, typer.Option("--threads", "-t")] = None,
    ctx_size: Annotated[int | None, typer.Option("--ctx-size", "-c")] = None,
    model: Annotated[Path | None, typer.Option("--model")] = None,
    runs_dir: Annotated[Path | None, typer.Option("--runs-dir")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="finish an incomplete run (path or id)")] = None,
) -> None:
    """Live sweep over L x new: baseline, fake and genuine hit, against opt_prefill = new / prefill_tps(L)."""
    from lab.experiments.fakeprefix import run_sweep
    from lab.runs import RunError, resolve_run

    s = _settings(
        model=model,
        runs_dir=runs_dir,
        sweep={"Ls": _int_list(Ls), "news": _int_list(news), "reps": reps},
        server={"threads": threads, "ctx_size": ctx_size},
    )
    try:
        run = run_sweep(s, resume=resolve_run(resume, s.runs_dir) if resume else None)
    except RunError as e:
        raise _fail(e) from e
    typer.echo(str(run.path))


@app.command("profile")
def profile(
    chunk: Annotated[int | None, typer.Option("--chunk", help="tokens per probe chunk")] = None,
    max_depth: Annotated[int | None, typer.Option("--max-depth", help="deepest probe")] = None,
    cycles: Annotated[int | None, typer.Option("--cycles", help="cycles (median per depth)")] = None,
    threads: Annotated[int | None, typer.Option("--threads", "-t")] = None,
    threads_batch: Annotated[int | None, typer.Option("--threads-batch", "-tb")] = None,
    clean_room: Annotated[
        tuple[str, str] | None,
        typer.Option("--clean-room", metavar="STOP START", help="stop the host's server first, always restart it"),
    ] = None,
    threadpool: Annotated[
        bool | None, typer.Option("--threadpool/--no-threadpool", help="persistent threadpool, as llama-bench")
    ] = None,
    model: Annotated[Path | None, typer.Option("--model")] = None,
    runs_dir: Annotated[Path | None, typer.Option("--runs-dir")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="finish an incomplete run (path or id)")] = None,
) -> None:
    """Per-node prefill profile over a cumulative depth sweep, sorted into five bands (seed 002)."""
    from lab.experiments.bands import CoverageError
    from lab.experiments.profile import run_profile
    from lab.runs import RunError, resolve_run

    s = _settings(
        model=model,
        runs_dir=runs_dir,
        profile={
            "chunk": chunk, "max_depth": max_depth, "cycles": cycles,
            "threads": threads, "threads_batch": threads_batch, "threadpool": threadpool,
            "clean_room_stop": clean_room[0] if clean_room else None,
            "clean_room_start": clean_room[1] if clean_room else None,
        },
    )  # fmt: skip
    try:
        run = run_profile(s, resume=resolve_run(resume, s.runs_dir) if resume else None)
    except (RunError, CoverageError) as e:
        raise _fail(e) from e
    typer.echo(str(run.path))


@trace_app.command("synth")
def trace_synth(
    out: Annotated[Path, typer.Option("--out", "-o", help="trace JSONL to write")] = Path("trace.jsonl"),
    tasks: Annotated[int, typer.Option("--tasks", min=1)] = 3,
    steps: Annotated[int, typer.Option("--steps", min=1)] = 6,
    start_depth: Annotated[int, typer.Option("--start-depth", min=1)] = 1024,
    max_depth: Annotated[int, typer.Option("--max-depth", min=2)] = 12000,
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Write a synthetic but plausible agent trace (deterministic from the seed)."""
    from lab.experiments.trace import synth_trace, write_trace

    write_trace(synth_trace(tasks, steps, seed, start_depth, max_depth), out)
    typer.echo(str(out))


@app.command("replay-trace")
def replay_trace(
    trace: Annotated[Path | None, typer.Argument(help="trace JSONL (lab.schemas.TraceStep per line)")] = None,
    threads: Annotated[int | None, typer.Option("--threads", "-t")] = None,
    ctx_size: Annotated[int | None, typer.Option("--ctx-size", "-c")] = None,
    model: Annotated[Path | None, typer.Option("--model")] = None,
    runs_dir: Annotated[Path | None, typer.Option("--runs-dir")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="finish an incomplete replay run")] = None,
) -> None:
    """Replay each recorded agent step with a fake prefix: measured_opt_prefill_s per step, opt_wall per task."""
    from lab.experiments.trace import TraceError, run_replay
    from lab.runs import RunError, resolve_run

    s = _settings(model=model, runs_dir=runs_dir, server={"threads": threads, "ctx_size": ctx_size})
    try:
        run = run_replay(s, trace, resume=resolve_run(resume, s.runs_dir) if resume else None)
    except (RunError, TraceError) as e:
        raise _fail(e) from e
    typer.echo(str(run.path))


@model_app.command("tiny")
def model_tiny(
    arch: Annotated[str, typer.Option("--arch", help="qwen35moe (default) | qwen3moe | gemma3 (iSWA)")] = "qwen35moe",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    cache_dir: CacheDir = None,
) -> None:
    """Write (once, cached, deterministic) the tiny random-weight model and print its path."""
    from lab.engine.models import ensure_tiny_model
    from lab.engine.source import SourceError, prepare_source
    from lab.engine.tinymodel import TinyModelSpec

    s = _settings(cache_dir)
    try:
        src = prepare_source(s.engine, s.cache_dir)
        path = ensure_tiny_model(s.cache_dir, src, TinyModelSpec(arch=arch, seed=seed))
    except (SourceError, ValueError) as e:
        raise _fail(e) from e
    typer.echo(str(path))


def _build(s: Any, flavor: str, quiet: bool) -> Any:
    from lab.engine.build import BuildError, build_engine
    from lab.engine.source import SourceError

    try:
        return build_engine(s.engine, s.cache_dir, flavor=_flavor(flavor), quiet=quiet)
    except (BuildError, SourceError) as e:
        raise _fail(e) from e


def _flavor(v: str) -> Any:
    if v not in ("release", "assert"):
        typer.secho(f"--flavor must be release or assert, got {v!r}", fg="red", err=True)
        raise typer.Exit(2)
    return v


AsJson = Annotated[bool, typer.Option("--json", help="print the results as JSON (run folder under 'run')")]
RunsDir = Annotated[Path | None, typer.Option("--runs-dir")]


@replay_app.command("exact")
def replay_exact(
    window: Annotated[int | None, typer.Option("--window", help="W, positions each layer reads")] = None,
    depth: Annotated[int | None, typer.Option("--depth", help="D, layers")] = None,
    length: Annotated[int | None, typer.Option("--length", help="N: inputs 1..N")] = None,
    keep: Annotated[int | None, typer.Option("--keep", help="K: replay the last K inputs")] = None,
    next_input: Annotated[str | None, typer.Option("--next", help="the decode step's input (default N+1)")] = None,
    as_json: AsJson = False,
    runs_dir: RunsDir = None,
) -> None:
    """§9.1: full prefill vs replay of the last K inputs, shared vs per-layer KV, then one decode step."""
    replay = {"window": window, "depth": depth, "length": length, "keep": keep, "next_input": next_input}
    _replay("exact", _settings(runs_dir=runs_dir, replay=replay), as_json)


@replay_app.command("span")
def replay_span(
    windows: Annotated[str | None, typer.Option("--windows", help="e.g. 2,3,4")] = None,
    depths: Annotated[str | None, typer.Option("--depths", help="e.g. 1,2,3")] = None,
    as_json: AsJson = False,
    runs_dir: RunsDir = None,
) -> None:
    """§9.1.1: R = W + (D-1)(W-1), checked on every 0/1 input two positions longer than R."""
    replay = {"span_windows": _int_list(windows), "span_depths": _int_list(depths)}
    _replay("span", _settings(runs_dir=runs_dir, replay=replay), as_json)


@replay_app.command("cost")
def replay_cost(
    window: Annotated[int | None, typer.Option("--window", help="SWA window of the example table")] = None,
    keep: Annotated[int | None, typer.Option("--keep", help="keep count of the example table")] = None,
    producer: Annotated[int | None, typer.Option("--producer-layers")] = None,
    consumer: Annotated[int | None, typer.Option("--consumer-layers")] = None,
    row_keep: Annotated[int | None, typer.Option("--row-keep", help="keep count of the row-work table")] = None,
    lengths: Annotated[str | None, typer.Option("--lengths", help="e.g. 64,1024,16384")] = None,
    chunked_length: Annotated[int | None, typer.Option("--chunked-length", help="prompt of the chunk example")] = None,
    chunk: Annotated[int | None, typer.Option("--chunk", help="chunk size of the chunk example")] = None,
    as_json: AsJson = False,
    runs_dir: RunsDir = None,
) -> None:
    """§9.5: consumer rows and SWA pairs for off / mask / compact, checked against pair enumeration."""
    replay = {
        "cost_window": window, "cost_keep": keep, "producer_layers": producer, "consumer_layers": consumer,
        "row_keep": row_keep, "lengths": _int_list(lengths), "chunked_length": chunked_length, "chunk": chunk,
    }  # fmt: skip
    _replay("cost", _settings(runs_dir=runs_dir, replay=replay), as_json)


def _replay(which: str, s: Any, as_json: bool) -> None:
    import json

    from lab.experiments.replay_labs import run_replay_lab
    from lab.runs import RunError

    try:
        run, result = run_replay_lab(s, which)
    except (RunError, ValueError) as e:
        raise _fail(e) from e
    if as_json:
        tables = {k: [r.model_dump(mode="json") for r in rows] for k, rows in result.tables.items()}
        typer.echo(json.dumps({"run": str(run.path), "ok": result.ok, "summary": result.summary, **tables}, indent=2))
    else:
        typer.echo(result.text)
        typer.echo(str(run.path))
    if not result.ok:
        raise typer.Exit(1)


def main() -> None:  # pragma: no cover
    sys.exit(app())
