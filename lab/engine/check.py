"""`lab engine check`: one sample of each arm against the real patched server, shown as a table."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from lab.core.console import lab_console
from lab.core.errors import UsageError
from lab.core.settings import Settings
from lab.engine.build import build_engine
from lab.engine.contract import ContractClient, filler_tokens, text_step
from lab.engine.server import adhoc_server
from lab.models.resolve import resolve_model


def run_check(settings: Settings, L: int, new: int, console: Console | None = None) -> str:
    """One sample of each arm; why the contract was not honoured (the first failing arm and the memory type the
    server resolved), or "" when every arm honoured it."""
    console = console or lab_console()
    if L + new >= settings.server.ctx_size:
        raise UsageError(f"--L {L} + --new {new} do not fit server.ctx_size {settings.server.ctx_size}")
    engine = build_engine(settings.engine, settings.cache_dir, quiet=True)
    model = resolve_model(settings)
    with adhoc_server(engine, model, settings.server, settings.cache_dir, "check") as srv:
        log = srv.log_path
        n_vocab = srv.n_vocab()
        step = text_step(filler_tokens(L, seed=1, n_vocab=n_vocab), filler_tokens(new, seed=2, n_vocab=n_vocab))
        client = ContractClient(srv)
        results = [client.run_arm(arm, step) for arm in ("baseline", "fake", "genuine")]
        cfg = srv.config
    table = Table(title=f"engine check: L={L} new={new}  ({model.name}, {engine.source.commit})")
    for col in ("arm", "cache_n", "prompt_n", "prompt_ms", "fake_ms", "ok"):
        table.add_column(col, justify="right")
    for r in results:
        t = r.timings
        table.add_row(
            r.arm,
            str(t.cache_n) if t else "-",
            str(t.prompt_n) if t else "-",
            f"{t.prompt_ms:.2f}" if t else "-",
            f"{t.fake_ms:.3f}" if t and r.arm == "fake" else "",
            "yes" if r.ok else f"[red]NO ({r.kind}): {r.reason}[/red]",
        )
    console.print(table)
    console.print(
        f"resolved: memory={cfg.memory} n_ctx={cfg.n_ctx} flash_attn={cfg.flash_attn} "
        f"n_rs_seq={cfg.n_rs_seq} threads={cfg.threads}/{cfg.threads_batch}  log: {log}"
    )
    bad = next((r for r in results if not r.ok), None)
    return "" if bad is None else f"the {bad.arm} arm: {bad.reason} (memory type {cfg.memory or 'unknown'})"
