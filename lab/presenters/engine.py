"""The engine's tables: `lab engine info`'s record, and `lab engine check`'s one sample of each arm, what the
server resolved, and its log."""

from __future__ import annotations

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from lab.engine.check import Check


def engine_table(info: BaseModel) -> Table:
    """`lab engine info`: the built engine's record (lab.engine.build.EngineInfo), a field a row."""
    t = Table(show_header=False)
    for k, v in info.model_dump().items():
        t.add_row(k, str(v))
    return t


def check_table(c: Check) -> Table:
    table = Table(title=f"engine check: L={c.L} new={c.new}  ({c.model}, {c.commit})")
    for col in ("arm", "cache_n", "prompt_n", "prompt_ms", "fake_ms", "ok"):
        table.add_column(col, justify="right")
    for r in c.results:
        t = r.timings
        table.add_row(
            r.arm,
            str(t.cache_n) if t else "-",
            str(t.prompt_n) if t else "-",
            f"{t.prompt_ms:.2f}" if t else "-",
            f"{t.fake_ms:.3f}" if t and r.arm == "fake" else "",
            "yes" if r.ok else f"[red]NO ({r.kind}): {r.reason}[/red]",
        )
    return table


def print_check(console: Console, c: Check) -> None:
    cfg = c.config
    console.print(check_table(c))
    console.print(
        f"resolved: memory={cfg.memory} n_ctx={cfg.n_ctx} flash_attn={cfg.flash_attn} "
        f"n_rs_seq={cfg.n_rs_seq} threads={cfg.threads}/{cfg.threads_batch}  log: {c.log}"
    )
