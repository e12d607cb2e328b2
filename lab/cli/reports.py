"""`lab report`, `lab compare` and `lab dvc-setup`: what is drawn from the catalog, and where it is kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from lab.cli.common import AsJson, CatalogDir, RunsDir, WideOpt, resolve, settings_for


def report(catalog_dir: CatalogDir = None, out: Annotated[Path | None, typer.Option("--out")] = None) -> None:
    """Render the reports from the catalog tables: index.html (opening with the answer), agreement, bands,
    roofline, arms, conversation and rebuild charts."""
    from lab.reports import render_reports

    s = settings_for(catalog_dir=catalog_dir, reports_dir=out)
    paths = render_reports(s.catalog_dir, s.reports_dir, s.report)
    typer.echo(f"{len(paths)} files in {s.reports_dir}; open {s.reports_dir / 'index.html'}")


def compare(
    run_a: Annotated[str, typer.Argument(help="baseline run (id or path; a side of an interleaved run: <id>/a)")],
    run_b: Annotated[
        str | None, typer.Argument(help="run to compare with it (none: run_a is an interleaved run, B/A of its sides)")
    ] = None,
    as_report: Annotated[bool, typer.Option("--report", help="also write compare_<a>_vs_<b>.* to reports/")] = False,
    fail_above: Annotated[
        float | None,
        typer.Option("--fail-above", metavar="PCT", help="exit 1 when B is significantly slower than A by PCT %"),
    ] = None,
    run_drift: Annotated[
        float,
        typer.Option(
            "--run-drift",
            min=0.0,
            max=1.0,
            metavar="SIGMA",
            help="this host's run-to-run drift (log SD, printed by benchmarks/aa_test.py): the intervals carry it",
        ),
    ] = 0.0,
    runs_dir: RunsDir = None,
    catalog_dir: CatalogDir = None,
    as_json: AsJson = False,
    wide: WideOpt = False,
) -> None:
    """Two sweep, two arms, two profile or two decode runs side by side: B/A per point with its 95% interval (from
    both runs' samples), each row called faster, slower, the same or undecided at 1 +- 3%, and the geometric mean
    over the grid. Runs not in the runs folder are read from the catalog's tables (a catalog pulled without its
    run folders). One run made with --vs: its two configurations, paired by process pair, called alike."""
    from lab.catalog.compare import compare_catalog, compare_runs, compare_sides
    from lab.core.console import lab_console
    from lab.core.runs import RunError
    from lab.presenters.compare import compare_table

    s = settings_for(runs_dir=runs_dir, catalog_dir=catalog_dir)
    if run_b is None:
        c = compare_sides(resolve(run_a, s.runs_dir).path)
    else:
        try:
            a, b = resolve(run_a, s.runs_dir).path, resolve(run_b, s.runs_dir).path
        except RunError:
            c = compare_catalog(s.catalog_dir, run_a, run_b, run_drift)
        else:
            c = compare_runs(a, b, run_drift)
    if as_json:
        typer.echo(json.dumps(c.record(), indent=1))
    else:
        lab_console().print(compare_table(c, wide=wide))
    if as_report:
        from lab.reports import render_compare

        for p in render_compare(c, s.reports_dir, s.report):
            typer.echo(str(p))
    slow = c.slowdown_report(fail_above) if fail_above is not None else []
    for line in slow:
        typer.secho(line, fg="red", err=True)
    if slow:
        raise typer.Exit(1)


def dvc_setup_cmd() -> None:
    """Configure DVC for this clone: SSH host-key verification, analytics off, local site cache."""
    from lab.catalog.dvc import dvc_setup
    from lab.core.settings import REPO_ROOT

    for line in dvc_setup(REPO_ROOT, settings_for().cache_dir):
        typer.echo(line)
