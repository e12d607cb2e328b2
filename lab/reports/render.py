"""Writing one chart to disk: offline HTML (Vega inlined, no CDN), PNG and SVG through vl-convert."""

from __future__ import annotations

import json
import re
from pathlib import Path

from lab.core.settings import ReportSettings
from lab.reports.style import Chart, finish

EMBED_OPTIONS = {"renderer": "svg", "actions": False}
ORDER = ("html", "png", "svg")
# Altair's inline page lays the dropdowns out to the right of the chart in the browser's default serif font:
# put them above it, in the chart's font.
PAGE_CSS = """
    body { margin: 16px; font-family: sans-serif; }
    #vis.vega-embed { flex-direction: column; }
    #vis .vega-bindings { order: -1; margin: 0 0 8px 16px; font: 13px sans-serif; color: #1f2933; }
    #vis .vega-bind-name { margin-right: 6px; }
    #vis .vega-bindings select { font: 13px sans-serif; padding: 2px 4px; }
"""
# Vega's SVG renderer numbers clip paths and gradients with counters that live as long as vl-convert's JS
# runtime, so a second render in the same process would get other ids: renumber them per file.
_SVG_REF = re.compile(r'(id="|url\(#)(clip|gradient_|pattern_)(\d+)')


class ScriptSafeJSON(json.JSONEncoder):
    """The chart's spec as it goes into the page's <script>: `<`, `>` and `&` as JSON escapes, so no string
    from a run (a host name, a model name, a run id) can close the script or open markup. JSON readers, Vega
    included, decode them back to the same characters."""

    def encode(self, o: object) -> str:
        return super().encode(o).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def save_chart(chart: Chart, out_dir: Path, name: str, settings: ReportSettings) -> list[Path]:
    """`name`.html/.png/.svg for the formats in `settings.formats`, in that order; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    chart = finish(chart)
    written: list[Path] = []
    for fmt in ORDER:
        if fmt not in settings.formats:
            continue
        path = out_dir / f"{name}.{fmt}"
        tmp = path.with_name(f".{path.name}.tmp")
        if fmt == "html":
            json_kwds = {"cls": ScriptSafeJSON}
            chart.save(str(tmp), format="html", inline=True, embed_options=EMBED_OPTIONS, json_kwds=json_kwds)
            tmp.write_text(tmp.read_text(encoding="utf-8").replace("</style>", PAGE_CSS + "  </style>", 1), "utf-8")
        elif fmt == "png":
            chart.save(str(tmp), format="png", scale_factor=settings.png_scale)
        else:
            chart.save(str(tmp), format="svg")
            tmp.write_text(stable_svg_ids(tmp.read_text(encoding="utf-8")), encoding="utf-8")
        tmp.replace(path)  # a reader never sees a half-written file
        written.append(path)
    return written


def stable_svg_ids(svg: str) -> str:
    """Renumber Vega's clip/gradient/pattern ids by first use (clip1, clip2, ...), keeping references intact."""
    new: dict[str, str] = {}
    counts: dict[str, int] = {}

    def renumber(m: re.Match[str]) -> str:
        prefix, old = m.group(2), m.group(2) + m.group(3)
        if old not in new:
            counts[prefix] = counts.get(prefix, 0) + 1
            new[old] = f"{prefix}{counts[prefix]}"
        return m.group(1) + new[old]

    return _SVG_REF.sub(renumber, svg)
