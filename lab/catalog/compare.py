"""The one compare core: two runs of one experiment side by side, B/A per key, for the CLI table
(`lab compare`), `lab compare --report` and the heatmap alike (in the spirit of llama.cpp's
compare-llama-bench.py): per (L, new, screenshot) for sweeps; per (depth, band), plus the whole FUSED chunk
per depth, for profiles. Rows come from run folders or from the catalog tables: the same flattened rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.catalog.ingest import read_manifest, read_spec
from lab.catalog.tables import SPEC_BY_NAME, load_table
from lab.errors import LabError
from lab.schemas import BANDS


class CompareError(LabError):
    pass


TOTAL_BAND = "all bands (FUSED chunk)"


@dataclass(frozen=True)
class Kind:
    table: str
    keys: tuple[str, ...]
    metrics: dict[str, str]  # column -> what it is called in charts


KINDS = {
    "sweep": Kind(
        "sweep_points",
        ("L", "new", "image"),
        {
            "fake_median_ms": "fake",
            "genuine_median_ms": "genuine hit",
            "baseline_median_ms": "baseline",
            "opt_prefill_ms": "estimate",
            "encode_ms": "vision encode",
        },
    ),
    "profile": Kind("profile_bands", ("depth", "band"), {"ms_per_token": "ms per token", "fused_chunk_ms": "ms"}),
}


@dataclass(frozen=True)
class CompareRow:
    key: tuple[Any, ...]
    metric: str
    a: float | None
    b: float | None

    @property
    def ratio(self) -> float | None:
        return self.b / self.a if self.a and self.b is not None else None


@dataclass(frozen=True)
class Comparison:
    experiment: str
    run_a: str
    run_b: str
    keys: tuple[str, ...]
    rows: list[CompareRow]

    @property
    def kind(self) -> Kind:
        return KINDS[self.experiment]


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


def compare_rows(experiment: str, rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]]) -> list[CompareRow]:
    """B/A rows for every key either run has (a side it lacks is None). Profiles also get one TOTAL_BAND row
    per depth: the FUSED chunk wall, which is what the bands share."""
    kind = KINDS[experiment]

    def keyed(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        if experiment != "profile":
            return {tuple(_value(r.get(k)) for k in kind.keys): r for r in rows}
        out = {(r["depth"], r["band"]): {"ms_per_token": r["ms_per_token"]} for r in rows}
        out.update({(r["depth"], TOTAL_BAND): {"fused_chunk_ms": r["fused_chunk_ms"]} for r in rows})
        return out

    a, b = keyed(rows_a), keyed(rows_b)
    out = []
    for key in sorted(set(a) | set(b), key=_sort_key):
        for metric in kind.metrics:
            va, vb = _value(a.get(key, {}).get(metric)), _value(b.get(key, {}).get(metric))
            if va is None and vb is None:
                continue
            out.append(CompareRow(key, metric, va, vb))
    return out


def _check(experiment_a: str, experiment_b: str) -> None:
    if experiment_a != experiment_b:
        raise CompareError(f"cannot compare a {experiment_a} run with a {experiment_b} run")
    if experiment_a not in KINDS:
        raise CompareError(f"compare supports {' and '.join(KINDS)} runs, not {experiment_a}")


def compare_runs(run_a: Path, run_b: Path) -> Comparison:
    """Two run folders (complete or not: what they hold so far)."""
    ma, mb = read_manifest(run_a), read_manifest(run_b)
    _check(ma.experiment, mb.experiment)
    spec = SPEC_BY_NAME[KINDS[ma.experiment].table]
    rows = compare_rows(ma.experiment, read_spec(run_a, spec), read_spec(run_b, spec))
    return Comparison(ma.experiment, run_a.name, run_b.name, KINDS[ma.experiment].keys, rows)


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
    table = load_table(catalog_dir, kind.table)
    if table.empty:
        raise CompareError(f"the catalog has no {kind.table} rows")

    def rows(run_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = table[table["run_id"] == run_id].to_dict("records")
        if not out:
            raise CompareError(f"{run_id} has no rows in the catalog (incomplete, or not ingested yet)")
        return out

    return Comparison(experiments[a], a, b, kind.keys, compare_rows(experiments[a], rows(a), rows(b)))
