"""`lab catalog export TABLE --format csv|jsonl|md`: any catalog table for other tools, with its run's provenance
joined in, and llama-bench's column names where the two overlap (n_prompt, n_depth, avg_ts, build_commit,
cpu_info, model_filename, n_threads), so a sweep lines up with a llama-bench CSV."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from lab.catalog.tables import RUNS, SPEC_BY_NAME, load_table
from lab.core.errors import UsageError

Format = Literal["csv", "jsonl", "md"]
FORMATS: tuple[Format, ...] = ("csv", "jsonl", "md")
# this lab's column -> llama-bench's
LLAMA_BENCH = {
    "new": "n_prompt",
    "L": "n_depth",
    "depth": "n_depth",
    "engine_commit": "build_commit",
    "cpu_model": "cpu_info",
    "model_path": "model_filename",
}
PROVENANCE = ("host", "engine_commit", "cpu_model", "model_path")


def _threads(params_json: str) -> int | None:
    params = json.loads(params_json or "{}")  # a profile's own thread count wins over the server's
    threads = params.get("profile", {}).get("threads") or params.get("server", {}).get("threads", params.get("threads"))
    return int(threads) if isinstance(threads, int) else None


def export_frame(catalog_dir: Path, name: str) -> Any:
    """The table as a DataFrame: its rows, then its runs' provenance, renamed to llama-bench's names."""
    if name != RUNS and name not in SPEC_BY_NAME:
        raise UsageError(f"no catalog table {name!r} (tables: {', '.join([RUNS, *SPEC_BY_NAME])})")
    df = load_table(catalog_dir, name)
    runs = load_table(catalog_dir, RUNS)
    if df.empty and runs.empty:
        raise UsageError(f"{catalog_dir}: no catalog yet (run `lab catalog ingest` or `dvc repro`)")
    if name != RUNS and not df.empty and not runs.empty:
        prov = runs[["run_id", *PROVENANCE]].copy()
        prov["n_threads"] = [_threads(p) for p in runs["params_json"]]
        df = df.merge(prov, on="run_id", how="left")
    elif name == RUNS and not df.empty:
        df = df.assign(n_threads=[_threads(p) for p in df["params_json"]])
    if name == "sweep_points" and not df.empty:  # the cached step's prefill throughput
        df["avg_ts"] = df["new"] / df["fake_median_ms"] * 1e3
    return df.rename(columns={k: v for k, v in LLAMA_BENCH.items() if k in df.columns})


def export_table(catalog_dir: Path, name: str, fmt: str) -> str:
    if fmt not in FORMATS:
        raise UsageError(f"--format is one of {', '.join(FORMATS)}, not {fmt!r}")
    df = export_frame(catalog_dir, name)
    if fmt == "csv":
        return str(df.to_csv(index=False))
    if fmt == "jsonl":
        return "".join(json.dumps(r, default=str) + "\n" for r in df.to_dict("records"))
    return markdown(df.columns.tolist(), df.values.tolist())


def markdown(columns: list[str], rows: list[list[Any]]) -> str:
    """A GitHub-flavoured Markdown table (numbers right-aligned, missing values empty)."""

    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and v != v):
            return ""
        text = f"{v:.6g}" if isinstance(v, float) else str(v)
        return text.replace("|", "\\|").replace("\n", " ")

    numeric = [all(isinstance(r[i], int | float) or r[i] is None for r in rows) and rows for i in range(len(columns))]
    out = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---:" if n else "---" for n in numeric) + " |"]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(out) + "\n"
