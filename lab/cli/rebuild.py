"""`lab rebuild exact|span|cost`: the rebuild labs (pure Python, no engine), each landing in a run folder."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from lab.cli.common import AsJson, RunsDir, group, int_list, settings_for

app = group("rebuild labs: exact and approximate reconstruction of a cached state from its last inputs")


def _shared_options(as_json: AsJson = False, runs_dir: RunsDir = None) -> None:
    """The options every rebuild lab takes, after its own (declared once, here)."""


def _lab(which: str) -> Callable[[Callable[..., dict[str, Any]]], Callable[..., None]]:
    """`lab rebuild <which>` from a function of the lab's own options returning its `rebuild.*` settings: the command
    takes those options and the shared ones, runs the lab with these settings, prints its tables (or JSON) and exits
    1 when a check failed."""

    def register(rebuild_settings: Callable[..., dict[str, Any]]) -> Callable[..., None]:
        @functools.wraps(rebuild_settings)
        def command(as_json: bool = False, runs_dir: Path | None = None, **options: Any) -> None:

            from lab.core.console import lab_console
            from lab.experiments.rebuild_labs import lab_output, run_rebuild_lab

            s = settings_for(runs_dir=runs_dir, rebuild=rebuild_settings(**options))
            run, result = run_rebuild_lab(s, which, lab_console(stderr=True, quiet=as_json))
            typer.echo(lab_output(run, result, as_json))
            if not result.ok:
                raise typer.Exit(1)

        own, shared = (inspect.signature(f, eval_str=True).parameters for f in (rebuild_settings, _shared_options))
        command.__signature__ = inspect.Signature([*own.values(), *shared.values()])  # type: ignore[attr-defined]
        return app.command(which)(command)

    return register


@_lab("exact")
def rebuild_exact(
    window: Annotated[int | None, typer.Option("--window", help="W, positions each layer reads")] = None,
    depth: Annotated[int | None, typer.Option("--depth", help="D, layers")] = None,
    length: Annotated[int | None, typer.Option("--length", help="N: inputs 1..N")] = None,
    keep: Annotated[int | None, typer.Option("--keep", help="K: rebuild from the last K inputs")] = None,
    next_input: Annotated[str | None, typer.Option("--next", help="the decode step's input (default N+1)")] = None,
) -> dict[str, Any]:
    """Full prefill vs rebuild from the last K inputs, shared vs per-layer KV, then one decode step."""
    return {"window": window, "depth": depth, "length": length, "keep": keep, "next_input": next_input}


@_lab("span")
def rebuild_span(
    windows: Annotated[str | None, typer.Option("--windows", help="e.g. 2,3,4")] = None,
    depths: Annotated[str | None, typer.Option("--depths", help="e.g. 1,2,3")] = None,
) -> dict[str, Any]:
    """Rebuild span R = W + (D-1)(W-1) of D layers of window W, checked on every 0/1 input two longer than R."""
    return {"span_windows": int_list(windows), "span_depths": int_list(depths)}


@_lab("cost")
def rebuild_cost(
    window: Annotated[int | None, typer.Option("--window", help="SWA window of the example table")] = None,
    keep: Annotated[int | None, typer.Option("--keep", help="keep count of the example table")] = None,
    producer: Annotated[int | None, typer.Option("--producer-layers")] = None,
    consumer: Annotated[int | None, typer.Option("--consumer-layers")] = None,
    row_keep: Annotated[int | None, typer.Option("--row-keep", help="keep count of the row-work table")] = None,
    lengths: Annotated[str | None, typer.Option("--lengths", help="e.g. 64,1024,16384")] = None,
    chunked_length: Annotated[int | None, typer.Option("--chunked-length", help="prompt of the chunk example")] = None,
    chunk: Annotated[int | None, typer.Option("--chunk", help="chunk size of the chunk example")] = None,
) -> dict[str, Any]:
    """Consumer rows and SWA pairs for off / mask / compact rebuild, checked against pair enumeration."""
    return {
        "cost_window": window,
        "cost_keep": keep,
        "producer_layers": producer,
        "consumer_layers": consumer,
        "row_keep": row_keep,
        "lengths": int_list(lengths),
        "chunked_length": chunked_length,
        "chunk": chunk,
    }
