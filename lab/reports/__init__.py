"""The lab's reports: Altair charts rendered from the catalog tables into reports/ (see reports/README.md).

    render_reports(catalog_dir, out_dir, settings)   agreement, bands, rebuild (.html/.png/.svg) + index.html
    render_compare(comparison, out_dir, settings)    compare_<a>_vs_<b>.html/.png/.svg
    compare_chart(comparison)                        the B / A chart itself (rows: lab.catalog.compare)

Altair and vl-convert are imported on first use, so importing this package stays cheap.

They may import the presenters' layer and below (in practice the catalog and the core); never the CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.core.settings import ReportSettings

__all__ = ["compare_chart", "render_compare", "render_reports"]


def render_reports(catalog_dir: Path, out_dir: Path, settings: ReportSettings) -> list[Path]:
    """Write every chart in `settings.formats` and index.html into `out_dir`; returns the files written.

    Charts draw complete runs only (`runs.in_figures`) and render an explanatory empty state when their
    tables are empty. The same catalog always gives byte-identical files."""
    from lab.catalog.headline import catalog_headline, conversation_lines
    from lab.reports.charts import CHARTS
    from lab.reports.data import catalog_runs
    from lab.reports.render import save_chart
    from lab.reports.site import write_index

    runs = catalog_runs(catalog_dir)
    written: list[Path] = []
    sections: dict[str, tuple[str, list[Path]]] = {}
    for name, (description, build) in CHARTS.items():
        paths = save_chart(build(catalog_dir, runs, settings), out_dir, name, settings)
        sections[name] = (description, paths)
        written += paths
    written.append(write_index(out_dir, runs, sections, catalog_headline(catalog_dir), conversation_lines(catalog_dir)))
    return written


def compare_chart(c: Any) -> Any:
    """The B / A heatmap of a lab.catalog.compare.Comparison (an Altair chart)."""
    from lab.reports.compare import compare_chart as build

    return build(c)


def render_compare(c: Any, out_dir: Path, settings: ReportSettings) -> list[Path]:
    """compare_<a>_vs_<b>.html/.png/.svg (the formats in `settings.formats`) of a Comparison, in `out_dir`."""
    from lab.reports.compare import compare_chart as build
    from lab.reports.render import save_chart

    return save_chart(build(c), out_dir, f"compare_{c.run_a}_vs_{c.run_b}", settings)
