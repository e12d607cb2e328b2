"""`lab sweep`, `lab arms` (the sweep in one process) and `lab profile`: the measurements on the engine."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from lab.cli.common import (
    ArmsOpt,
    AsJson,
    BaselineReps,
    BenchCheck,
    BudgetOpt,
    CleanRoom,
    CtxSize,
    EngineOpt,
    FillPasses,
    HostOk,
    ImagesOpt,
    LsOpt,
    MaxProcesses,
    MaxReps,
    MinReps,
    Mmproj,
    ModelOpt,
    NewsOpt,
    NOutOpt,
    PeaksOpt,
    PlanOpt,
    PredictDepths,
    ProbeChunk,
    ProbeDepths,
    ProbeFill,
    ProcessesOpt,
    ProfileProcesses,
    ProfileReps,
    RatesOpt,
    RealCheck,
    RealMaxDepth,
    RepsOpt,
    Resume,
    RunsDir,
    TargetOpt,
    ThreadpoolOpt,
    Threads,
    ThreadsBatch,
    VsOpt,
    WhereOpt,
    check_vs,
    int_list,
    run_command,
    settings_for,
    str_list,
)

if TYPE_CHECKING:
    from lab.core.settings import Settings


def sweep(
    Ls: LsOpt = None,
    news: NewsOpt = None,
    images: ImagesOpt = None,
    mmproj: Mmproj = None,
    reps: RepsOpt = None,
    min_reps: MinReps = None,
    max_reps: MaxReps = None,
    target: TargetOpt = None,
    arms: ArmsOpt = None,
    where: WhereOpt = None,
    baseline_reps: BaselineReps = None,
    fill_passes: FillPasses = None,
    processes: ProcessesOpt = None,
    n_out: NOutOpt = None,
    threads: Threads = None,
    ctx_size: CtxSize = None,
    model: ModelOpt = None,
    release: EngineOpt = None,
    runs_dir: RunsDir = None,
    resume: Resume = None,
    host_ok: HostOk = False,
    plan: PlanOpt = False,
    rates: RatesOpt = None,
    budget: BudgetOpt = None,
    vs: VsOpt = None,
    as_json: AsJson = False,
) -> None:
    """Live sweep over L x new: fake prefix and genuine hit, against opt_prefill = new / prefill_tps(L).

    Each point gets interleaved reps until its verdicts (fake vs genuine, fake vs estimate: agree, disagree or
    undecided at 95%) are decided and fake/genuine is as narrow as --target, between --min-reps and --max-reps,
    spread over at least --processes server and driver processes (every interval resamples processes, then reps:
    a rerun's process varies by more than one process's reps do).
    A rep costs its new tokens: the genuine hit restores a saved depth-L state, the estimate is the in-process
    chunk at depth L, the baseline comes from cumulative fill passes (add `baseline` to --arms for direct reps;
    `plain` adds a genuine hit that prefills L per rep, the restore's proof). --where inproc measures the same
    grid in one process with libllama (no server in the numbers; the cache read is timed against a memcpy),
    --where both at every point in both places (server / in-process per arm: the server's own share).
    --n-out 32: the fake arm also generates 32 tokens, its decode ms/token at depth L + new (through the server).
    --plan prints the predicted wall time per arm first; --budget 30m picks the reps that fit."""
    s = settings_for(
        None,
        {"sdist_version": release},
        model=model,
        runs_dir=runs_dir,
        mmproj=mmproj,
        sweep={
            "Ls": int_list(Ls),
            "news": int_list(news),
            "reps": reps,
            "images": str_list(images),
            "min_reps": min_reps,
            "max_reps": max_reps,
            "target": target,
            "arms": str_list(arms),
            "baseline_reps": baseline_reps,
            "fill_passes": fill_passes,
            "processes": processes,
            "rates": rates,
            "where": where,
            "n_out": n_out,
        },
        server={"threads": threads, "ctx_size": ctx_size},
    )
    _run_sweep(s, resume, plan, budget, vs, as_json, host_ok)


def _run_sweep(
    s: Any, resume: str | None, plan: bool, budget: str | None, vs: list[str] | None, as_json: bool, host_ok: bool
) -> None:
    """The sweep of settings `s`: its plan first (`--plan`: only that; `--budget`: the reps it affords), both
    configurations at the same reps with `--vs`, then the run (or `resume`)."""
    from lab.core.console import lab_console
    from lab.core.errors import UsageError
    from lab.experiments.sweep.run import Sweep
    from lab.experiments.versus.config import paired_design

    console = lab_console(quiet=as_json)
    check_vs(s, vs, Sweep.name)
    if vs is not None:  # both sides get the same reps (lab.experiments.versus): the plan is of those
        if budget is not None:
            raise UsageError("--budget with --vs: give --reps instead (both configurations get the same reps)")
        s = paired_design(s)
    if resume is None and (s := _plan_first(s, plan, budget, console, 2 if vs else 1)) is None:
        return
    run_command(Sweep(), s, resume, as_json, console, vs, host_ok)


def _plan_first(settings: Any, show: bool, budget: str | None, console: Any, sides: int = 1) -> Any:
    """`--plan` (print the plan and measure nothing: returns None) and `--budget` (the reps it affords); `sides`:
    2 for an interleaved run of two configurations (`--vs`), each assumed to cost what the first does."""
    if not show and budget is None:
        return settings
    from lab.experiments.sweep.planning import plan_draft, predicted_draft
    from lab.presenters.plan import budget_line, plan_table, predicted_line

    draft = plan_draft(settings, settings.sweep.where, budget)
    if budget is not None:
        console.print(budget_line(budget, draft.settings.sweep.max_reps), highlight=False)
    console.print(plan_table(draft.old, draft.new))
    console.print(predicted_line(predicted_draft(draft, sides), sides), highlight=False)
    return None if show else draft.settings


@functools.wraps(sweep)
def arms(**options: Any) -> None:  # the sweep's options and help; --where inproc unless given
    sweep(**{**options, "where": options.get("where") or "inproc"})


ARMS_HELP = "The sweep in one process, no server: `lab sweep --where inproc` (--where both: also through the server)."


def profile(
    chunk: ProbeChunk = None,
    depths: ProbeDepths = None,
    fill: ProbeFill = None,
    processes: ProfileProcesses = None,
    reps: ProfileReps = None,
    max_processes: MaxProcesses = None,
    real_check: RealCheck = None,
    real_max_depth: RealMaxDepth = None,
    bench_check: BenchCheck = None,
    threads: Threads = None,
    threads_batch: ThreadsBatch = None,
    clean_room: CleanRoom = None,
    threadpool: ThreadpoolOpt = None,
    peaks: PeaksOpt = None,
    predict_depths: PredictDepths = None,
    model: ModelOpt = None,
    release: EngineOpt = None,
    runs_dir: RunsDir = None,
    resume: Resume = None,
    host_ok: HostOk = False,
    plan: PlanOpt = False,
    rates: RatesOpt = None,
    budget: BudgetOpt = None,
    vs: VsOpt = None,
    as_json: AsJson = False,
) -> None:
    """Per-node prefill profile at a list of depths (each reached by a fake prefix), sorted into five bands.

    --plan prints the predicted wall time per part and measures nothing; --budget 1h picks the reps that fit."""
    from lab.experiments.profile.run import Profile

    stop, start = clean_room or (None, None)
    s = settings_for(
        None,
        {"sdist_version": release},
        model=model,
        runs_dir=runs_dir,
        profile={
            "chunk": chunk,
            "depths": depths,
            "fill": fill,
            "processes": processes,
            "reps": reps,
            "max_processes": max_processes,
            "real_check": real_check,
            "real_max_depth": real_max_depth,
            "bench_check": bench_check,
            "threads": threads,
            "threads_batch": threads_batch,
            "threadpool": threadpool,
            "peaks": peaks,
            "predict_depths": int_list(predict_depths),
            "clean_room_stop": stop,
            "clean_room_start": start,
        },
    )
    if resume is None and (s := _plan_profile(s, plan, rates, budget, vs, as_json)) is None:
        return
    run_command(Profile(), s, resume, as_json, vs=vs, host_ok=host_ok)


def _plan_profile(
    s: Settings, show: bool, rates: str | None, budget: str | None, vs: list[str] | None, as_json: bool
) -> Settings | None:
    """`lab profile --plan` (print the plan, measure nothing: returns None) and `--budget` (the reps it affords,
    the plan printed first); the rates resolved as the sweep's plan resolves them (--rates, else a calibration)."""
    from lab.core.errors import UsageError

    check_vs(s, vs, "profile")  # side B refused in one line before any plan or folder
    if not show and budget is None:
        if rates is not None:
            raise UsageError("--rates is the plan's: give it with --plan or --budget")
        return s
    if vs is not None and budget is not None:
        raise UsageError("--budget with --vs: give --reps instead (both configurations get the same reps)")
    from lab.core.console import lab_console
    from lab.experiments.sweep.rates import rates_for
    from lab.measure.plan import parse_duration
    from lab.measure.profileplan import budget_reps, profile_plan, rates_settings, with_reps
    from lab.presenters.profileplan import profile_budget_line, profile_plan_notes, profile_plan_table

    budget_s = parse_duration(budget) if budget is not None else None  # a bad one fails before any calibration
    r, console = rates_for(rates_settings(s, rates)), lab_console(quiet=as_json)
    if budget_s is not None:
        reps = budget_reps(s.profile, r, budget_s)
        console.print(profile_budget_line(str(budget), reps, profile_plan(s.profile, r, 1)), highlight=False)
        if reps is None and not show:
            raise UsageError(f"--budget {budget}: one rep of this profile does not fit")
        s = with_reps(s, reps or 1)
    drawn = profile_plan(s.profile, r)
    console.print(profile_plan_table(drawn))
    for line in profile_plan_notes(drawn, 2 if vs else 1):
        console.print(line, highlight=False)
    return None if show else s
