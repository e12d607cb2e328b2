"""`lab compare RUN_A RUN_B`: two runs of one experiment side by side, with B/A ratios (in the spirit of
llama.cpp's compare-llama-bench.py): per (L, new) for sweeps, per (depth, band) for profiles."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.catalog.ingest import read_manifest, read_spec
from lab.catalog.tables import SPEC_BY_NAME


class CompareError(RuntimeError):
    pass


@dataclass(frozen=True)
class CompareRow:
    key: tuple[int | str, ...]
    metric: str
    a: float | None
    b: float | None

    @property
    def ratio(self) -> float | None:
        return self.b / self.a if self.a and self.b is not None else None


KEYS = {"sweep": ("sweep_points", ("L", "new", "image")), "profile": ("profile_bands", ("depth", "band"))}
METRICS = {
    "sweep": ("fake_median_ms", "genuine_median_ms", "baseline_median_ms", "opt_prefill_ms", "encode_ms"),
    "profile": ("ms_per_token",),
}


def compare_runs(run_a: Path, run_b: Path) -> tuple[str, tuple[str, ...], list[CompareRow]]:
    ma, mb = read_manifest(run_a), read_manifest(run_b)
    if ma.experiment != mb.experiment:
        raise CompareError(f"cannot compare a {ma.experiment} run with a {mb.experiment} run")
    if ma.experiment not in KEYS:
        raise CompareError(f"compare supports {', '.join(KEYS)} runs, not {ma.experiment}")
    table, key_cols = KEYS[ma.experiment]
    spec = SPEC_BY_NAME[table]
    rows_a = {tuple(r[k] for k in key_cols): r for r in read_spec(run_a, spec)}
    rows_b = {tuple(r[k] for k in key_cols): r for r in read_spec(run_b, spec)}
    out = []
    for key in sorted(set(rows_a) | set(rows_b), key=lambda k: tuple(str(x).zfill(12) for x in k)):
        for metric in METRICS[ma.experiment]:
            a, b = rows_a.get(key, {}).get(metric), rows_b.get(key, {}).get(metric)
            out.append(CompareRow(key, metric, a, b))
    return ma.experiment, key_cols, out
