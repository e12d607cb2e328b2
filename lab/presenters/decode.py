"""`lab engine decode`'s table: per depth, decode ms per token through the server and in llama-bench, each median
with its 95% interval, their ratio with its interval, and the verdict."""

from __future__ import annotations

from rich.table import Table

from lab.core.schemas import DecodeDepth, cell
from lab.core.verdicts import styled


def decode_tables(rows: list[DecodeDepth], model: str, threads: int, wide: bool = False) -> list[Table]:
    """The medians per depth, then the check (`wide`: the one table with every column)."""
    if wide:
        return [decode_table(rows, model, threads)]
    t = Table(
        title=f"decode at depth ({model}, {threads} thread(s)): ms per generated token, median [95% interval]; "
        "server = fake prefix L + new then n_out tokens, llama-bench = -p 0 -n n_out -d depth"
    )
    for col in ("depth", "L", "new", "n_out", "server", "llama-bench"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r.depth), str(r.L), str(r.new), str(r.n_out), cell(r.server_ms, 3), cell(r.bench_ms, 3))
    tol = rows[0].tolerance if rows else 0.0
    checks = Table(title=f"check: server / llama-bench, agree within 1 +- {tol:.0%}")
    for col in ("depth", "server / llama-bench", "verdict"):
        checks.add_column(col, justify="left" if col == "verdict" else "right")
    for r in rows:
        checks.add_row(str(r.depth), cell(r.ratio, 3), styled(r.verdict))
    return [t, checks]


def decode_table(rows: list[DecodeDepth], model: str, threads: int) -> Table:
    """Every column in one table (`lab show RUN --wide`)."""
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
        t.add_row(
            str(r.depth),
            str(r.L),
            str(r.new),
            str(r.n_out),
            cell(r.server_ms, 3),
            cell(r.bench_ms, 3),
            cell(r.ratio, 3),
            styled(r.verdict),
        )
    return t
