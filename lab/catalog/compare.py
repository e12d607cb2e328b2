"""The one compare core: two runs of one experiment side by side, B/A per key, for the CLI table
(`lab compare`), `lab compare --report` and the heatmap alike (in the spirit of llama.cpp's
compare-llama-bench.py): per (L, new, screenshot) for sweeps; per (L, new) for in-process arms; per
(depth, band), plus the whole FUSED chunk per depth, for profiles. Rows come from run folders or from the
catalog tables: the same flattened rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.catalog.ingest import read_manifest, read_spec
from lab.catalog.tables import SPEC_BY_NAME, load_table
from lab.errors import LabError
from lab.fills import fill_values
from lab.schemas import BANDS, InprocFill, Interval
from lab.stats import geomean_ratio, unpaired_draws, unpaired_ratio


class CompareError(LabError):
    pass


TOTAL_BAND = "all bands (FUSED chunk)"


@dataclass(frozen=True)
class Kind:
    table: str  # the rows compared
    samples: tuple[str, ...]  # the tables of the samples behind them (for the intervals)
    keys: tuple[str, ...]
    metrics: dict[str, str]  # column -> what it is called in charts


KINDS = {
    "sweep": Kind(
        "sweep_points",
        ("sweep_samples", "prefill_tps", "sweep_fills"),
        ("L", "new", "image"),
        {
            "fake_median_ms": "fake",
            "genuine_median_ms": "genuine hit",
            "baseline_median_ms": "baseline",
            "opt_prefill_ms": "estimate",
            "encode_ms": "vision encode",
        },
    ),
    "arms": Kind(
        "arms_points",
        ("arms_samples",),
        ("L", "new"),
        {
            "fake_median_ms": "fake",
            "genuine_median_ms": "genuine hit",
            "plain_median_ms": "plain genuine hit",
            "restore_median_ms": "restore (older runs)",
            "baseline_median_ms": "baseline",
            "restore_prep_ci_value": "restore (cache read)",
        },
    ),
    "profile": Kind(
        "profile_bands",
        ("profile_walls", "profile_band_cycles"),
        ("depth", "band"),
        {"ms_per_token": "ms per token", "fused_chunk_ms": "ms"},
    ),
}
Side = dict[str, list[dict[str, Any]]]  # one run's tables: name -> flattened rows


@dataclass(frozen=True)
class CompareRow:
    key: tuple[Any, ...]  # () for the geometric-mean row of a metric over the grid
    metric: str
    a: float | None
    b: float | None
    ci: Interval | None = None  # B/A from the samples of both runs (unpaired), when they have samples
    draws: Any = field(default=None, repr=False, compare=False)  # its bootstrap draws (for the geomean)

    @property
    def ratio(self) -> float | None:
        return self.b / self.a if self.a and self.b is not None else None

    @property
    def significant(self) -> bool | None:
        """True when B/A's interval excludes 1; None without an interval ("within noise" when False)."""
        return None if self.ci is None or self.ci.n < 2 else not (self.ci.lo <= 1 <= self.ci.hi)


@dataclass(frozen=True)
class Comparison:
    experiment: str
    run_a: str
    run_b: str
    keys: tuple[str, ...]
    rows: list[CompareRow]
    summary: list[CompareRow] = field(default_factory=list)  # the geometric mean per metric over the keys

    @property
    def kind(self) -> Kind:
        return KINDS[self.experiment]

    def slowdowns(self, pct: float) -> list[CompareRow]:
        """Geometric-mean rows significantly slower than 1 + pct/100 (their interval's low end is above it)."""
        return [r for r in self.summary if r.ci is not None and r.ci.lo > 1 + pct / 100]


def _value(v: Any) -> Any:
    return None if v is None or v != v else v  # NaN (a catalog's missing value) is None


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


def _samples(experiment: str, side: Side) -> dict[tuple[tuple[Any, ...], str], list[float]]:
    """The samples behind each (key, metric) of one run: the timed requests of each arm, the llama-bench
    estimate samples, the vision encodes; a profile's FUSED walls per depth and its bands' ms/token per cycle."""
    out: dict[tuple[tuple[Any, ...], str], list[float]] = {}
    if experiment == "profile":
        for w in side.get("profile_walls", []):
            if w["mode"] == "fused":
                out.setdefault(((w["depth"], TOTAL_BAND), "fused_chunk_ms"), []).append(float(w["ms"]))
        for c in side.get("profile_band_cycles", []):
            out.setdefault(((c["depth"], c["band"]), "ms_per_token"), []).append(float(c["ms_per_token"]))
        return out
    if experiment == "arms":  # in-process decode ms per arm, and the restore's cache read
        where = {r["point"]: (r["L"], r["new"]) for r in side.get("arms_points", [])}
        for smp in side.get("arms_samples", []):
            if smp["point"] not in where or not smp["ok"]:
                continue
            if _value(smp.get("decode_ms")) is not None:
                out.setdefault((where[smp["point"]], f"{smp['arm']}_median_ms"), []).append(float(smp["decode_ms"]))
            # the cache read: the genuine arm's restore (older runs: the restore arm's)
            if smp["arm"] in ("genuine", "restore") and _value(smp.get("prep_ms")) is not None:
                out.setdefault((where[smp["point"]], "restore_prep_ci_value"), []).append(float(smp["prep_ms"]))
        return out
    keys = {r["point"]: (r["L"], r["new"], _value(r.get("image"))) for r in side.get("sweep_points", [])}
    encode = {r["point"]: _value(r.get("encode_ms")) or 0.0 for r in side.get("sweep_points", [])}
    for smp in side.get("sweep_samples", []):
        key = keys.get(smp["point"])
        if key is None or not smp["ok"] or _value(smp.get("prompt_ms")) is None:
            continue
        out.setdefault((key, f"{smp['arm']}_median_ms"), []).append(float(smp["prompt_ms"]))
        if smp["arm"] == "fake" and _value(smp.get("encode_ms")) is not None:
            out.setdefault((key, "encode_ms"), []).append(float(smp["encode_ms"]))
    for t in side.get("prefill_tps", []):
        # the estimate's samples (rep set) = the chunk at depth L (+ the point's encode); rep None: the cross-check
        if _value(t.get("point")) in keys and _value(t.get("rep")) is not None:
            out.setdefault((keys[t["point"]], "opt_prefill_ms"), []).append(float(t["avg_ms"]) + encode[t["point"]])
    fills = [
        InprocFill.model_validate({k: _value(v) for k, v in f.items() if k != "run_id" and _value(v) is not None})
        for f in side.get("sweep_fills", [])
    ]
    for point in side.get("sweep_points", []):  # no direct baseline reps: the fill passes' prefix sums
        key = keys[point["point"]]
        if fills and (key, "baseline_median_ms") not in out:
            only_new = int(point["new"]) + int(_value(point.get("image_tokens")) or 0)
            if values := fill_values(fills, int(point["L"]), only_new)[0]:
                out[(key, "baseline_median_ms")] = values
    return out


def compare_rows(experiment: str, a_side: Side, b_side: Side) -> tuple[list[CompareRow], list[CompareRow]]:
    """B/A rows for every key either run has (a side it lacks is None), each with the interval of B/A from
    both runs' samples; and per metric the geometric mean over the keys both have. Profiles also get one
    TOTAL_BAND row per depth: the FUSED chunk wall, which is what the bands share."""
    kind = KINDS[experiment]

    def keyed(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        if experiment != "profile":
            return {tuple(_value(r.get(k)) for k in kind.keys): r for r in rows}
        out = {(r["depth"], r["band"]): {"ms_per_token": r["ms_per_token"]} for r in rows}
        out.update({(r["depth"], TOTAL_BAND): {"fused_chunk_ms": r["fused_chunk_ms"]} for r in rows})
        return out

    a, b = keyed(a_side.get(kind.table, [])), keyed(b_side.get(kind.table, []))
    sa, sb = _samples(experiment, a_side), _samples(experiment, b_side)
    rows: list[CompareRow] = []
    for key in sorted(set(a) | set(b), key=_sort_key):
        for metric in kind.metrics:
            va, vb = _value(a.get(key, {}).get(metric)), _value(b.get(key, {}).get(metric))
            if va is None and vb is None:
                continue
            xa, xb = sa.get((key, metric), []), sb.get((key, metric), [])
            tag = f"{key}/{metric}"
            ci, draws = unpaired_ratio(xb, xa, tag), unpaired_draws(xb, xa, tag)
            rows.append(CompareRow(key, metric, va, vb, ci, draws))
    summary = []
    for metric in kind.metrics:
        both = [r for r in rows if r.metric == metric and r.draws is not None and r.ci is not None]
        g = geomean_ratio([r.draws for r in both], [r.ci.value for r in both if r.ci]) if both else None
        if g is not None:
            summary.append(CompareRow((), metric, None, None, g))
    return rows, summary


def _check(experiment_a: str, experiment_b: str) -> None:
    if experiment_a != experiment_b:
        raise CompareError(f"cannot compare a {experiment_a} run with a {experiment_b} run")
    if experiment_a not in KINDS:
        raise CompareError(f"compare supports {' and '.join(KINDS)} runs, not {experiment_a}")


def compare_runs(run_a: Path, run_b: Path) -> Comparison:
    """Two run folders (complete or not: what they hold so far)."""
    ma, mb = read_manifest(run_a), read_manifest(run_b)
    _check(ma.experiment, mb.experiment)
    kind = KINDS[ma.experiment]

    def side(run: Path) -> Side:
        return {name: read_spec(run, SPEC_BY_NAME[name]) for name in (kind.table, *kind.samples)}

    rows, summary = compare_rows(ma.experiment, side(run_a), side(run_b))
    return Comparison(ma.experiment, run_a.name, run_b.name, kind.keys, rows, summary)


def compare_catalog(catalog_dir: Path, ref_a: str, ref_b: str) -> Comparison:
    """Two runs of the catalog, by id or unique id prefix."""
    runs = load_table(catalog_dir, "runs")
    ids = [str(x) for x in runs["run_id"]] if len(runs) else []
    experiments = dict(zip(ids, (str(x) for x in runs["experiment"]), strict=True)) if ids else {}

    def resolve(ref: str) -> str:
        found = [i for i in ids if i == ref] or [i for i in ids if i.startswith(ref)]
        if len(found) != 1:
            raise CompareError(f"no unique run {ref!r} in the catalog ({len(found)} match)")
        return found[0]

    a, b = resolve(ref_a), resolve(ref_b)
    _check(experiments[a], experiments[b])
    kind = KINDS[experiments[a]]
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

    rows, summary = compare_rows(experiments[a], side(a), side(b))
    return Comparison(experiments[a], a, b, kind.keys, rows, summary)
