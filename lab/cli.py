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
catalog_app = typer.Typer(no_args_is_help=True, help="the data catalog (catalog/tables/*.parquet)")
app.add_typer(catalog_app, name="catalog")

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


def _str_list(v: str | None) -> list[str] | None:
    return None if v is None else [x.strip() for x in v.split(",") if x.strip()]


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
    images: Annotated[
        str | None, typer.Option("--images", help="screenshot axis: none and/or WxH, e.g. none,320x200,640x400")
    ] = None,
    mmproj: Annotated[Path | None, typer.Option("--mmproj", help="vision projector (default: the tiny one)")] = None,
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
        mmproj=mmproj,
        sweep={"Ls": _int_list(Ls), "news": _int_list(news), "reps": reps, "images": _str_list(images)},
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
    vision: Annotated[bool, typer.Option("--vision", help="also the tiny qwen3vl projector (--mmproj)")] = False,
    cache_dir: CacheDir = None,
) -> None:
    """Write (once, cached, deterministic) the tiny random-weight model and print its path (then the projector's)."""
    from lab.engine.models import ensure_tiny_model, ensure_tiny_projector
    from lab.engine.source import SourceError, prepare_source
    from lab.engine.tinymodel import TinyModelSpec

    s = _settings(cache_dir)
    spec = TinyModelSpec(arch=arch, seed=seed)
    try:
        src = prepare_source(s.engine, s.cache_dir)
        paths = [ensure_tiny_model(s.cache_dir, src, spec)]
        if vision:
            paths.append(ensure_tiny_projector(s.cache_dir, src, text=spec))
    except (SourceError, ValueError) as e:
        raise _fail(e) from e
    for path in paths:
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


CatalogDir = Annotated[Path | None, typer.Option("--catalog-dir", help="default: catalog/")]


@catalog_app.command("ingest")
def catalog_ingest(runs_dir: RunsDir = None, catalog_dir: CatalogDir = None) -> None:
    """Validate every run folder and rebuild the catalog tables (all or nothing) and catalog/metrics.json."""
    from lab.catalog.ingest import IngestError, ingest

    s = _settings(runs_dir=runs_dir, catalog_dir=catalog_dir)
    try:
        r = ingest(s.runs_dir, s.catalog_dir)
    except IngestError as e:
        raise _fail(e) from e
    rows = ", ".join(f"{k} {v}" for k, v in r.rows.items() if v)
    typer.echo(f"{r.runs} runs ({r.in_figures} complete) -> {r.tables_dir}: {rows or 'no rows'}")


@catalog_app.command("ls")
def catalog_ls(runs_dir: RunsDir = None) -> None:
    """List run folders: id, experiment, host, engine commit, status."""
    from rich.console import Console
    from rich.table import Column, Table

    from lab.catalog.ingest import IngestError, read_manifest, run_dirs, run_record

    s = _settings(runs_dir=runs_dir)
    t = Table("experiment", "host", "engine", "status", "started (UTC)")
    t.columns.insert(0, Column("run", no_wrap=True))
    for d in run_dirs(s.runs_dir):
        try:
            r = run_record(d, read_manifest(d))
        except IngestError as e:
            t.add_row(d.name, "?", "?", "?", f"[red]unreadable: {e}[/red]", "")
            continue
        status = r.status if r.status == "complete" else f"[yellow]{r.status}[/yellow] {r.reason}".rstrip()
        t.add_row(r.run_id, r.experiment, r.host, r.engine_commit or "-", status, r.started_utc)
    Console().print(t)


@catalog_app.command("show")
def catalog_show(run: Annotated[str, typer.Argument(help="run id or path")], runs_dir: RunsDir = None) -> None:
    """One run with its provenance (host, CPU, engine, patch, model, lab commit) and its tables."""
    from lab.catalog.ingest import IngestError, read_manifest, read_spec, run_record
    from lab.catalog.tables import SPECS
    from lab.runs import RunError, resolve_run

    s = _settings(runs_dir=runs_dir)
    try:
        folder = resolve_run(run, s.runs_dir)
        m = read_manifest(folder.path)
        rec = run_record(folder.path, m)
        for field, value in rec.model_dump().items():
            if field != "params_json":
                typer.echo(f"{field:>14}: {value}")
        typer.echo(f"{'params':>14}: {rec.params_json}")
        for spec in SPECS:
            if m.experiment in spec.experiments and rec.in_figures:
                typer.echo(f"{'table':>14}: {spec.name} ({len(read_spec(folder.path, spec))} rows)")
    except (RunError, IngestError) as e:
        raise _fail(e) from e


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
    try:
        added = track_runs(s.runs_dir, s.runs_dir.resolve().parent)
    except RuntimeError as e:
        raise _fail(e) from e
    typer.echo(f"tracked {len(added)} run folder(s)" + "".join(f"\n  {a}" for a in added))


@app.command("report")
def report(catalog_dir: CatalogDir = None, out: Annotated[Path | None, typer.Option("--out")] = None) -> None:
    """Render the reports (agreement, bands, replay, index.html) from the catalog tables."""
    from lab.reports import render_reports

    s = _settings(catalog_dir=catalog_dir, reports_dir=out)
    paths = render_reports(s.catalog_dir, s.reports_dir, s.report)
    typer.echo(f"{len(paths)} files in {s.reports_dir}; open {s.reports_dir / 'index.html'}")


@app.command("compare")
def compare(
    run_a: Annotated[str, typer.Argument(help="baseline run (id or path)")],
    run_b: Annotated[str, typer.Argument(help="run to compare with it")],
    as_report: Annotated[bool, typer.Option("--report", help="also write compare_<a>_vs_<b>.* to reports/")] = False,
    runs_dir: RunsDir = None,
) -> None:
    """Two sweep or two profile runs side by side, with B/A ratios."""
    from rich.console import Console
    from rich.table import Table

    from lab.catalog.compare import CompareError, compare_runs
    from lab.catalog.ingest import IngestError
    from lab.runs import RunError, resolve_run

    s = _settings(runs_dir=runs_dir)
    try:
        a, b = resolve_run(run_a, s.runs_dir), resolve_run(run_b, s.runs_dir)
        _, keys, rows = compare_runs(a.path, b.path)
    except (RunError, IngestError, CompareError) as e:
        raise _fail(e) from e
    t = Table(*keys, "metric", "A", "B", "B/A", title=f"A = {a.path.name}\nB = {b.path.name}")
    for r in rows:
        ratio = r.ratio
        style = "" if ratio is None or abs(ratio - 1) <= s.report.tolerance else ("red" if ratio > 1 else "green")
        cell = "-" if ratio is None else (f"[{style}]{ratio:.3f}[/{style}]" if style else f"{ratio:.3f}")
        t.add_row(*("-" if k is None else str(k) for k in r.key), r.metric, _fmt(r.a), _fmt(r.b), cell)
    Console().print(t)
    if as_report:
        from lab.catalog.ingest import ingest
        from lab.reports import render_compare

        try:
            ingest(s.runs_dir, s.catalog_dir)
            paths = render_compare(s.catalog_dir, s.reports_dir, a.path.name, b.path.name, s.report)
        except (IngestError, ValueError) as e:
            raise _fail(e) from e
        for p in paths:
            typer.echo(str(p))


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def main() -> None:  # pragma: no cover
    sys.exit(app())
