"""What a finished run prints (the printer `run_command` passes to the experiment protocol): each experiment's
records picked out and handed to the presenters (lab.presenters.runs); the sweep's closing answer comes from the
runs folder through the experiments layer (lab.experiments.sweep.run.sweep_headline).

The printer is chosen by the experiment's name (the manifest's `experiment`), one per experiment: a tune is a
conversation replay too (its class a Replay), and prints its own tables, not the replay's."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console

from lab.experiments.conversation import Replay
from lab.experiments.decode import DecodeCheck
from lab.experiments.profile.run import Profile
from lab.experiments.protocol import Experiment, OpenRun, Outcome
from lab.experiments.sweep.run import Sweep, sweep_headline
from lab.experiments.tune import Tune
from lab.presenters.catalog import print_headline
from lab.presenters.runs import show_decode, show_profile, show_replay, show_sweep, show_tune

Printer = Callable[[Experiment, OpenRun, Outcome, Console], None]


def _sweep(experiment: Experiment, sess: OpenRun, outcome: Outcome, console: Console) -> None:
    assert isinstance(experiment, Sweep)
    starts = outcome.results.get("process_start_s", [])
    plan, took_s, revised = experiment.plan, experiment.took_s, experiment.revised
    show_sweep(console, experiment.points, experiment.summary, starts, plan, took_s, revised)
    print_headline(console, *sweep_headline(experiment, sess))


def _profile(experiment: Experiment, sess: OpenRun, outcome: Outcome, console: Console) -> None:
    assert isinstance(experiment, Profile)
    show_profile(console, experiment.rows, experiment.summary, experiment.prediction, experiment.cost)


def _decode(experiment: Experiment, sess: OpenRun, outcome: Outcome, console: Console) -> None:
    assert isinstance(experiment, DecodeCheck)
    show_decode(console, experiment.rows, sess.model.name, sess.settings.server.threads)


def _tune(experiment: Experiment, sess: OpenRun, outcome: Outcome, console: Console) -> None:
    assert isinstance(experiment, Tune)
    described = experiment.plan.describe(experiment.took_s) if experiment.plan is not None else None
    show_tune(console, experiment.steps, experiment.totals, experiment.causes, experiment.results, described)


def _replay(experiment: Experiment, sess: OpenRun, outcome: Outcome, console: Console) -> None:
    assert isinstance(experiment, Replay)
    show_replay(console, experiment.steps, experiment.totals, experiment.causes)


PRINTERS: dict[str, Printer] = {
    Sweep.name: _sweep,
    Profile.name: _profile,
    DecodeCheck.name: _decode,
    Tune.name: _tune,
    Replay.name: _replay,
}


def show_run(experiment: Experiment, sess: OpenRun, outcome: Outcome, console: Console) -> None:
    """The closing tables of `experiment`'s run, by its name (an experiment without a printer prints none)."""
    printer = PRINTERS.get(experiment.name)
    if printer is not None:
        printer(experiment, sess, outcome, console)
