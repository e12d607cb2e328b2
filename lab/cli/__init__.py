"""`lab` command line: thin commands that map flags to settings and call library functions.

The whole command tree is here; each group's commands are in a module of their own (host, engine, model,
trace, rebuild, catalog), the top-level ones in experiments (sweep, arms, profile) and reports (report,
compare, dvc-setup). The error policy, the settings loader and every shared option are in common; what a
finished run prints (each experiment's records, read from its folder, handed to the presenters) in show, with
`lab show RUN`, which prints them again.
Heavy modules are imported inside commands so `lab --help` stays instant.

It may import every layer below it; only lab.remote sits above.
"""

from __future__ import annotations

from lab.cli import catalog, engine, experiments, host, model, rebuild, reports, show, trace
from lab.cli.common import LabApp

app = LabApp(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="markdown",  # a docstring's lines wrap as prose (its hard line breaks are the source's)
    help="prefill lab: measured prefill cost on CPU",
)
app.command("sweep")(experiments.sweep)
app.command("arms", help=experiments.ARMS_HELP)(experiments.arms)
app.command("profile")(experiments.profile)
app.command("replay-trace", hidden=True)(trace.trace_replay)  # the name of `lab trace replay` until it had one
app.command("dvc-setup")(reports.dvc_setup_cmd)
app.command("report")(reports.report)
app.command("compare")(reports.compare)
app.command("show")(show.show)
app.add_typer(engine.app, name="engine")
app.add_typer(model.app, name="model")
app.add_typer(trace.app, name="trace")
app.add_typer(rebuild.app, name="rebuild")
app.add_typer(rebuild.app, name="replay", hidden=True)  # the rebuild labs' name until `lab trace replay` had it alone
app.add_typer(host.app, name="host")
app.add_typer(catalog.app, name="catalog")

__all__ = ["app"]
