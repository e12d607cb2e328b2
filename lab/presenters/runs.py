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
    ServerShare,
    SweepPoint,
)
from lab.core.schemas.trace import TuneSetting
from lab.measure.costmodel import CostModel
from lab.measure.plan import Plan, plan_line
from lab.measure.timemodel import TimePrediction
from lab.presenters.conversation import replay_tables
from lab.presenters.decode import decode_tables
from lab.presenters.model import time_tables
from lab.presenters.profile import (
    attn_kind_table,
    band_fit_line,
    checks_table,
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
    after: Plan | None = None,
    wide: bool = False,
    share: ServerShare | None = None,
) -> None:
    """The sweep's tables per place (`wide`: every column), the server's share over the grid, then its plan
    against what it took (the answer follows: print_headline)."""
    print_summary(console, points, summary, starts, wide, share)
    if plan is not None:
        console.print(plan_line(plan, took_s, after), highlight=False)


def show_profile(
    console: Console,
    rows: list[BandDepth],
    summary: ProfileSummary | None,
    prediction: TimePrediction | None,
    cost: CostModel | None,
    wide: bool = False,
) -> None:
    """The band table and its checks (`wide`: in one table), the layer kinds', fake vs real depth's, achieved
    GFLOP/s and the predicted ms per band, then the checks and the predictions in words."""
    if summary is None:
        return
    console.print(profile_table(rows, summary, wide))
    if not wide:
        console.print(checks_table(rows, summary))
    if summary.attn_kinds:
        console.print(attn_kind_table(summary))
    if summary.fake_vs_real:
        console.print(fake_real_table(summary, wide))
    if any(r.gflops for r in rows):
        console.print(efficiency_table(rows, summary, wide))
    if prediction is not None and prediction.at and cost is not None:
        console.print(time_tables(prediction, cost, wide)[0])
    for line in [band_fit_line(summary), *reference_lines(summary), *prediction_lines(summary)]:
        if line:
            console.print(line, highlight=False)


def show_decode(console: Console, rows: list[DecodeDepth], model: str, threads: int, wide: bool = False) -> None:
    for table in decode_tables(rows, model, threads, wide):
        console.print(table)


def show_replay(
    console: Console,
    steps: list[ConversationStepResult],
    totals: list[ConversationTaskResult],
    causes: list[ConversationCauseResult],
    wide: bool = False,
) -> None:
    for table in replay_tables(steps, totals, causes, wide):
        console.print(table)


def show_tune(
    console: Console,
    steps: list[ConversationStepResult],
    totals: list[ConversationTaskResult],
    causes: list[ConversationCauseResult],
    results: list[TuneSetting],
    plan: str | None,
    wide: bool = False,
) -> None:
    """The replay's tables and the settings', the plan against what it took (`plan`, described), the
    recommendation."""
    for table in (*replay_tables(steps, totals, causes, wide), *tune_tables(results, wide)):
        console.print(table)
    if plan is not None:
        console.print(plan, highlight=False, soft_wrap=True)
    console.print(recommendation(results), highlight=False, soft_wrap=True)
