"""What a finished run prints (the printer `run_command` passes to the experiment protocol): each experiment's
records picked out and handed to the presenters (lab.presenters.runs); the sweep's closing answer comes from the
runs folder through the experiments layer (lab.experiments.sweep.run.sweep_headline)."""

from __future__ import annotations

from rich.console import Console

from lab.experiments.conversation import Replay
from lab.experiments.decode import DecodeCheck
from lab.experiments.profile.run import Profile
from lab.experiments.protocol import Experiment, OpenRun, Outcome
from lab.experiments.sweep.run import Sweep, sweep_headline
from lab.experiments.tune import Tune
from lab.presenters import print_headline
from lab.presenters.runs import show_decode, show_profile, show_replay, show_sweep, show_tune


def show_run(experiment: Experiment, sess: OpenRun, outcome: Outcome, console: Console) -> None:
    if isinstance(experiment, Sweep):
        starts = outcome.results.get("process_start_s", [])
        plan, took_s, revised = experiment.plan, experiment.took_s, experiment.revised
        show_sweep(console, experiment.points, experiment.summary, starts, plan, took_s, revised)
        print_headline(console, *sweep_headline(experiment, sess))
    elif isinstance(experiment, Profile):
        show_profile(console, experiment.rows, experiment.summary, experiment.prediction, experiment.cost)
    elif isinstance(experiment, DecodeCheck):
        show_decode(console, experiment.rows, sess.model.name, sess.settings.server.threads)
    elif isinstance(experiment, Tune):
        described = experiment.plan.describe(experiment.took_s) if experiment.plan is not None else None
        show_tune(console, experiment.steps, experiment.totals, experiment.causes, experiment.results, described)
    elif isinstance(experiment, Replay):
        show_replay(console, experiment.steps, experiment.totals, experiment.causes)
