"""`lab catalog ingest|ls|show|export|headline|track`: the data catalog (catalog/tables/*.parquet)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from lab.cli.common import AsJson, CatalogDir, ReportsDir, RunsDir, group, resolve, settings_for

app = group("the data catalog (catalog/tables/*.parquet)")


@app.command("ingest")
def catalog_ingest(runs_dir: RunsDir = None, catalog_dir: CatalogDir = None) -> None:
    """Validate every run folder and rebuild the catalog tables (swapped in whole) and catalog/metrics.json; a
    folder that fails is skipped in one line."""
    from lab.catalog.ingest import ingest

    s = settings_for(runs_dir=runs_dir, catalog_dir=catalog_dir)
    r = ingest(s.runs_dir, s.catalog_dir)
    rows = ", ".join(f"{k} {v}" for k, v in r.rows.items() if v)
    typer.echo(f"{r.runs} runs ({r.in_figures} complete) -> {r.tables_dir}: {rows or 'no rows'}")


@app.command("ls")
def catalog_ls(runs_dir: RunsDir = None, as_json: AsJson = False) -> None:
    """List run folders: id, experiment, host, engine commit, status."""
    from lab.catalog.listing import listed_runs, listing_record
    from lab.core.console import lab_console
    from lab.presenters.catalog import runs_listing

    runs = listed_runs(settings_for(runs_dir=runs_dir).runs_dir)
    if as_json:
        typer.echo(json.dumps(listing_record(runs), indent=1))
    else:
        lab_console().print(runs_listing(runs))


@app.command("show")
def catalog_show(
    run: Annotated[str, typer.Argument(help="run id (or unique prefix) or path")],
    runs_dir: RunsDir = None,
    as_json: AsJson = False,
) -> None:
    """One run with its provenance (host, CPU, engine, patch, model, lab commit), inputs, results and tables."""
    from lab.catalog.listing import run_detail
    from lab.presenters.catalog import run_details

    detail = run_detail(resolve(run, settings_for(runs_dir=runs_dir).runs_dir).path)
    if as_json:
        typer.echo(json.dumps(detail, indent=1))
        return
    for line in run_details(detail):
        typer.echo(line)


@app.command("export")
def catalog_export(
    table: Annotated[str, typer.Argument(help="a catalog table: runs, sweep_points, profile_bands, ...")],
    fmt: Annotated[str, typer.Option("--format", help="csv | jsonl | md")] = "csv",
    catalog_dir: CatalogDir = None,
) -> None:
    """Print a catalog table with its runs' provenance, in llama-bench's column names where they overlap
    (n_prompt, n_depth, avg_ts, build_commit, cpu_info, model_filename, n_threads)."""
    from lab.catalog.export import export_table

    sys.stdout.write(export_table(settings_for(catalog_dir=catalog_dir).catalog_dir, table, fmt))


@app.command("headline")
def catalog_headline_cmd(
    catalog_dir: CatalogDir = None, reports_dir: ReportsDir = None, as_json: AsJson = False
) -> None:
    """The answer, per host and model: an agent step with the cache vs re-prefilled, and where the time goes."""
    from lab.catalog.headline import catalog_headline, conversation_lines
    from lab.core.console import lab_console, shown
    from lab.presenters.catalog import print_headline

    s = settings_for(catalog_dir=catalog_dir, reports_dir=reports_dir)
    steps, profiles = catalog_headline(s.catalog_dir)
    if as_json:
        record = {
            "steps": [x.model_dump(mode="json") for x in steps],
            "profiles": [x.model_dump(mode="json") for x in profiles],
        }
        typer.echo(json.dumps(record, indent=1))
        return
    console = lab_console()
    print_headline(console, steps, profiles, empty="no complete sweep or profile in the catalog yet")
    for line in conversation_lines(s.catalog_dir):  # a task's id is the agent's: text, not markup
        console.print(shown(line), highlight=False)
    if (index := s.reports_dir / "index.html").exists():
        console.print(f"open {index}", highlight=False)


@app.command("track")
def catalog_track(runs_dir: RunsDir = None) -> None:
    """`dvc add` every finished run folder not tracked yet (then commit the .dvc files and `dvc push`)."""
    from lab.catalog.dvc import track_runs

    s = settings_for(runs_dir=runs_dir)
    added = track_runs(s.runs_dir, s.runs_dir.resolve().parent)
    typer.echo(f"tracked {len(added)} run folder(s)" + "".join(f"\n  {a}" for a in added))
