"""What the reports draw: catalog rows of complete runs (`runs.in_figures`), in a stable order, with the host.

Every frame handed to a chart is sorted by explicit keys, so the same catalog always gives the same spec
(and the same bytes on disk) whatever order ingest wrote the rows in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from lab.catalog.newest import age, newest_of
from lab.catalog.tables import RUNS, RunRecord, load_table, rows_at, unflatten

RUN_COLUMNS = list(RunRecord.model_fields)


def catalog_runs(catalog_dir: Path) -> pd.DataFrame:
    """Every run folder the catalog knows (complete or not), oldest first (lab.catalog.newest.age)."""
    runs: pd.DataFrame = load_table(catalog_dir, RUNS)
    if runs.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in RUN_COLUMNS})
    for c in RUN_COLUMNS:
        if c not in runs.columns:
            runs[c] = None
    runs["in_figures"] = runs["in_figures"].fillna(False).astype(bool)
    records = [unflatten({str(k): v for k, v in x.items()}, RunRecord) for x in runs.to_dict("records")]
    order = sorted(range(len(records)), key=lambda i: age(records[i]))  # the catalog's one rule of age
    return runs.iloc[order].reset_index(drop=True)


def drawn_runs(runs: pd.DataFrame, experiment: str | None = None) -> pd.DataFrame:
    """The runs a figure may draw: complete ones, of `experiment` when given, oldest first."""
    keep = runs["in_figures"].astype(bool)
    if experiment is not None:
        keep &= runs["experiment"] == experiment
    return runs[keep].reset_index(drop=True)


def newest_run(runs: pd.DataFrame, experiment: str | None) -> str | None:
    """The newest complete run of `experiment` (of any when None), the catalog's choice (lab.catalog.newest)."""
    records = [unflatten({str(k): v for k, v in x.items()}, RunRecord) for x in runs.to_dict("records")]
    r = newest_of(records, experiment)
    return None if r is None else r.run_id


def run_label(run: Any) -> str:
    """How a run is named in dropdowns and subtitles: its id and host."""
    return f"{run['run_id']} ({run['host']})"


def figure_rows(
    catalog_dir: Path,
    name: str,
    runs: pd.DataFrame,
    keys: list[str],
    run_ids: list[str] | None = None,
    where: str | None = None,
) -> pd.DataFrame:
    """Rows of table `name` that belong to drawn runs (or to `run_ids`), with `host`, sorted by run age then keys;
    of a sweep table, those measured `where` when given (server, inproc).

    Empty (no columns) when the table is missing or no drawn run has rows in it."""
    table: pd.DataFrame = load_table(catalog_dir, name)
    if where is not None:
        table = rows_at(table, where)
    if table.empty or "run_id" not in table.columns:
        return pd.DataFrame()
    chosen = drawn_runs(runs) if run_ids is None else runs[runs["run_id"].isin(run_ids)]
    order = chosen[["run_id", "host"]].reset_index(drop=True).reset_index(names="_run_order")
    out = table.drop(columns=["host"], errors="ignore").merge(order, on="run_id", how="inner")
    if out.empty:
        return pd.DataFrame()
    out = out.sort_values(["_run_order", *keys], kind="stable").drop(columns="_run_order")
    return out.reset_index(drop=True)
