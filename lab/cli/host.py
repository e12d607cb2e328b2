"""`lab host check|restore`: this host as a measurement sees it."""

from __future__ import annotations

from typing import Annotated

import typer

from lab.cli.common import RunsDir, group, resolve, settings_for

app = group("this host as a measurement sees it")


@app.command("check")
def host_check(
    seconds: Annotated[float, typer.Option("--seconds", help="also sample the host for this long")] = 3.0,
) -> None:
    """What can disturb a measurement here (governor, turbo, SMT, THP, load, busy processes), and steal time,
    context switches and the clock over a short window; every run records the same."""
    from lab.core.hostnoise import check_host
    from lab.core.shell import LocalShell

    found = check_host(LocalShell(), seconds)
    for line in found.lines:
        typer.echo(line)
    for w in found.warnings:
        typer.secho(f"warning: {w}", fg="yellow")
    if not found.warnings:
        typer.echo("no warnings")


@app.command("restore")
def host_restore(
    run: Annotated[str, typer.Argument(help="the run (id, prefix or folder) whose clean room stopped the server")],
    runs_dir: RunsDir = None,
) -> None:
    """Start the host's server again with the start command a clean-room run recorded: after a SIGKILL of the
    lab (no handler sees one, so nothing restarted it). Prints the command, then runs it here."""
    from lab.measure.cleanroom import restore

    restore(resolve(run, settings_for(runs_dir=runs_dir).runs_dir), typer.echo)
