"""What every command module shares: the app class with the error policy, the settings loader, the run
resolver, the list parsers, and every option more than one command takes (or more than one meaning of a
flag), declared once here.

Heavy modules are imported inside the helpers and commands so `lab --help` stays instant.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer


class LabApp(typer.Typer):
    """The error policy: a LabError (anything a user can cause) is one red line and exit 1 (2 for a bad option),
    with its details below; anything else is a bug in the lab and keeps its traceback."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from lab.core.errors import LabError

        try:
            return super().__call__(*args, **kwargs)
        except LabError as e:
            typer.secho(e.headline, fg="red", err=True)
            if e.details:
                typer.echo(e.details, err=True)
            sys.exit(e.exit_code)


def group(help: str) -> typer.Typer:
    """A command group (`lab engine ...`): without a command it prints its help."""
    return typer.Typer(no_args_is_help=True, help=help, rich_markup_mode="markdown")


def settings_for(cache_dir: Path | None = None, engine: dict[str, Any] | None = None, **kw: Any) -> Any:
    """The settings with these flags on top (None: not given); a bad key or value is a UsageError naming it."""
    from pydantic import ValidationError

    from lab.core.errors import UsageError, validation_line
    from lab.core.settings import load_settings, unknown_key

    try:
        return load_settings(cache_dir=cache_dir, engine=engine or {}, **kw)
    except ValidationError as e:  # names the offending key
        if (line := unknown_key(e)) is not None:
            raise UsageError(line) from e
        raise UsageError(f"invalid settings: {validation_line(e, root='settings', limit=3)}") from e


def resolve(ref: str | None, runs_dir: Path) -> Any:
    """The run folder `ref` names (id, unique prefix or path), None without one."""
    from lab.core.runs import resolve_run

    return resolve_run(ref, runs_dir) if ref else None


def run_command(
    experiment: Any,
    settings: Any,
    resume: str | None,
    as_json: bool,
    console: Any = None,
    vs: list[str] | None = None,
    host_ok: bool = False,
) -> Any:
    """Run (or resume) an experiment for a command: its closing tables on the console (none with --json), then
    the run folder, or with --json the records the tables are printed from; returns the run folder. With `vs`
    (or resuming such a run): both configurations interleaved in one run, B/A per point (lab.experiments.versus).
    A run measured on another host is resumed here only with `host_ok` (--host-ok)."""
    from lab.catalog.compare import is_versus
    from lab.cli.show import show_run
    from lab.core.console import lab_console
    from lab.experiments.protocol import measured_here, run_experiment, run_output

    console = console or lab_console(quiet=as_json)
    folder = resolve(resume, settings.runs_dir)
    if folder is not None:
        measured_here(folder, settings.host_name, host_ok)
    if vs is not None or (folder is not None and is_versus(folder.path)):
        return run_versus_command(experiment, settings, folder, as_json, console, vs)
    run = run_experiment(experiment, settings, folder, console, show_run)
    typer.echo(run_output(experiment, run, as_json))
    return run


def check_vs(settings: Any, vs: list[str] | None, experiment: str) -> None:
    """`--vs` refused in one line before anything is planned or created: side B's settings as the run makes them."""
    if vs is not None:
        from lab.experiments.versus import parse_vs
        from lab.experiments.versus.config import paired_design, side_b

        side_b(paired_design(settings), parse_vs(vs), experiment)


def run_versus_command(experiment: Any, settings: Any, folder: Any, as_json: bool, console: Any, vs: Any) -> Any:
    import json

    from lab.cli.show import print_answer
    from lab.experiments.answer import read_run
    from lab.experiments.versus import parse_vs, run_versus

    run, comparison = run_versus(experiment, settings, parse_vs(vs or []), folder, console)
    stored = read_run(run.path, settings)  # B/A as the run stored it: what `lab show RUN` prints again
    print_answer(stored.manifest.experiment, stored.answer, console)
    typer.echo(json.dumps({"run": str(run.path), **comparison.record()}, indent=1) if as_json else str(run.path))
    return run


def str_list(v: str | None) -> list[str] | None:
    return None if v is None else [x.strip() for x in v.split(",") if x.strip()]


def int_list(v: str | None) -> list[int] | None:
    if v is None:
        return None
    from lab.core.errors import UsageError

    try:
        return [int(x) for x in v.split(",") if x.strip()]
    except ValueError as e:
        raise UsageError(f"expected comma-separated integers, got {v!r}") from e


# --- where things are ---------------------------------------------------------------------------------------
CacheDir = Annotated[Path | None, typer.Option("--cache-dir", help="sources, builds, models")]
RunsDir = Annotated[Path | None, typer.Option("--runs-dir")]
CatalogDir = Annotated[Path | None, typer.Option("--catalog-dir", help="default: catalog/")]
ReportsDir = Annotated[Path | None, typer.Option("--reports-dir", help="default: reports/")]
SourceMode = Annotated[str | None, typer.Option("--source-mode", help="sdist | git | path")]
SourcePath = Annotated[Path | None, typer.Option("--path", help="existing llama.cpp checkout (mode path)")]
FlavorOpt = Annotated[str, typer.Option("--flavor", help="release | assert (asserts on, for tests)")]
EngineOpt = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="llama.cpp release to build and run: pin (the default), latest, or an sdist version "
        "(engine.sdist_version)",
    ),
]

# --- what is measured, and how the engine runs -------------------------------------------------------------
ModelOpt = Annotated[
    Path | None,
    typer.Option(
        "--model",
        help="GGUF to measure: a path, pretrained:NAME (lab model pretrained) or tiny:ARCH (default: the tiny "
        "synthetic qwen35moe)",
    ),
]
Mmproj = Annotated[Path | None, typer.Option("--mmproj", help="vision projector (default: the tiny one)")]
Seed = Annotated[int, typer.Option("--seed")]
Threads = Annotated[
    int | None, typer.Option("--threads", "-t", help="CPU threads (llama.cpp -t; default server.threads)")
]
ThreadsBatch = Annotated[int | None, typer.Option("--threads-batch", "-tb", help="batch threads (-tb)")]
CtxSize = Annotated[int | None, typer.Option("--ctx-size", "-c", help="context size of the server (-c)")]
# --max-depth: a profile's deepest probe (unset: profile.max_depth), or the deepest step of a synthetic trace
TraceMaxDepth = Annotated[int, typer.Option("--max-depth", min=2)]

# --- the profile -----------------------------------------------------------------------------------------------
ProbeChunk = Annotated[int | None, typer.Option("--chunk", help="tokens per probe chunk")]
ProbeDepths = Annotated[
    str | None, typer.Option("--depths", help="probe depths: 0,512,1024 or log:D (0, 1024, 2048, ... doubling to D)")
]
ProbeFill = Annotated[
    str | None, typer.Option("--fill", help="fake: a fake prefix per probe; real: the cumulative pass")
]
ProfileProcesses = Annotated[int | None, typer.Option("--processes", help="instrument processes (the units)")]
ProfileReps = Annotated[int | None, typer.Option("--reps", help="reps of FUSED and TIMED per depth and process")]
MaxProcesses = Annotated[
    int | None, typer.Option("--max-processes", help="more processes, up to this, while a check is undecided")
]
RealCheck = Annotated[
    bool | None, typer.Option("--real-check/--no-real-check", help="time each depth after a real fill too, paired")
]
RealMaxDepth = Annotated[
    int | None, typer.Option("--real-max-depth", help="deepest real fill (llama-bench, the fake-vs-real check)")
]
BenchCheck = Annotated[
    bool | None, typer.Option("--bench/--no-bench", help="a llama-bench process after every process")
]
CleanRoom = Annotated[
    tuple[str, str] | None,
    typer.Option("--clean-room", metavar="STOP START", help="stop the host's server first, always restart it"),
]
ThreadpoolOpt = Annotated[
    bool | None, typer.Option("--threadpool/--no-threadpool", help="persistent threadpool, as llama-bench")
]
PeaksOpt = Annotated[
    bool | None, typer.Option("--peaks/--no-peaks", help="probe this host's GEMM and memcpy peaks (about 2 s)")
]
PredictDepths = Annotated[
    str | None,
    typer.Option("--predict-depths", help="depths its own time model predicts ms/token at (8192,16384,32768)"),
]

# --- a run ---------------------------------------------------------------------------------------------------
Resume = Annotated[str | None, typer.Option("--resume", help="finish an incomplete run (path or id)")]
ReplayResume = Annotated[str | None, typer.Option("--resume", help="finish an incomplete replay run")]
HostOk = Annotated[
    bool,
    typer.Option("--host-ok", help="with --resume: finish here a run measured on another host (or fetched from one)"),
]
AsJson = Annotated[bool, typer.Option("--json", help="print the results as JSON (run folder under 'run')")]
WideOpt = Annotated[bool, typer.Option("--wide", help="every column (by default the answer fits 100 columns)")]
VsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--vs",
        metavar="KEY=VALUE",
        help="also measure a second configuration, interleaved in this run (B: these settings, e.g. engine=latest, "
        "server.threads=1, server.cache_type_k=q8_0, server.extra_args='--no-mmap', model=PATH; 'same' for an "
        "A/A): B/A per point",
    ),
]

# --- the sweep (and `lab arms`) ------------------------------------------------------------------------------
LsOpt = Annotated[str | None, typer.Option("--Ls", help="cached prefix lengths, e.g. 512,2048,6000 (sweep.Ls)")]
NewsOpt = Annotated[str | None, typer.Option("--news", help="new tokens per step, e.g. 64,256 (sweep.news)")]
ImagesOpt = Annotated[
    str | None, typer.Option("--images", help="screenshot axis: none and/or WxH, e.g. none,320x200,640x400")
]
RepsOpt = Annotated[int | None, typer.Option("--reps", help="fixed reps per point (sets min = max)")]
MinReps = Annotated[int | None, typer.Option("--min-reps", help="reps every point gets (default 5)")]
MaxReps = Annotated[int | None, typer.Option("--max-reps", help="reps a point may get to decide")]
TargetOpt = Annotated[float | None, typer.Option("--target", help="stop at this fake/genuine half-width, e.g. 0.03")]
ArmsOpt = Annotated[
    str | None, typer.Option("--arms", help="what a rep measures: baseline,fake,genuine,plain,estimate")
]
WhereOpt = Annotated[
    str | None,
    typer.Option("--where", help="server | inproc (one process, libllama) | both (each point in both places)"),
]
BaselineReps = Annotated[
    int | None, typer.Option("--baseline-reps", help="at most this many baseline samples per point")
]
ProcessesOpt = Annotated[
    int | None,
    typer.Option("--processes", help="spread each point's reps over this many server and driver processes"),
]
FillPasses = Annotated[
    int | None, typer.Option("--fill-passes", help="cumulative fill passes (the baseline and the states)")
]
PlanOpt = Annotated[bool, typer.Option("--plan", help="print the predicted wall time per arm and measure nothing")]
RatesOpt = Annotated[
    str | None, typer.Option("--rates", help="the plan's rates: a rates file or a profile run (default: calibrate)")
]
BudgetOpt = Annotated[str | None, typer.Option("--budget", help="choose max reps to fit this wall time, e.g. 30m")]
NOutOpt = Annotated[
    int | None, typer.Option("--n-out", help="tokens generated after each step's prompt, timed as decodes at depth")
]
