"""What a finished run prints, from its experiment's records: the closing tables of `lab sweep`, `lab profile`,
`lab engine decode` and `lab trace replay` (the CLI passes `show_run` to the experiment protocol)."""

from __future__ import annotations

from rich.console import Console

from lab.catalog.headline import newest_profile, steps_of
from lab.experiments.conversation import Replay
from lab.experiments.decode import DecodeCheck
from lab.experiments.profile import Profile
from lab.experiments.protocol import Experiment, OpenRun, Outcome
from lab.experiments.sweep import Sweep
from lab.experiments.tune import Tune
from lab.measure.plan import plan_line
from lab.presenters import print_headline, time_tables
from lab.presenters.conversation import replay_tables
from lab.presenters.decode import decode_table
from lab.presenters.profile import attn_kind_table, efficiency_table, prediction_lines, profile_table, reference_lines
from lab.presenters.sweep import print_summary
from lab.presenters.tune import recommendation, tune_tables


def show_run(experiment: Experiment, sess: OpenRun, outcome: Outcome, console: Console) -> None:
    if isinstance(experiment, Sweep):
        show_sweep(experiment, sess, outcome, console)
    elif isinstance(experiment, Profile):
        show_profile(experiment, console)
    elif isinstance(experiment, DecodeCheck):
        console.print(decode_table(experiment.rows, sess.model.name, sess.settings.server.threads))
    elif isinstance(experiment, Tune):
        for table in (
            *replay_tables(experiment.steps, experiment.totals, experiment.causes),
            *tune_tables(experiment.results),
        ):
            console.print(table)
        if experiment.plan is not None:
            console.print(experiment.plan.describe(experiment.took_s), highlight=False, soft_wrap=True)
        console.print(recommendation(experiment.results), highlight=False, soft_wrap=True)
    elif isinstance(experiment, Replay):
        for table in replay_tables(experiment.steps, experiment.totals, experiment.causes):
            console.print(table)


def show_sweep(sweep: Sweep, sess: OpenRun, outcome: Outcome, console: Console) -> None:
    print_summary(console, sweep.points, sweep.summary, outcome.results.get("process_start_s", []))
    if sweep.plan is not None:
        console.print(plan_line(sweep.plan, sweep.took_s, sweep.revised), highlight=False)
    # the answer: the step with the cache vs re-prefilled, and where the newest profile says time goes
    host = sess.run.manifest().host
    server = [p for p in sweep.points if p.where == "server"]
    steps = steps_of(server, host, sess.model.name, sess.run.path.name)
    profile = newest_profile(sess.settings.runs_dir, sess.parts.model_record.get("sha256", ""), host)
    print_headline(console, steps, [profile] if profile else [])


def show_profile(p: Profile, console: Console) -> None:
    if p.summary is None:
        return
    console.print(profile_table(p.rows, p.summary))
    if p.summary.attn_kinds:
        console.print(attn_kind_table(p.summary))
    if any(r.gflops for r in p.rows):
        console.print(efficiency_table(p.rows, p.summary))
    if p.prediction is not None and p.prediction.at and p.cost is not None:
        console.print(time_tables(p.prediction, p.cost)[0])
    for line in [*reference_lines(p.summary), *prediction_lines(p.summary)]:
        console.print(line, highlight=False)
