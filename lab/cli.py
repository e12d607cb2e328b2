"""`lab` command line: thin commands that map flags to settings and call library functions.

Heavy modules are imported inside commands so `lab --help` stays instant.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="prefill lab: measured prefill cost on CPU")
engine_app = typer.Typer(no_args_is_help=True, help="the patched llama.cpp engine")
model_app = typer.Typer(no_args_is_help=True, help="models (the tiny synthetic default)")
app.add_typer(engine_app, name="engine")
app.add_typer(model_app, name="model")

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
    from lab.engine.build import BuildError, build_engine
    from lab.engine.source import SourceError

    s = _settings(cache_dir, {"source_mode": source_mode, "path": path})
    try:
        info = build_engine(s.engine, s.cache_dir, flavor=_flavor(flavor), quiet=quiet)
    except (BuildError, SourceError) as e:
        raise _fail(e) from e
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
    from lab.engine.build import BuildError, build_engine, engine_info_json
    from lab.engine.source import SourceError

    s = _settings(cache_dir, {"source_mode": source_mode, "path": path})
    try:
        info = build_engine(s.engine, s.cache_dir, flavor=_flavor(flavor), quiet=True)
    except (BuildError, SourceError) as e:
        raise _fail(e) from e
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


def _flavor(v: str) -> Any:
    if v not in ("release", "assert"):
        typer.secho(f"--flavor must be release or assert, got {v!r}", fg="red", err=True)
        raise typer.Exit(2)
    return v


def main() -> None:  # pragma: no cover
    sys.exit(app())
