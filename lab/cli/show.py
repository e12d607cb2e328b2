"""What a finished run prints, and `lab show RUN`: each experiment's answer read from the run's folder
(lab.experiments.answer: the rows and results it stored) and handed to the presenters (lab.presenters.runs). The
run's own closing tables and `lab show` read the same stored records through the same printer, so they are the
same; the sweep closes with its headline (lab.catalog.headline, on its stored points).

The printer is chosen by the experiment's name (the manifest's `experiment`), one per experiment: a tune is a
conversation replay too (its class a Replay), and prints its own tables, not the replay's. An interleaved run
(`--vs`) prints its B/A table (lab.presenters.compare).

Imported by `lab.cli` for the command: what it needs is imported inside the functions, so `lab --help` stays
instant."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from lab.cli.common import AsJson, RunsDir, WideOpt, resolve, settings_for

if TYPE_CHECKING:
    from rich.console import Console

    from lab.experiments.answer import Answer, StoredRun
    from lab.experiments.protocol import Experiment, OpenRun, Outcome

Printer = Callable[["Any", "Console", bool], None]  # an answer (lab.experiments.answer) onto a console; wide


def _sweep(answer: Any, console: Console, wide: bool) -> None:
    from lab.experiments.answer import SweepAnswer
    from lab.presenters.catalog import print_headline
    from lab.presenters.runs import show_sweep

    assert isinstance(answer, SweepAnswer)
    a = answer
    show_sweep(console, a.points, a.summary, a.starts, a.plan, a.took_s, a.after, wide, a.share)
    print_headline(console, a.steps, a.profiles)


def _profile(answer: Any, console: Console, wide: bool) -> None:
    from lab.experiments.answer import ProfileAnswer
    from lab.presenters.runs import show_profile

    assert isinstance(answer, ProfileAnswer)
    show_profile(console, answer.bands, answer.summary, answer.prediction, answer.cost, wide=wide)


def _decode(answer: Any, console: Console, wide: bool) -> None:
    from lab.experiments.answer import DecodeAnswer
    from lab.presenters.runs import show_decode

    assert isinstance(answer, DecodeAnswer)
    show_decode(console, answer.rows, answer.model, answer.threads, wide=wide)


def _tune(answer: Any, console: Console, wide: bool) -> None:
    from lab.experiments.answer import TuneAnswer
    from lab.presenters.runs import show_tune

    assert isinstance(answer, TuneAnswer)
    show_tune(console, answer.steps, answer.totals, answer.causes, answer.settings, answer.plan, wide=wide)


def _replay(answer: Any, console: Console, wide: bool) -> None:
    from lab.experiments.answer import ReplayAnswer
    from lab.presenters.runs import show_replay

    assert isinstance(answer, ReplayAnswer)
    show_replay(console, answer.steps, answer.totals, answer.causes, wide=wide)


# by the experiment's name (lab.experiments.*: Sweep, Profile, DecodeCheck, Tune, Replay)
PRINTERS: dict[str, Printer] = {
    "sweep": _sweep,
    "profile": _profile,
    "decode": _decode,
    "tune": _tune,
    "conversation": _replay,
}


def print_answer(experiment: str, answer: Answer, console: Console, wide: bool = False) -> None:
    """A run's closing tables from its answer: its experiment's printer, or an interleaved run's B/A table
    (`wide`: every column; by default the answer and its checks at 100 columns)."""
    from lab.experiments.answer import VersusAnswer
    from lab.presenters.compare import compare_table

    if isinstance(answer, VersusAnswer):
        console.print(compare_table(answer.comparison, wide=wide))
    else:
        PRINTERS[experiment](answer, console, wide)


def show_run(experiment: Experiment, sess: OpenRun, outcome: Outcome, console: Console) -> None:
    """The closing tables of `experiment`'s run, by its name, from what the run stored (an experiment without a
    printer prints none): what `lab show RUN` prints of it later."""
    from lab.experiments.answer import run_answer

    if experiment.name in PRINTERS:
        answer = run_answer(sess.run.path, sess.run.manifest(), sess.settings)
        print_answer(experiment.name, answer, console)


def show(
    run: Annotated[str, typer.Argument(help="run id (or unique prefix), <id>/a for a side of a --vs run, or path")],
    runs_dir: RunsDir = None,
    as_json: AsJson = False,
    wide: WideOpt = False,
) -> None:
    """A finished run's answer from its folder, here or fetched from a host: the tables it printed at its end
    (a sweep, a profile, a decode check, a conversation replay, a tune, or an interleaved --vs run's B/A). A run
    that is not complete prints what it stored so far, then says so in one line and exits 1."""
    from lab.core.console import lab_console
    from lab.experiments.answer import as_json as answer_json
    from lab.experiments.answer import read_run

    s = settings_for(runs_dir=runs_dir)
    stored: StoredRun = read_run(resolve(run, s.runs_dir).path, s)
    if as_json:
        import json

        typer.echo(json.dumps({"run": str(stored.path), **answer_json(stored.answer)}, indent=1))
    else:
        print_answer(stored.manifest.experiment, stored.answer, lab_console(), wide)
    if not stored.complete:
        from lab.core.errors import RunError

        m = stored.manifest
        why = f" ({m.reason})" if m.reason else ""
        raise RunError(
            f"{stored.path.name} is {m.status}{why}: the tables hold what it stored so far; finish it with "
            f"--resume {stored.path.name}"
        )
