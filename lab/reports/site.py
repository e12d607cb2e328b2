"""index.html: a link to every chart file written, and each run's provenance (complete or not).

Plain HTML, no scripts, no external resources, nothing time-dependent: the same catalog gives the same bytes.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

import pandas as pd

from lab.catalog.headline import HeadlineProfile, HeadlineStep, headline

STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "Liberation Sans", sans-serif; margin: 2rem auto;
       max-width: 1200px; padding: 0 1.5rem; color: #1f2933; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
.muted { color: #5f6b7a; } code { font-size: .9em; }
.chart { margin: 1rem 0 2rem; } .chart img { max-width: 100%; border: 1px solid #e1e5ea; }
table { border-collapse: collapse; width: 100%; font-size: .85rem; }
th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid #e1e5ea; vertical-align: top; }
th { background: #f4f6f8; font-weight: 600; }
tr.not-drawn td { background: #fdf1f1; } .badge { font-weight: 600; color: #b42318; }
td.warn { color: #8a5a00; }
"""

PROVENANCE = [
    ("run", "run_id"),
    ("experiment", "experiment"),
    ("host", "host"),
    ("CPU", "cpu_model"),
    ("engine commit", "engine_commit"),
    ("patch sha256", "patch_sha256"),
    ("started (UTC)", "started_utc"),
    ("status", "status"),
    ("host noise", "noise_warnings"),
]


def write_index(
    out_dir: Path,
    runs: pd.DataFrame,
    charts: dict[str, tuple[str, list[Path]]],
    headline: tuple[list[HeadlineStep], list[HeadlineProfile]] = ([], []),
    conversations: list[str] | None = None,
) -> Path:
    """`charts`: name -> (description, files written for it); `headline`: the answer the page opens with
    (lab.catalog.headline), and `conversations` its per-task conversation lines. Returns the path of index.html."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head><meta charset="utf-8"><title>prefill lab reports</title>',
        f"<style>{STYLE}</style></head>",
        "<body>",
        "<h1>prefill lab reports</h1>",
        '<p class="muted">Rendered by <code>lab report</code> (the <code>report</code> stage of '
        "<code>dvc repro</code>) from the catalog tables. The charts draw complete runs only; incomplete and "
        "failed runs are listed below, marked, and not drawn.</p>",
        *_headline(*headline),
        *(["<p>" + "<br>".join(escape(line) for line in conversations) + "</p>"] if conversations else []),
        "<h2>Charts</h2>",
    ]
    for name, (description, files) in charts.items():
        parts.append(_chart_section(name, description, files))
    parts += [f"<h2>Runs ({len(runs)})</h2>", _runs_table(runs), "</body>", "</html>", ""]
    path = out_dir / "index.html"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(parts), encoding="utf-8")
    tmp.replace(path)
    return path


def _chart_section(name: str, description: str, files: list[Path]) -> str:
    by_ext = {f.suffix.lstrip("."): f.name for f in files}
    main = by_ext.get("html") or by_ext.get("svg") or by_ext.get("png")
    heading = f'<a href="{escape(main)}">{escape(name)}</a>' if main else escape(name)
    links = " · ".join(f'<a href="{escape(f)}">{ext.upper()}</a>' for ext, f in by_ext.items())
    out = [f'<div class="chart" id="{escape(name)}">', f"<h3>{heading}</h3>", f"<p>{escape(description)}"]
    out.append(f' <span class="muted">({links})</span></p>' if links else "</p>")
    preview = by_ext.get("svg") or by_ext.get("png")
    if preview and main:
        out.append(f'<a href="{escape(main)}"><img src="{escape(preview)}" alt="{escape(name)} chart"></a>')
    out.append("</div>")
    return "\n".join(out)


def _runs_table(runs: pd.DataFrame) -> str:
    if runs.empty:
        return '<p class="muted">No run in the catalog yet.</p>'
    rows = ["<table>", "<thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h, _ in PROVENANCE) + "</tr></thead>"]
    rows.append("<tbody>")
    newest_first = runs.iloc[::-1]
    for _, r in newest_first.iterrows():
        drawn = bool(r["in_figures"])
        cells = []
        for _, column in PROVENANCE:
            value = "" if pd.isna(r.get(column)) else str(r.get(column))
            if column == "patch_sha256":
                cells.append(f'<td title="{escape(value)}"><code>{escape(value[:12])}</code></td>')
            elif column == "engine_commit":
                cells.append(f"<td><code>{escape(value)}</code></td>")
            elif column == "started_utc":
                cells.append(f'<td title="{escape(value)}">{escape(value[:10])}</td>')
            elif column == "noise_warnings":
                cells.append(f'<td class="warn">{escape(value)}</td>' if value else '<td class="muted">none</td>')
            elif column == "status" and not drawn:
                reason = "" if pd.isna(r.get("reason")) else str(r.get("reason"))
                note = f'<br><span class="muted">{escape(reason)}</span>' if reason else ""
                cells.append(f'<td><span class="badge">{escape(value)}: not drawn</span>{note}</td>')
            else:
                cells.append(f"<td>{escape(value)}</td>")
        cls = "" if drawn else ' class="not-drawn"'
        rows.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    rows += ["</tbody>", "</table>"]
    return "\n".join(rows)


def _headline(steps: list[HeadlineStep], profiles: list[HeadlineProfile]) -> list[str]:
    """The answer first (lab.catalog.headline.headline): per host and model, an agent step with the cache vs
    re-prefilled, and where the time goes at the deepest profiled depth; each table with its note beneath."""
    out = ['<h2 id="headline">The answer</h2>']
    if not steps and not profiles:
        return [
            *out,
            '<p class="muted">No complete sweep or profile run yet: run <code>lab sweep</code> and '
            "<code>lab profile</code>, then <code>dvc repro</code>.</p>",
        ]
    h = headline(steps, profiles)
    out += ["<p>" + "<br>".join(escape(line) for line in h.lines) + "</p>"]
    for t in h.tables:
        out += [
            '<table class="headline">',
            f"<caption>{escape(t.title)}</caption>",
            "<thead><tr>" + "".join(f"<th>{escape(c)}</th>" for c in t.columns) + "</tr></thead>",
            "<tbody>",
            *("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in t.rows),
            "</tbody>",
            "</table>",
            f'<p class="muted">{escape(t.note, quote=False)}</p>',
        ]
    return out
