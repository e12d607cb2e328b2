"""The sweep's one rep loop, in rounds of processes: every point's reps are spread over several server (and
driver) processes, started one after another, each measuring every point still open for its share of reps.

A process is a level of variance of its own (its memory layout, thread placement and warm state): reps in one
process agree with each other more than with the next process's, so an interval from one process does not hold
on the next run. Here each point gets its reps in at least `sweep.processes` processes (`ceil(min_reps /
processes)` each), the processes interleave the points in time (each starts the grid at another point), and
every interval resamples processes, then reps within them (lab.core.stats). A point that is still undecided after
those rounds gets up to as many reps again in each further process, stopping as soon as it is decided, until
`max_reps`.

What a process costs beyond its reps is its start (the model load), the depth-L states it restores (the
server's slot files and the driver's state files: reads, not prefills) and, while the run has fewer than
`sweep.fill_passes`, one cumulative fill pass (the baseline's sample). Resumable at (point, process)
granularity: a point's reps in one process are appended with a `rounds` row after them, so an interrupted run
keeps every whole round and a finished point's row.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel
from rich.progress import Progress, TaskID

from lab.core.runs import RunFolder
from lab.core.schemas import InprocFill, Interval, PrefillTps, SweepPoint, SweepRound, SweepSample, Where
from lab.core.schemas.raw import PREFILL_TPS, SWEEP_POINTS, SWEEP_ROUNDS, SWEEP_SAMPLES
from lab.core.settings import SweepSettings
from lab.core.stats import median_interval, rotated
from lab.experiments.sweep.grid import GridPoint
from lab.experiments.sweep.points import RepOut, decided
from lab.measure.prediction import reps_in_further_process


class Place(Protocol):
    """Where a point's reps run: through one server process, or in one driver process."""

    where: Where

    def rep(self, p: GridPoint, rep: int, process: int) -> RepOut: ...

    def summarize(self, p: GridPoint, samples: list[SweepSample], tps: list[PrefillTps]) -> SweepPoint: ...

    def judge(self, p: GridPoint, samples: list[SweepSample], tps: list[PrefillTps]) -> SweepPoint: ...


def point_key(row: BaseModel) -> tuple[str, str]:
    """A point's place and id."""
    return (getattr(row, "where", "server"), getattr(row, "point", "") or "")


def unit_key(row: BaseModel) -> tuple[str, str, int]:
    """A point's reps in one process: the unit a resumed run keeps."""
    return (*point_key(row), getattr(row, "process", 0))


@dataclass
class Kept:
    """What an interrupted run already holds: every finished point's rows and every whole round's."""

    rounds: list[SweepRound] = field(default_factory=list)
    samples: list[SweepSample] = field(default_factory=list)
    tps: list[PrefillTps] = field(default_factory=list)


def done_points(run: RunFolder) -> tuple[dict[Hashable, SweepPoint], Kept]:
    """The finished points, and the rows kept for a resume (the one resume path, lab.core.runs.RunFolder.keep_whole:
    what an unfinished round wrote is dropped, so no rep is measured twice or lost)."""
    done: dict[Hashable, SweepPoint] = {k: rows[-1] for k, rows in run.keep_whole(SWEEP_POINTS, point_key).items()}
    rounds = run.keep_whole(SWEEP_ROUNDS, unit_key)

    def keep(k: Hashable, _rows: list[Any]) -> bool:
        assert isinstance(k, tuple)
        return k[:2] in done or k in rounds

    samples = run.keep_whole(SWEEP_SAMPLES, unit_key, keep)
    tps = run.keep_whole(PREFILL_TPS, unit_key, keep)
    return done, Kept(
        rounds=[r for rows in rounds.values() for r in rows],
        samples=[r for rows in samples.values() for r in rows],
        tps=[r for rows in tps.values() for r in rows],
    )


class Ledger:
    """Every open point's reps so far, per place, across the run's processes: what a round measures, when a
    point is finished, and the rows written as it goes."""

    def __init__(self, sw: SweepSettings, run: RunFolder, kept: Kept, fills: list[InprocFill]) -> None:
        self.sw, self.run, self.fills = sw, run, fills  # the run's fill passes (grown by each process's driver)
        self.starts: list[float] = []  # what each of the run's processes took to start (model loads, states back)
        self.per_round = math.ceil(sw.min_reps / sw.processes)
        self.samples: dict[Where, dict[str, list[SweepSample]]] = {"server": {}, "inproc": {}}
        self.tps: dict[tuple[Where, str], list[PrefillTps]] = {}  # each place's estimate samples per point
        self.checks: dict[str, list[PrefillTps]] = {}  # the llama-bench cross-check per point (rep None)
        self.rounds: dict[tuple[Where, str], list[SweepRound]] = {}
        self.last: dict[tuple[Where, str], SweepPoint] = {}  # each open point's checks after its last round
        for s in kept.samples:
            self.samples[s.where].setdefault(s.point, []).append(s)
        for t in kept.tps:
            if t.rep is not None:
                self.tps.setdefault((t.where, t.point or ""), []).append(t)
            else:
                self.checks.setdefault(t.point or "", []).append(t)
        for r in kept.rounds:
            self.rounds.setdefault((r.where, r.point), []).append(r)
        self.last_process = max(
            [s.process for s in kept.samples] + [t.process for t in kept.tps] + [r.process for r in kept.rounds],
            default=-1,
        )

    def next_process(self) -> int:
        """The number of the run's next process (a resumed run goes on from the last one it had)."""
        return max([self.last_process, *(f.process for f in self.fills)], default=-1) + 1

    def planned(self, todo: list[tuple[Where, GridPoint]]) -> int:
        """Reps the open points get at least (more when a point needs further processes to decide)."""
        return sum(max(0, self.per_round * self.sw.processes - len(self.reps(w, p.id))) for w, p in todo)

    def this_round(self, todo: list[tuple[Where, GridPoint]], process: int) -> list[tuple[Where, GridPoint]]:
        """The open points in the order this process measures them: in one process first (a both-places sweep
        compares the server with it), each place's grid starting at another point every process, so no point is
        always measured first after a start."""
        out: list[tuple[Where, GridPoint]] = []
        for where in ("inproc", "server"):
            out += rotated([(w, p) for w, p in todo if w == where], process)
        return out

    def reps(self, where: Where, point: str) -> set[int]:
        return {s.rep for s in self.samples[where].get(point, [])} | {
            t.rep for t in self.tps.get((where, point), []) if t.rep is not None
        }

    def add_check(self, p: GridPoint, rows: list[PrefillTps], process: int) -> None:
        self.checks[p.id] = [r.model_copy(update={"process": process}) for r in rows]

    def measure(self, place: Place, p: GridPoint, process: int, progress: Progress, task: TaskID) -> SweepPoint | None:
        """The point's reps in this process: its share while it has had fewer than sweep.processes processes,
        else up to as many again, stopping once decided; its rows appended with the round's row after them.
        Returns the point's summary when it is finished (also appended), else None."""
        sw, where = self.sw, place.where
        rounds = self.rounds.setdefault((where, p.id), [])
        have = self.reps(where, p.id)
        extra = len({r.process for r in rounds}) >= sw.processes  # past its share: stop as soon as decided
        first = max(have, default=-1) + 1
        count = min(self.extra_reps((where, p.id), rounds) if extra else self.per_round, sw.max_reps - len(have))
        samples, tps = self.samples[where].setdefault(p.id, []), self.tps.setdefault((where, p.id), [])
        new_samples: list[SweepSample] = []
        new_tps: list[PrefillTps] = []
        walls: list[float] = []
        baseline: list[bool] = []
        for rep in range(first, first + count):
            out = place.rep(p, rep, process)
            new_samples += out.samples
            new_tps += out.tps
            walls.append(out.wall_s)
            baseline.append(out.baseline)
            progress.advance(task)
            # stop as soon as decided (the round's last rep is judged after the round)
            judged = extra and len(have) + len(walls) >= sw.min_reps and rep < first + count - 1
            if judged and decided(place.judge(p, samples + new_samples, tps + new_tps), sw):
                break
        checks = [c for c in self.checks.get(p.id, []) if c.process == process] if where == "server" else []
        row = SweepRound(where=where, point=p.id, process=process, reps=len(walls), wall_s=walls, baseline=baseline)
        self.run.append(SWEEP_SAMPLES, new_samples)
        self.run.append(PREFILL_TPS, new_tps + checks)
        self.run.append(SWEEP_ROUNDS, [row])
        samples += new_samples
        tps += new_tps
        rounds.append(row)
        now = place.judge(p, samples, tps)  # the checks and the spread; the whole summary once it is finished
        self.last[(where, p.id)] = now
        n_reps = len(self.reps(where, p.id))
        if n_reps < sw.max_reps and not (len({r.process for r in rounds}) >= sw.processes and decided(now, sw)):
            return None
        point = place.summarize(p, samples, tps)
        point.rep_s = rep_seconds(rounds, f"{where}/{p.id}/rep_s" if where == "inproc" else f"{p.id}/rep_s")
        self.run.append(SWEEP_POINTS, [point])
        return point

    def extra_reps(self, key: tuple[Where, str], rounds: list[SweepRound]) -> int:
        """The reps an undecided point may take in one more process (it stops early once decided): as many as
        narrow its verdict's interval most per second (lab.core.components.reps_per_process, Kalibera and
        Jones), from how its fake/genuine ratio has varied between processes and within one, what a process
        start has cost and what its reps cost; at least its share per process, at most sweep.min_reps (and that
        many while no process has had two reps to show the spread within one)."""
        point = self.last.get(key)  # a resumed run has none yet: that many reps until it has
        spread = point.verdict_spread() if point else None
        walls = [w for r in rounds for w in r.wall_s]
        if spread is None or not walls or not self.starts:
            return self.sw.min_reps  # no process has had two reps yet: enough to see the spread within one
        start_s, rep_s = statistics.median(self.starts), statistics.median(walls)
        return reps_in_further_process(spread, start_s, rep_s, self.per_round, self.sw.min_reps)


def rep_seconds(rounds: list[SweepRound], key: str) -> Interval | None:
    """What one more rep costs: the wall seconds of the point's reps past the direct baseline's (all of them when
    every rep ran it)."""
    later = [w for r in rounds for w, b in zip(r.wall_s, r.baseline, strict=True) if not b]
    return median_interval(later or [w for r in rounds for w in r.wall_s], key)
