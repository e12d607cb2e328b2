"""`lab engine build|info|prune|check|decode`: the patched llama.cpp engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from lab.cli.common import (
    AsJson,
    CacheDir,
    EngineOpt,
    FlavorOpt,
    HostOk,
    ModelOpt,
    NOutOpt,
    Resume,
    RunsDir,
    SourceMode,
    SourcePath,
    Threads,
    VsOpt,
    group,
    int_list,
    run_command,
    settings_for,
)

app = group("the patched llama.cpp engine")


def _built(
    flavor: str,
    release: str | None,
    source_mode: str | None,
    path: Path | None,
    cache_dir: Path | None,
    quiet: bool,
    stock: bool | None = None,
) -> Any:
    """The engine of this flavor for these source flags, built (or found built) now."""
    from lab.engine.build import build_engine, check_flavor

    engine = {"sdist_version": release, "source_mode": source_mode, "path": path, "stock": stock or None}
    s = settings_for(cache_dir, engine)
    return build_engine(s.engine, s.cache_dir, flavor=check_flavor(flavor), quiet=quiet)


@app.command("build")
def engine_build(
    flavor: FlavorOpt = "release",
    release: EngineOpt = None,
    source_mode: SourceMode = None,
    path: SourcePath = None,
    cache_dir: CacheDir = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    stock: Annotated[
        bool, typer.Option("--stock", help="the release as shipped, without the lab's patch: a stock today's server")
    ] = False,
) -> None:
    """Obtain llama.cpp (the pin, or --engine latest), apply its patch series, build it (cached: a repeat is a
    no-op)."""
    typer.echo(f"{_built(flavor, release, source_mode, path, cache_dir, quiet, stock).server}")


@app.command("info")
def engine_info(
    flavor: FlavorOpt = "release",
    as_json: Annotated[bool, typer.Option("--json")] = False,
    release: EngineOpt = None,
    source_mode: SourceMode = None,
    path: SourcePath = None,
    cache_dir: CacheDir = None,
) -> None:
    """Where the built engine is, which source and patch it came from, and its flags."""
    from lab.core.console import lab_console
    from lab.engine.build import engine_info_json

    built = _built(flavor, release, source_mode, path, cache_dir, quiet=True)
    if as_json:
        typer.echo(engine_info_json(built))
        return

    from lab.presenters.engine import engine_table

    lab_console().print(engine_table(built))


@app.command("prune")
def engine_prune(
    release: EngineOpt = None, source_mode: SourceMode = None, path: SourcePath = None, cache_dir: CacheDir = None
) -> None:
    """Remove the engine trees and builds of patch sets other than the current one (never one a run holds)."""
    from lab.engine.build import prune_engines

    s = settings_for(cache_dir, {"sdist_version": release, "source_mode": source_mode, "path": path})
    removed, held = prune_engines(s.engine, s.cache_dir)
    for p in removed:
        typer.echo(f"removed {p}")
    for p in held:
        typer.echo(f"kept {p}: a running experiment or build holds it")
    if not removed and not held:
        typer.echo("nothing to prune: only the current patch set's engine is cached")


@app.command("check")
def engine_check(
    L: Annotated[int, typer.Option("--L", help="fake prefix length")] = 1024,
    new: Annotated[int, typer.Option("--new", help="new tokens")] = 64,
    model: ModelOpt = None,
    release: EngineOpt = None,
    flavor: FlavorOpt = "release",
    cache_dir: CacheDir = None,
    as_json: AsJson = False,
    layout: Annotated[
        bool,
        typer.Option(
            help="also compare what the kernels see after a fake and a real prefix (--model's, else the "
            "tiny model of each memory family)"
        ),
    ] = True,
) -> None:
    """Start the patched server and show the three arms (baseline, fake, genuine) once each; then, per memory
    family, whether a fake prefix lays out as a restored hit (n_kv, cells, mask tiles)."""
    import json

    from lab.core.console import lab_console
    from lab.engine.build import check_flavor
    from lab.engine.check import run_check
    from lab.instrument.layout import check_models
    from lab.models.resolve import resolve_model
    from lab.presenters.engine import print_check

    s = settings_for(cache_dir, {"sdist_version": release}, model=model)
    check = run_check(s, resolve_model(s), L=L, new=new, flavor=check_flavor(flavor))
    reports = check_models(s, check_flavor(flavor), lab_console(stderr=True)) if layout and not check.failure else []
    if as_json:
        typer.echo(json.dumps({**check.record(), "layout": [r.record() for r in reports]}, indent=1))
    else:
        print_check(lab_console(), check)
        for r in reports:
            typer.secho(r.line(), fg=None if r.ok else "red")
    if why := check.failure:
        typer.secho(f"the engine does not honour the n_fake_cached contract: {why}", fg="red", err=True)
        raise typer.Exit(1)
    if bad := [r for r in reports if not r.ok]:
        typer.secho(f"a fake prefix does not lay out as a restored hit: {bad[0].first()}", fg="red", err=True)
        raise typer.Exit(1)


@app.command("decode")
def engine_decode(
    depths: Annotated[
        str | None, typer.Option("--depths", help="depths L + new to decode at (decode.depths: 512,1024,2048)")
    ] = None,
    n_out: NOutOpt = None,
    reps: Annotated[
        int | None, typer.Option("--reps", help="samples per depth, each tool (decode.reps: 5)", min=1)
    ] = None,
    new: Annotated[
        int | None, typer.Option("--new", help="new tokens before the generation, L = depth - new (decode.new: 64)")
    ] = None,
    tolerance: Annotated[
        float | None, typer.Option("--tolerance", help="agree: server / llama-bench within 1 +- this (decode: 0.1)")
    ] = None,
    threads: Threads = None,
    model: ModelOpt = None,
    release: EngineOpt = None,
    cache_dir: CacheDir = None,
    runs_dir: RunsDir = None,
    resume: Resume = None,
    host_ok: HostOk = False,
    vs: VsOpt = None,
    as_json: AsJson = False,
) -> None:
    """Decode ms per token at depth through the server (fake prefix, then --n-out tokens) against llama-bench, in
    a run folder (its rows: the catalog's decode_depths). Exit 1 when a sample failed."""
    from lab.experiments.decode import DecodeCheck

    decode = {"depths": int_list(depths), "new": new, "n_out": n_out, "reps": reps, "tolerance": tolerance}
    engine = {"sdist_version": release}
    s = settings_for(cache_dir, engine, model=model, runs_dir=runs_dir, server={"threads": threads}, decode=decode)
    run = run_command(DecodeCheck(), s, resume, as_json, vs=vs, host_ok=host_ok)
    m = run.manifest()
    if m.status != "complete":
        typer.secho(f"failed samples: {m.reason}", fg="red", err=True)
        raise typer.Exit(1)
