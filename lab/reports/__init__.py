"""The lab's reports: Altair charts rendered from the catalog tables into reports/ (see reports/README.md).

    render_reports(catalog_dir, out_dir, settings)   agreement, bands, replay (.html/.png/.svg) + index.html
    render_compare(catalog_dir, out_dir, a, b, ...)  compare_<a>_vs_<b>.html/.png/.svg
    compare_chart(catalog_dir, a, b)                 the B / A chart itself

Altair and vl-convert are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.settings import ReportSettings

__all__ = ["compare_chart", "render_compare", "render_reports"]


def render_reports(catalog_dir: Path, out_dir: Path, settings: ReportSettings) -> list[Path]:
    """Write every chart in `settings.formats` and index.html into `out_dir`; returns the files written.

    Charts draw complete runs only (`runs.in_figures`) and render an explanatory empty state when their
    tables are empty. The same catalog always gives byte-identical files."""
    from lab.reports.charts import CHARTS
    from lab.reports.data import runs_table
    from lab.reports.render import save_chart
    from lab.reports.site import write_index

    runs = runs_table(catalog_dir)
    written: list[Path] = []
    sections: dict[str, tuple[str, list[Path]]] = {}
    for name, (description, build) in CHARTS.items():
        paths = save_chart(build(catalog_dir, runs, settings), out_dir, name, settings)
        sections[name] = (description, paths)
        written += paths
    written.append(write_index(out_dir, runs, sections))
    return written


def compare_chart(catalog_dir: Path, run_a: str, run_b: str) -> Any:
    """B / A per (L, new) for two sweep runs, per (depth, band) for two profile runs (an Altair chart).

    Runs are catalog run ids (or unique prefixes); raises lab.reports.compare.CompareError otherwise."""
    from lab.reports.compare import compare_chart as build

    return build(catalog_dir, run_a, run_b)


def render_compare(catalog_dir: Path, out_dir: Path, run_a: str, run_b: str, settings: ReportSettings) -> list[Path]:
    """compare_<a>_vs_<b>.html/.png/.svg (the formats in `settings.formats`) in `out_dir`."""
    from lab.reports.compare import compare_chart as build
    from lab.reports.compare import resolve
    from lab.reports.data import runs_table
    from lab.reports.render import save_chart

    runs = runs_table(catalog_dir)
    a, b = str(resolve(runs, run_a)["run_id"]), str(resolve(runs, run_b)["run_id"])
    return save_chart(build(catalog_dir, a, b), out_dir, f"compare_{a}_vs_{b}", settings)
