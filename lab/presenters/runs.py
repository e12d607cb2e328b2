"""What a finished run prints, from its experiment's records: the closing tables of `lab sweep`, `lab profile`,
`lab engine decode` and `lab trace replay` (lab.cli.show picks each experiment's records and passes them here)."""

from __future__ import annotations

from rich.console import Console

from lab.core.schemas import (
    ArmsSummary,
    BandDepth,
    ConversationCauseResult,
    ConversationStepResult,
    ConversationTaskResult,
    DecodeDepth,
    ProfileSummary,
    SweepPoint,
)
from lab.core.schemas.trace import TuneSetting
from lab.measure.costmodel import CostModel
from lab.measure.plan import Plan, plan_line
from lab.measure.timemodel import TimePrediction
from lab.presenters.conversation import replay_tables
from lab.presenters.decode import decode_table
from lab.presenters.model import time_tables
from lab.presenters.profile import (
    attn_kind_table,
    band_fit_line,
    efficiency_table,
    fake_real_table,
    prediction_lines,
    profile_table,
    reference_lines,
)
from lab.presenters.sweep import print_summary
from lab.presenters.tune import recommendation, tune_tables


def show_sweep(
    console: Console,
    points: list[SweepPoint],
    summary: ArmsSummary | None,
    starts: list[float],
    plan: Plan | None,
    took_s: float,
    revised: Plan | None,
) -> None:
    """The sweep's tables per place, then its plan against what it took (the answer follows: print_headline)."""
    print_summary(console, points, summary, starts)
    if plan is not None:
        console.print(plan_line(plan, took_s, revised), highlight=False)


def show_profile(
    console: Console,
    rows: list[BandDepth],
    summary: ProfileSummary | None,
    prediction: TimePrediction | None,
    cost: CostModel | None,
) -> None:
    if summary is None:
        return
    console.print(profile_table(rows, summary))
    if summary.attn_kinds:
        console.print(attn_kind_table(summary))
    if summary.fake_vs_real:
        console.print(fake_real_table(summary))
    if any(r.gflops for r in rows):
        console.print(efficiency_table(rows, summary))
    if prediction is not None and prediction.at and cost is not None:
        console.print(time_tables(prediction, cost)[0])
    for line in [band_fit_line(summary), *reference_lines(summary), *prediction_lines(summary)]:
        if line:
            console.print(line, highlight=False)


def show_decode(console: Console, rows: list[DecodeDepth], model: str, threads: int) -> None:
    console.print(decode_table(rows, model, threads))


def show_replay(
    console: Console,
    steps: list[ConversationStepResult],
    totals: list[ConversationTaskResult],
    causes: list[ConversationCauseResult],
) -> None:
    for table in replay_tables(steps, totals, causes):
        console.print(table)


def show_tune(
    console: Console,
    steps: list[ConversationStepResult],
    totals: list[ConversationTaskResult],
    causes: list[ConversationCauseResult],
    results: list[TuneSetting],
    plan: str | None,
) -> None:
    """The replay's tables and the settings', the plan against what it took (`plan`, described), the
    recommendation."""
    for table in (*replay_tables(steps, totals, causes), *tune_tables(results)):
        console.print(table)
    if plan is not None:
        console.print(plan, highlight=False, soft_wrap=True)
    console.print(recommendation(results), highlight=False, soft_wrap=True)
