"""A finished run's answer, from its folder alone: the records each experiment's closing tables are printed from
(lab.cli.show), read back from the rows and results the run stored. One record per run feeds both printers: the
tables a run prints as it ends and `lab show RUN` later, on this machine or on a folder fetched from a host, so the
two are the same by construction.

What each experiment's answer holds:
    sweep          its points (raw/points.jsonl, in the grid's order), the cache read's summary, the server's share
                   over the grid, what each process took to start, the plan against what it took (results.plan)
                   and the headline (lab.catalog.headline)
    profile        its bands and summary, and the time model's table where the run stored its prediction and the
                   model's shape (results.time_model, results.cost_model: runs from before print without it)
    decode         its depths, with the model's name and the server's threads
    conversation   its steps, tasks and causes
    tune           those, and the settings it weighed, with its plan against what it took (results.tune_plan)
    *_vs           B/A per point and metric as the run stored them (raw/versus.jsonl), with its sides' models

A run that is not complete gives what it stored so far (a torn last line set aside)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from lab.catalog.compare import KINDS, TOLERANCE, VERSUS, CompareRow, Comparison, ModelRef
from lab.catalog.folders import current_manifest
from lab.catalog.headline import HeadlineProfile, HeadlineStep, newest_profile, steps_of
from lab.core.errors import LabError, validation_line
from lab.core.rawtable import RawTable, Row
from lab.core.run_ids import SIDES
from lab.core.runs import Manifest, RunError, RunFolder
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
from lab.core.schemas.raw import (
    ARMS_SUMMARY,
    CONVERSATION_CAUSES,
    CONVERSATION_STEPS,
    CONVERSATION_TASKS,
    DECODE_DEPTHS,
    PROFILE_BANDS,
    PROFILE_SUMMARY,
    SERVER_SHARE,
    SWEEP_POINTS,
    TUNE_SETTINGS,
    VERSUS_ROWS,
)
from lab.core.schemas.trace import TuneSetting
from lab.core.settings import Settings
from lab.measure.costmodel import CostModel
from lab.measure.plan import ArmCost, Plan, Rates
from lab.measure.timemodel import TimePrediction
from lab.models.hparams import Hparams


class NoAnswer(LabError):
    """A run whose experiment has no closing tables to print (a rebuild lab's: `lab catalog show RUN`)."""


@dataclass(frozen=True)
class SweepAnswer:
    points: list[SweepPoint]
    summary: ArmsSummary | None
    starts: list[float]
    plan: Plan | None
    took_s: float
    after: Plan | None  # the plan once its first processes were in
    steps: list[HeadlineStep]
    profiles: list[HeadlineProfile]
    share: ServerShare | None = None  # the server's per-request share over the grid (raw/server_share.json)


@dataclass(frozen=True)
class ProfileAnswer:
    bands: list[BandDepth]
    summary: ProfileSummary | None
    prediction: TimePrediction | None
    cost: CostModel | None


@dataclass(frozen=True)
class DecodeAnswer:
    rows: list[DecodeDepth]
    model: str
    threads: int


@dataclass(frozen=True)
class ReplayAnswer:
    steps: list[ConversationStepResult]
    totals: list[ConversationTaskResult]
    causes: list[ConversationCauseResult]


@dataclass(frozen=True)
class TuneAnswer(ReplayAnswer):
    settings: list[TuneSetting]
    plan: str | None  # the plan against what it took, described


@dataclass(frozen=True)
class VersusAnswer:
    comparison: Comparison


Answer = SweepAnswer | ProfileAnswer | DecodeAnswer | ReplayAnswer | TuneAnswer | VersusAnswer


@dataclass(frozen=True)
class StoredRun:
    """A run folder as `lab show` reads it: its path, its manifest (checked), and its answer."""

    path: Path
    manifest: Manifest
    answer: Answer

    @property
    def complete(self) -> bool:
        return self.manifest.status == "complete"


def stored(run_dir: Path, table: RawTable[Row], complete: bool = True) -> list[Row]:
    """A table's rows as the run stored them (RunFolder.read): a run that is not complete may have a torn last
    line, set aside; a bad row is a RunError naming its file and line."""
    return RunFolder(run_dir).read(table, tolerate_torn_tail=not complete)


def read_run(run_dir: Path, settings: Settings) -> StoredRun:
    """A run folder's manifest, checked as every reader checks it (lab.catalog.folders), and its answer."""
    m = current_manifest(run_dir)
    return StoredRun(run_dir, m, run_answer(run_dir, m, settings))


def run_answer(run_dir: Path, m: Manifest, settings: Settings) -> Answer:
    """What a run's closing tables are printed from, read from its folder (`settings`: the runs folder the
    sweep's headline takes the newest profile from). NoAnswer for an experiment without closing tables."""
    done = m.status == "complete"
    if m.experiment.endswith(VERSUS):
        return VersusAnswer(stored_comparison(run_dir, m, done))
    if m.experiment == "sweep":
        return sweep_answer(run_dir, m, settings, done)
    if m.experiment == "profile":
        bands, summary = stored(run_dir, PROFILE_BANDS, done), stored(run_dir, PROFILE_SUMMARY, done)
        prediction, cost = time_model(run_dir, m.results)
        return ProfileAnswer(bands, summary[0] if summary else None, prediction, cost)
    if m.experiment == "decode":
        threads = int((m.params.get("server") or {}).get("threads") or 0)
        return DecodeAnswer(stored(run_dir, DECODE_DEPTHS, done), model_name(m), threads)
    if m.experiment in ("conversation", "tune"):
        steps, totals = stored(run_dir, CONVERSATION_STEPS, done), stored(run_dir, CONVERSATION_TASKS, done)
        causes = stored(run_dir, CONVERSATION_CAUSES, done)
        if m.experiment == "conversation":
            return ReplayAnswer(steps, totals, causes)
        plan = tune_plan_line(run_dir, m.results)
        return TuneAnswer(steps, totals, causes, stored(run_dir, TUNE_SETTINGS, done), plan)
    raise NoAnswer(
        f"{run_dir.name} is a {m.experiment} run: it closes with no tables to print again (lab show prints "
        f"sweep, profile, decode, conversation and tune runs, and their --vs runs); lab catalog show {run_dir.name} "
        "lists what it holds"
    )


def model_name(m: Manifest) -> str:
    """The model's file name as the run saw it (a container's mount: its own path, `seen_as`)."""
    return Path(str(m.model.get("seen_as") or m.model.get("path") or "")).name


# --- the sweep ----------------------------------------------------------------------------------------------


def sweep_answer(run_dir: Path, m: Manifest, settings: Settings, done: bool) -> SweepAnswer:
    points = grid_order(last_rows(stored(run_dir, SWEEP_POINTS, done)), m.params)
    summary = stored(run_dir, ARMS_SUMMARY, done)
    plan, took_s, after = stored_plan(run_dir, m)
    # the answer it closes with: its server points' step, and where the newest profile of its model on its host
    # and engine (in the runs folder) says the time goes
    server, engine = [p for p in points if p.where == "server"], m.shape().engine.source.commit
    steps = steps_of(server, m.host, model_name(m), run_dir.name, engine)
    profile = newest_profile(settings.runs_dir, str(m.model.get("sha256", "")), m.host, engine)
    profiles = [profile] if profile else []
    starts = [float(s) for s in m.results.get("process_start_s", [])]
    share = stored(run_dir, SERVER_SHARE, done)
    first = summary[0] if summary else None
    return SweepAnswer(points, first, starts, plan, took_s, after, steps, profiles, share[0] if share else None)


def last_rows(points: list[SweepPoint]) -> list[SweepPoint]:
    """Each point's last row per place (a resumed run's as its sweep reads them back)."""
    out: dict[Hashable, SweepPoint] = {}
    for p in points:
        out[(p.where, p.point)] = p
    return list(out.values())


def grid_order(points: list[SweepPoint], params: dict[str, Any]) -> list[SweepPoint]:
    """The points in the order of the run's grid (screenshot sizes, then L, then new; in one process before
    through the server), as the sweep lists them; a point its params do not name goes last."""
    sw = params.get("sweep") or {}
    images = [None if i == "none" else i for i in sw.get("images") or ["none"]]
    Ls, news, places = list(sw.get("Ls") or []), list(sw.get("news") or []), ["inproc", "server"]

    def at(xs: list[Any], x: Any) -> int:
        return xs.index(x) if x in xs else len(xs)

    return sorted(points, key=lambda p: (at(images, p.image), at(Ls, p.L), at(news, p.new), at(places, p.where)))


def stored_plan(run_dir: Path, m: Manifest) -> tuple[Plan | None, float, Plan | None]:
    """The plan a sweep printed as it started, what it took, and the plan after its first processes
    (results.plan); None when the run
    made none. Only what `plan_line` prints is kept (each arm's seconds, the reps, the spread's source)."""
    d = m.results.get("plan")
    if not d:
        return None, 0.0, None
    where = str((m.params.get("sweep") or {}).get("where", "server"))
    try:
        reps_each = [int(x) for x in d.get("reps_each") or []]
        plan = Plan(
            design="cumulative",
            where=where,  # type: ignore[arg-type]
            reps=int(d["reps"]),
            points=int(d.get("points", len(reps_each))),
            rates=Rates.model_validate(d["rates"]),
            arms=[ArmCost(arm=str(a), what="", seconds=float(s)) for a, s in d["arms"].items()],
            reps_each=reps_each,
            spread_source=str(d.get("spread_source") or ""),
            took=(float(d["took"][0]), float(d["took"][1])) if d.get("took") else None,
            took_source=str(d.get("took_source") or ""),
            said=bool(d.get("said", True)),
            bound_s=d.get("bound_s"),
        )
        after = None
        if d.get("after_s") is not None:
            total = [ArmCost(arm="all", what="", seconds=float(d["after_s"]))]
            each = [int(x) for x in d.get("after_reps_each") or []]
            after = plan.model_copy(update={"arms": total, "reps_each": each, "took": None})
        return plan, float(d["actual_s"]), after
    except (ValidationError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise RunError(f"{run_dir / 'manifest.json'}:1: results.plan: {validation_line(e, 'plan')}") from None


# --- the profile and the tune ---------------------------------------------------------------------------------


def time_model(run_dir: Path, results: dict[str, Any]) -> tuple[TimePrediction | None, CostModel | None]:
    """The profile's time model as it printed it: its prediction and the model's shape (the bands' names), as
    the run stored them in its results; (None, None) for a run that stored neither."""
    t, c = results.get("time_model"), results.get("cost_model")
    if not t or not c:
        return None, None
    try:
        known = {f.name for f in dataclasses.fields(Hparams)}
        h = {k: v for k, v in c["hparams"].items() if k in known}
        hparams = Hparams(**{**h, "kinds": tuple(h["kinds"])})
        return TimePrediction.model_validate(t), CostModel(hparams, int(c["chunk"]), c.get("band_bits"))
    except (ValidationError, KeyError, TypeError, ValueError, AttributeError) as e:
        why = validation_line(e, "time_model")
        raise RunError(f"{run_dir / 'manifest.json'}:1: results.time_model: {why}") from None


def cost_record(cost: CostModel) -> dict[str, Any]:
    """The cost model as a profile stores it for the time model's table (its hparams, chunk, bits per band)."""
    return {"hparams": dataclasses.asdict(cost.h), "chunk": cost.chunk, "band_bits": cost.band_bits}


def tune_plan_line(run_dir: Path, results: dict[str, Any]) -> str | None:
    """The tune's plan against what it took, as it printed it (results.tune_plan; None for a run from before)."""
    from lab.experiments.tune.plan import TunePlan

    d = results.get("tune_plan")
    if not d:
        return None
    try:
        return TunePlan(**d).describe(results.get("took_s"))
    except (TypeError, ValueError) as e:
        raise RunError(f"{run_dir / 'manifest.json'}:1: results.tune_plan: {e}") from None


# --- an interleaved run (--vs) --------------------------------------------------------------------------------


def stored_comparison(run_dir: Path, m: Manifest, done: bool) -> Comparison:
    """B/A of an interleaved run as it stored it (raw/versus.jsonl), with what its table names: its sides' run
    ids and models, its tolerance. The stored point text is split back into its keys."""
    experiment = str(m.params.get("experiment") or m.experiment.removesuffix(VERSUS))
    if experiment not in KINDS:
        raise NoAnswer(f"{run_dir.name}: an interleaved run of {experiment!r}, which has no B/A table")
    kind = KINDS[experiment]
    sides = [current_manifest(run_dir / s) for s in SIDES if (run_dir / s / "manifest.json").exists()]
    if len(sides) != len(SIDES):
        raise RunError(f"{run_dir.name} has no side {SIDES[len(sides)]} yet (interrupted before it started)")
    a, b = (ModelRef.of(s) for s in sides)
    rows: list[CompareRow] = []
    summary: list[CompareRow] = []
    for r in stored(run_dir, VERSUS_ROWS, done):
        key = point_key(r.point, kind.keys) if r.point else ()
        row = CompareRow(key, r.metric, r.a, r.b, r.ratio, of_ratio=r.metric in kind.paired)
        (rows if key else summary).append(row)
    tolerance = float(m.params.get("tolerance") or TOLERANCE)
    return Comparison(
        experiment, sides[0].run_id, sides[1].run_id, kind.keys, rows, summary, 0.0, (a, b), True, tolerance
    )


def point_key(text: str, keys: tuple[str, ...]) -> tuple[Any, ...]:
    """`where=server L=512 new=64 image=-` back into its values (a number as a number, `-` as None)."""
    pattern = " ".join(f"{re.escape(k)}=(.*?)" for k in keys)
    got = re.fullmatch(pattern, text)
    if got is None:
        raise RunError(f"a stored B/A row's point {text!r} does not name {', '.join(keys)}")
    return tuple(None if v == "-" else int(v) if re.fullmatch(r"-?\d+", v) else v for v in got.groups())


def as_json(answer: Answer) -> dict[str, Any]:
    """An answer's records, JSON-ready (`lab show --json`)."""
    if isinstance(answer, VersusAnswer):
        return answer.comparison.record()
    out: dict[str, Any] = {}
    for f in dataclasses.fields(answer):
        out[f.name] = _plain(getattr(answer, f.name))
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, BaseModel):
        return v.model_dump(mode="json")
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, CostModel):
        return cost_record(v)
    return v
