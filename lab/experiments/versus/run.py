"""The interleaved run: one experiment measured in two configurations, their processes alternating.

Lifecycle (the protocol's, for two experiments in one run folder):
    ready    both sides' settings (B: A's with --vs set; both with the design for process pairs), engines built
             and held, models hashed, everything checked            (a bad input creates nothing)
    open     the run's folder `<date>_<host>_<experiment>_vs_<hex>` (its writer lock taken at once; the id a
             target host reports), then each side's run folder inside it, `a/` and `b/`, with its provenance
    measure  under every folder's guard: process pair after process pair, one process of each side, in the
             pair's order (pairs in twos, AB then BA or BA then AB, at random); each process's number, start
             and length into raw/pairs.jsonl; a side whose processes are done waits while the other finishes
    finish   the pair table read and B/A per point paired by the process pair each process ran in
             (lab.catalog.compare.compare_sides), then each side's results and status, B/A into raw/versus.jsonl;
             the run complete when both sides are
    resume   `--resume <run>` (never a side alone): every folder's writer lock, the side folders and the pair
             table checked, each side resumes as a run of its own would (a torn last pair row set aside), the
             process pairs go on in the same order
"""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Console

from lab.catalog.compare import TOLERANCE, VERSUS, Comparison, compare_sides
from lab.catalog.pair_table import count_paired, read_pairs
from lab.core.console import lab_console, progress_bar
from lab.core.hostnoise import NoiseFigures, NoiseWindow, read_state
from lab.core.run_ids import SIDES
from lab.core.runs import RunError, RunFolder, utc_now
from lab.core.schemas import VersusPair
from lab.core.schemas.raw import VERSUS_PAIRS, VERSUS_ROWS
from lab.core.settings import Settings
from lab.experiments.protocol import (
    Experiment,
    OpenRun,
    Outcome,
    Processes,
    RunParts,
    ctx_switches,
    finish,
    open_run,
    ready,
    record_params,
    report_run,
    say_params,
)
from lab.experiments.versus.config import pair_order, paired_design, side_b


@dataclass
class Side:
    """One configuration of the run: its experiment, settings and parts, then its open run folder."""

    name: Literal["a", "b"]
    experiment: Experiment
    settings: Settings
    parts: RunParts | None = None
    sess: OpenRun | None = None  # None once complete (a resumed run whose side had finished)
    outcome: Outcome | None = None


def run_versus(
    experiment: Experiment,
    settings: Settings,
    vs: dict[str, str] | None = None,
    resume: RunFolder | None = None,
    console: Console | None = None,
) -> tuple[RunFolder, Comparison]:
    """Measure `experiment` with `settings` (side A) and with `vs` set on them (side B), interleaved in one run;
    or resume such a run. Returns the run folder and B/A per point."""
    console = console or lab_console()
    with contextlib.ExitStack() as writer:
        if resume is not None:
            writer.enter_context(resume.writer())
            run, sides = _reopen(experiment, settings, resume, writer)
        else:
            run, sides = _open(experiment, settings, vs or {}, writer)
        console.print(f"run folder: {run.path}", highlight=False)
        say_params(settings, console)
        params = run.manifest().params
        comparison = _measure(run, sides, int(params["seed"]), console)
        failed = [f"side {s.name}: {s.outcome.failure}" for s in sides if s.outcome and s.outcome.failure]
        if failed:
            run.fail("; ".join(failed))
        else:
            run.complete()
        return run, comparison


def _open(
    experiment: Experiment, settings: Settings, vs: dict[str, str], writer: contextlib.ExitStack
) -> tuple[RunFolder, list[Side]]:
    """A new interleaved run: both sides ready before any folder exists, then the run's folder and theirs."""
    a = paired_design(settings)
    sides = [Side("a", experiment, a), Side("b", type(experiment)(), side_b(a, vs, experiment.name))]
    for s in sides:
        s.settings, s.parts = ready(s.experiment, s.settings, None, writer)
    parts = sides[0].parts
    assert parts is not None
    params = {"experiment": experiment.name, "vs": vs, "seed": secrets.randbits(31), "tolerance": TOLERANCE}
    run = RunFolder.create(a.runs_dir, experiment.name + VERSUS, parts.shell.name, params)
    writer.enter_context(run.writer())
    report_run(run)
    with run.guard():
        for s in sides:
            _open_side(s, run, None, writer)
    return run, sides


def _reopen(
    experiment: Experiment, settings: Settings, run: RunFolder, writer: contextlib.ExitStack
) -> tuple[RunFolder, list[Side]]:
    """A resumed interleaved run: every side's folder locked (one writer per folder, as the run's) and the pair
    table checked before anything of it is read back or written; then each side that is not complete resumes
    with its own recorded inputs (side B's engine and model from the run's --vs), a side that never started
    starts, once both are ready; the run's own begin_resume sets a torn last pair row aside, before the process
    pairs go on."""
    m = run.resumable(experiment.name + VERSUS)
    found = _side_runs(run, writer)
    read_pairs(run.path)  # a bad row: one line naming it, nothing changed
    vs: dict[str, str] = m.params.get("vs", {})
    a = paired_design(settings)
    sides = [Side("a", experiment, a), Side("b", type(experiment)(), side_b(a, vs, experiment.name))]
    todo = []
    for s in sides:
        side_run = found[s.name]
        if side_run is not None and side_run.ready:
            s.outcome = Outcome()
            continue
        s.settings, s.parts = ready(s.experiment, s.settings, side_run, writer)
        todo.append(s)
    for s in todo:
        with run.guard():
            _open_side(s, run, found[s.name], writer)
    run.begin_resume(experiment.name + VERSUS)
    report_run(run)
    return run, sides


def _side_runs(run: RunFolder, writer: contextlib.ExitStack) -> dict[str, RunFolder | None]:
    """Each side's run folder (None: the side never started), its writer lock held to the end; a side folder
    without its manifest is refused in one line."""
    found: dict[str, RunFolder | None] = {}
    for side in SIDES:
        folder = run.path / side
        if folder.exists() and not (folder / "manifest.json").exists():
            raise RunError(f"{folder}: a side folder without its manifest; move it away to start that side anew")
        found[side] = RunFolder.open(folder) if folder.exists() else None
    for side_run in found.values():
        if side_run is not None:
            writer.enter_context(side_run.writer())
    return found


def _open_side(s: Side, run: RunFolder, resume: RunFolder | None, writer: contextlib.ExitStack) -> None:
    assert s.parts is not None
    params = record_params(s.experiment, s.settings)
    s.sess = open_run(s.settings, s.experiment.name, params, s.parts, resume, writer, side=run, side_name=s.name)


def _measure(run: RunFolder, sides: list[Side], seed: int, console: Console) -> Comparison:
    """Process pair after process pair, one process of each side still measuring, in the pair's order, under
    every folder's guard (an interruption leaves each incomplete, with the reason); then the run's end (see
    _finish)."""
    open_sides = [s for s in sides if s.sess is not None]
    runs = [run, *(s.sess.run for s in open_sides if s.sess)]
    with contextlib.ExitStack() as live:
        for r in runs:
            live.enter_context(r.guard())
        shell = open_sides[0].sess.shell if open_sides and open_sides[0].sess else None
        window = None
        if shell is not None and open_sides[0].experiment.needs_engine:
            state = read_state(shell).model_dump(mode="json")
            for r in runs:
                r.add_results(host_state=state)
            window = NoiseWindow().start()
        if any(s.experiment.holds_progress for s in open_sides):
            shared = live.enter_context(progress_bar(console))
            for s in open_sides:
                s.experiment.progress = shared
        for s in open_sides:
            s.experiment.label = f"{s.name.upper()} "
        going: dict[str, Processes] = {}
        live.callback(_close, going)  # a failure stops the other side's process too
        for s in open_sides:
            assert s.sess is not None
            going[s.name] = s.experiment.processes(s.sess, console)
        pair = max((r.pair for r in read_pairs(run.path, torn_ok=False)), default=-1) + 1
        while going:
            for order, name in enumerate(pair_order(pair, seed)):
                if name in going:
                    _step(run, next(s for s in sides if s.name == name), going, pair, order)
            pair += 1
        sessions = [s.sess for s in open_sides if s.sess is not None]
        return _finish(run, open_sides, window.stop(ctx_switches(sessions)) if window is not None else None, console)


def _finish(run: RunFolder, open_sides: list[Side], noise: NoiseFigures | None, console: Console) -> Comparison:
    """The pair table read and B/A computed before any side is finished: a table or a row that does not read
    leaves every folder incomplete and resumable to this step, never sides complete under a run whose end fails
    on every resume. Then each side's results and status, and the run's timing and B/A."""
    timing = _timing(run)
    comparison = compare_sides(run.path)
    quiet = Console(quiet=True)
    for i, s in enumerate(open_sides):
        assert s.sess is not None and s.outcome is not None
        finish(s.sess, s.outcome, noise, console if i == 0 else quiet)
    if noise is not None:
        run.add_results(host_noise=noise.model_dump(mode="json"))
    run.add_results(**timing)
    run.rewrite(VERSUS_ROWS, comparison.stored())
    return comparison


def _close(going: dict[str, Processes]) -> None:
    for g in going.values():
        g.close()


def _step(run: RunFolder, s: Side, going: dict[str, Processes], pair: int, order: int) -> None:
    """One process of side `s` (or, once its processes are done, its closing summary)."""
    started, t0 = utc_now(), time.monotonic()
    try:
        process = next(going[s.name])
    except StopIteration as stop:
        s.outcome = stop.value
        del going[s.name]
        return
    seconds = time.monotonic() - t0
    row = VersusPair(pair=pair, side=s.name, order=order, started_utc=started, seconds=seconds, process=process)
    run.append(VERSUS_PAIRS, [row])


def _timing(run: RunFolder) -> dict[str, Any]:
    """The run's process pairs (read strictly: a resumed run set a torn last line aside): how many were started,
    how many hold both sides, each side's process seconds."""
    rows = read_pairs(run.path, torn_ok=False)
    return {
        "pairs_started": len({r.pair for r in rows}),
        "pairs": count_paired(rows),
        "process_s": {side: [r.seconds for r in rows if r.side == side] for side in SIDES},
    }
