"""`lab engine decode`'s table: per depth, decode ms per token through the server and in llama-bench, each median
with its 95% interval, their ratio with its interval, and the verdict."""

from __future__ import annotations

from rich.table import Table

from lab.core.schemas import DecodeDepth, cell
from lab.presenters.sweep import VERDICT_STYLE


def decode_table(rows: list[DecodeDepth], model: str, threads: int) -> Table:
    tol = rows[0].tolerance if rows else 0.0
    t = Table(
        title=f"decode at depth ({model}, {threads} thread(s)): ms per generated token, median [95% interval]; "
        f"server = fake prefix L + new then n_out tokens, llama-bench = -p 0 -n n_out -d depth; "
        f"verdict: server / llama-bench within 1 +- {tol:.0%}"
    )
    for col in ("depth", "L", "new", "n_out", "server ms/token", "llama-bench ms/token", "server / llama-bench"):
        t.add_column(col, justify="right")
    t.add_column("verdict")
    for r in rows:
        style = VERDICT_STYLE[r.verdict]
        t.add_row(
            str(r.depth),
            str(r.L),
            str(r.new),
            str(r.n_out),
            cell(r.server_ms, 3),
            cell(r.bench_ms, 3),
            cell(r.ratio, 3),
            f"[{style}]{r.verdict}[/{style}]",
        )
    return t
