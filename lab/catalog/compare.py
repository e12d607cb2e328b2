"""The one compare core: two runs of one experiment side by side, B/A per key, for the CLI table
(`lab compare`), `lab compare --report` and the heatmap alike (in the spirit of llama.cpp's
compare-llama-bench.py): per (where, L, new, screenshot) for sweeps (through the server and in one process);
per (depth, band), plus the whole FUSED chunk per depth, for profiles; per (task, step) and arm for
conversation replays. Rows come from run folders or from the catalog tables: the same flattened rows.

B/A's interval resamples each run's processes, then the samples within them, where the samples say which
process measured them (a rerun's process is a level of variance of its own); runs from before, measured in one
process, give a within-run interval (`Interval.processes` 1), which a rerun need not reproduce."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from lab.catalog.folders import current_manifest, read_manifest
from lab.catalog.ingest import run_rows
from lab.catalog.pair_table import PairOf, count_paired, pairs_of, read_pairs
from lab.catalog.samples import TOTAL_BAND, Samples, Side, present, samples_of
from lab.catalog.tables import load_table
from lab.core.errors import LabError, warn
from lab.core.releases import engine_label
from lab.core.run_ids import match_run_id
from lab.core.runs import Manifest
from lab.core.schemas import BANDS, Interval, VersusRow
from lab.core.stats import geomean_ratio, paired_processes, run_drift_factors, unpaired, verdict


class CompareError(LabError):
    pass


VERSUS = "_vs"  # an interleaved run's experiment: the measured experiment's name and this
TOLERANCE = 0.03  # every comparison's calls: B the same as A within 1 +- this


@dataclass(frozen=True)
class Kind:
    table: str  # the rows compared
    samples: tuple[str, ...]  # the tables of the samples behind them (for the intervals)
    keys: tuple[str, ...]
    metrics: dict[str, str]  # column -> what it is called in charts
    paired: frozenset[str] = frozenset()  # ratios of two arms paired by rep (one process): no run drift, not a time


KINDS = {
    "sweep": Kind(
        "sweep_points",
        ("sweep_samples", "prefill_tps", "sweep_fills"),
        ("where", "L", "new", "image"),
        {
            "fake_median_ms": "fake",
            "genuine_median_ms": "genuine hit",
            "plain_median_ms": "plain genuine hit",
            "baseline_median_ms": "baseline",
            "opt_prefill_ms": "estimate",
            "encode_ms": "vision encode",
            "restore_prep_ci_value": "restore (cache read)",
            "fake_vs_genuine_ci_value": "fake / genuine",
            "fake_vs_estimate_ci_value": "fake / estimate",
        },
        frozenset({"fake_vs_genuine_ci_value", "fake_vs_estimate_ci_value"}),
    ),
    "profile": Kind(
        "profile_bands",
        ("profile_walls", "profile_band_processes"),
        ("depth", "band"),
        {"ms_per_token": "ms per token", "fused_chunk_ms": "ms"},
    ),
    "conversation": Kind(
        "conversation_steps",
        ("conversation_samples",),
        ("task_id", "step"),
        {"today_ms_value": "today's server", "optimum_ms_value": "optimum", "no_cache_ms_value": "no cache"},
    ),
    "decode": Kind(
        "decode_depths",
        (),
        ("depth",),
        {"server_ms_value": "server decode ms/token", "bench_ms_value": "llama-bench decode ms/token"},
    ),
}


@dataclass(frozen=True)
class CompareRow:
    key: tuple[Any, ...]  # () for the geometric-mean row of a metric over the grid
    metric: str
    a: float | None
    b: float | None
    ci: Interval | None = None  # B/A from both runs' samples (unpaired, or paired by process pair), when they have any
    draws: Any = field(default=None, repr=False, compare=False)  # its bootstrap draws (for the geomean)
    of_ratio: bool = False  # the metric is a ratio of two arms (fake / genuine), not a time: higher or lower

    @property
    def ratio(self) -> float | None:
        return self.b / self.a if self.a and self.b is not None else None

    @property
    def significant(self) -> bool | None:
        """True when B/A's interval excludes 1; None without an interval ("within noise" when False)."""
        return None if self.ci is None or self.ci.n < 2 else not (self.ci.lo <= 1 <= self.ci.hi)

    def called(self, tolerance: float) -> str:
        """B against A at a tolerance: `same` (the interval inside 1 +- tolerance), `faster` or `slower` (wholly
        outside it; `lower` or `higher` for a ratio of two arms, where neither is better), else `undecided`."""
        below = self.ci is not None and self.ci.value < 1
        outside = ("lower" if below else "higher") if self.of_ratio else ("faster" if below else "slower")
        return {"agree": "same", "undecided": "undecided"}.get(verdict(self.ci, tolerance), outside)

    def record(self, keys: tuple[str, ...], tolerance: float | None = None) -> dict[str, Any]:
        ci = self.ci.model_dump(mode="json") if self.ci else None
        key = dict(zip(keys, self.key, strict=True)) if self.key else {}
        out = {"metric": self.metric, "a": self.a, "b": self.b, "ratio": self.ratio, "ratio_ci": ci}
        called = {"called": self.called(tolerance)} if tolerance is not None else {}
        return {**key, **out, "significant": self.significant, **called}


class ModelRef(NamedTuple):
    """The model file a run measured: its sha256 (what identifies it) and its path where it ran; and the llama.cpp
    commit it ran on (every comparison names both sides' engines)."""

    sha256: str
    path: str
    engine: str = ""

    @classmethod
    def of(cls, m: Manifest) -> ModelRef:
        source = m.engine.get("source") or {}
        return cls(str(m.model.get("sha256", "")), str(m.model.get("path", "")), str(source.get("commit", "")))


@dataclass(frozen=True)
class Comparison:
    experiment: str
    run_a: str
    run_b: str
    keys: tuple[str, ...]
    rows: list[CompareRow]
    summary: list[CompareRow] = field(default_factory=list)  # the geometric mean per metric over the keys
    drift: float = 0.0  # the run level's spread the intervals carry (0: none, only processes and reps)
    models: tuple[ModelRef, ModelRef] | None = None  # what each run measured
    paired: bool = False  # the two sides of one interleaved run, paired by process pair (lab.experiments.versus)
    tolerance: float | None = None  # the verdicts' tolerance (faster / slower / same / undecided), when called

    @property
    def kind(self) -> Kind:
        return KINDS[self.experiment]

    @property
    def same_model(self) -> bool | None:
        """Whether both runs measured one model file: by its sha256, whatever each host called the file."""
        if self.models is None or not self.models[0].sha256 or not self.models[1].sha256:
            return None
        return self.models[0].sha256 == self.models[1].sha256

    def model_line(self) -> str:
        if self.models is None or self.same_model is None:
            return "model: not recorded by both runs"
        a, b = self.models
        engines = (
            f"; both on {engine_label(a.engine)}"
            if a.engine == b.engine
            else f"; A on {engine_label(a.engine)}, B on {engine_label(b.engine)}"
        )
        if self.same_model:
            names = a.path if a.path == b.path else f"A {a.path}, B {b.path}"
            return f"the same model, sha256 {a.sha256[:12]} ({names}){engines}"
        return f"different models: A sha256 {a.sha256[:12]} ({a.path}), B sha256 {b.sha256[:12]} ({b.path}){engines}"

    def record(self) -> dict[str, Any]:
        """What the compare table is printed from, JSON-ready (`lab compare --json`): B/A per key and metric, and
        the geometric mean per metric over the keys."""
        return {
            "experiment": self.experiment,
            "run_a": self.run_a,
            "run_b": self.run_b,
            "drift": self.drift,
            "models": [m._asdict() for m in self.models] if self.models else None,
            "same_model": self.same_model,
            "paired": self.paired,
            "tolerance": self.tolerance,
            "rows": [r.record(self.keys, self.tolerance) for r in self.rows],
            "geomean": [r.record(self.keys, self.tolerance) for r in self.summary],
        }

    def stored(self) -> list[VersusRow]:
        """The rows as an interleaved run stores them (raw/versus.jsonl, the catalog's versus_rows): per point and
        metric, then the geometric means."""
        tol = self.tolerance if self.tolerance is not None else TOLERANCE
        return [
            VersusRow(
                point=" ".join(f"{k}={_text(v)}" for k, v in zip(self.keys, r.key, strict=True)) if r.key else "",
                metric=r.metric,
                a=r.a,
                b=r.b,
                ratio=r.ci,
                called=r.called(tol),
                significant=r.significant,
            )
            for r in [*self.rows, *self.summary]
        ]

    def slowdowns(self, pct: float) -> list[CompareRow]:
        """Geometric-mean rows of times significantly slower than 1 + pct/100 (their interval's low end above it)."""
        times = [r for r in self.summary if r.metric not in self.kind.paired]
        return [r for r in times if r.ci is not None and r.ci.lo > 1 + pct / 100]

    def slowdown_report(self, pct: float) -> list[str]:
        """`lab compare --fail-above PCT`: one line per significant slowdown (none: B is not slower)."""
        return [
            f"significant slowdown: {r.metric} geomean B/A {r.ci.fmt()} > {1 + pct / 100:.3f}"
            for r in self.slowdowns(pct)
            if r.ci is not None
        ]


def _text(v: Any) -> str:
    return "-" if v is None else str(v)


def _sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    out: list[Any] = []
    for x in key:
        if x is None:
            out.append((0, 0, ""))
        elif isinstance(x, int | float):
            out.append((1, x, ""))
        else:
            band = BANDS.index(x) if x in BANDS else len(BANDS) + (x == TOTAL_BAND)
            out.append((2, band, str(x)))
    return tuple(out)


def compare_rows(
    experiment: str,
    a_side: Side,
    b_side: Side,
    drift: float = 0.0,
    paired: bool = False,
    pairs: tuple[PairOf, PairOf] | None = None,
) -> tuple[list[CompareRow], list[CompareRow]]:
    """B/A rows for every key either run has (a side it lacks is None), each with the interval of B/A from
    both runs' samples; and per metric the geometric mean over the keys both have. Profiles also get one
    TOTAL_BAND row per depth: the FUSED chunk wall, which is what the bands share. `drift`: the host's
    run-to-run spread (log SD, measured by the A/A test), one draw of it shared by every row of a bootstrap
    replicate, since a run's drift moves all of its points alike. `paired`: the two sides of one interleaved
    run (lab.experiments.versus), their processes paired by process pair: B/A resamples pairs, then reps, on
    both; `pairs`: each side's processes with the process pair each ran in (lab.catalog.pair_table), None: by
    number."""
    kind = KINDS[experiment]

    def keyed(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        if experiment != "profile":
            return {tuple(present(r.get(k)) for k in kind.keys): r for r in rows}
        out = {(r["depth"], r["band"]): {"ms_per_token": r["ms_per_token"]} for r in rows}
        out.update({(r["depth"], TOTAL_BAND): {"fused_chunk_ms": r["fused_chunk_ms"]} for r in rows})
        return out

    a, b = keyed(a_side.get(kind.table, [])), keyed(b_side.get(kind.table, []))
    sa, sb = samples_of(experiment, a_side), samples_of(experiment, b_side)
    shared = run_drift_factors(drift, experiment) if drift > 0 else None
    rows: list[CompareRow] = []
    for key in sorted(set(a) | set(b), key=_sort_key):
        for metric in kind.metrics:
            va, vb = present(a.get(key, {}).get(metric)), present(b.get(key, {}).get(metric))
            if va is None and vb is None:
                continue
            xa, xb = sa.get((key, metric), Samples([], [], [])), sb.get((key, metric), Samples([], [], []))
            if metric in kind.paired and not (xa.values or xb.values):
                continue  # a ratio of two arms the run did not pair by rep (an in-process estimate from fill passes)
            tag = f"{key}/{metric}"
            drifts = None if metric in kind.paired else shared
            if paired:
                pair_a, pair_b = pairs if pairs is not None else (None, None)
                ci, draws = paired_processes(xb.by_pair(pair_b), xa.by_pair(pair_a), tag)
            else:
                ci, draws = unpaired(xb.values, xa.values, tag, xb.procs, xa.procs, drifts)
            rows.append(CompareRow(key, metric, va, vb, ci, draws, metric in kind.paired))
    summary = []
    for metric in kind.metrics:
        both = [r for r in rows if r.metric == metric and r.draws is not None and r.ci is not None]
        procs = min((r.ci.processes for r in both if r.ci), default=1)
        g = geomean_ratio([r.draws for r in both], [r.ci.value for r in both if r.ci], procs) if both else None
        if g is not None:
            summary.append(CompareRow((), metric, None, None, g, of_ratio=metric in kind.paired))
    return rows, summary


def _check(experiment_a: str, experiment_b: str) -> str:
    """The kind both runs are (a sweep, a profile, a conversation replay or a decode check)."""
    if experiment_a.endswith(VERSUS) or experiment_b.endswith(VERSUS):
        raise CompareError(
            "an interleaved run (--vs) holds two runs: name a side, <id>/a or <id>/b, or give it alone for B/A "
            "of its two sides"
        )
    if experiment_a != experiment_b:
        raise CompareError(f"cannot compare a {experiment_a} run with a {experiment_b} run")
    if experiment_a not in KINDS:
        raise CompareError(f"compare supports {' and '.join(KINDS)} runs, not {experiment_a}")
    return experiment_a


def compare_runs(
    run_a: Path,
    run_b: Path,
    drift: float = 0.0,
    paired: bool = False,
    tolerance: float | None = None,
    pairs: tuple[PairOf, PairOf] | None = None,
) -> Comparison:
    """Two run folders (complete or not: what they hold so far); `drift`, `paired`, `pairs`: see compare_rows;
    each row is called faster, slower, the same or undecided at `tolerance` (TOLERANCE unless given)."""
    ma, mb = current_manifest(run_a), current_manifest(run_b)
    name = _check(ma.experiment, mb.experiment)
    kind = KINDS[name]

    def side(run: Path, experiment: str) -> Side:
        return {t: run_rows(run, experiment, t) for t in (kind.table, *kind.samples)}

    rows, summary = compare_rows(name, side(run_a, ma.experiment), side(run_b, mb.experiment), drift, paired, pairs)
    models = tuple(ModelRef.of(m) for m in (ma, mb))
    names = (ma.run_id, mb.run_id) if paired else (run_a.name, run_b.name)
    refs = (models[0], models[1])
    tol = TOLERANCE if tolerance is None else tolerance
    return Comparison(name, *names, kind.keys, rows, summary, drift, refs, paired, tol)


def compare_catalog(catalog_dir: Path, ref_a: str, ref_b: str, drift: float = 0.0) -> Comparison:
    """Two runs of the catalog, by id or unique id prefix (their rows as ingested); `drift`: see compare_rows."""
    runs = load_table(catalog_dir, "runs")
    ids = [str(x) for x in runs["run_id"]] if len(runs) else []
    experiments = dict(zip(ids, (str(x) for x in runs["experiment"]), strict=True)) if ids else {}

    a, b = (match_run_id(ref, ids, "in the catalog") for ref in (ref_a, ref_b))
    name = _check(experiments[a], experiments[b])
    kind = KINDS[name]
    tables = {name: load_table(catalog_dir, name) for name in (kind.table, *kind.samples)}
    if tables[kind.table].empty:
        raise CompareError(f"the catalog has no {kind.table} rows")

    def side(run_id: str) -> Side:
        out: Side = {}
        for name, table in tables.items():
            out[name] = table[table["run_id"] == run_id].to_dict("records") if not table.empty else []
        if not out[kind.table]:
            raise CompareError(f"{run_id} has no rows in the catalog (incomplete, or not ingested yet)")
        return out

    rows, summary = compare_rows(name, side(a), side(b), drift)
    of = {
        str(r["run_id"]): ModelRef(
            str(r.get("model_sha256") or ""), str(r.get("model_path") or ""), str(r.get("engine_commit") or "")
        )
        for r in runs.to_dict("records")
    }
    return Comparison(name, a, b, kind.keys, rows, summary, drift, (of[a], of[b]), tolerance=TOLERANCE)


def is_versus(run: Path) -> bool:
    """Whether a run folder is an interleaved run of two configurations (its sides in `a/` and `b/`)."""
    return read_manifest(run).experiment.endswith(VERSUS)


def compare_sides(run: Path, tolerance: float | None = None) -> Comparison:
    """B/A of an interleaved run: its two sides' processes paired by the process pair each ran in
    (raw/pairs.jsonl), each row called at the run's tolerance (or `tolerance`). A run without a process pair that
    holds both sides (interrupted in its first) gets B/A without intervals, and a warning saying why."""
    m = read_manifest(run)
    if not m.experiment.endswith(VERSUS):
        raise CompareError(f"{run.name} is a {m.experiment} run, not an interleaved run of two configurations")
    for side in ("a", "b"):
        if not (run / side / "manifest.json").exists():
            raise CompareError(f"{run.name} has no side {side} yet (interrupted before it started: resume it)")
    rows = read_pairs(run)
    if not count_paired(rows):
        warn(f"{run.name}: no process pair holds a process of each side (raw/pairs.jsonl): B/A without an interval")
    tol = tolerance or m.params.get("tolerance", TOLERANCE)
    return compare_runs(run / "a", run / "b", paired=True, tolerance=tol, pairs=pairs_of(rows))
