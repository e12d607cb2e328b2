"""`lab engine check`: one sample of each arm against the real patched server (lab.presenters.engine prints it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.core.errors import UsageError
from lab.core.settings import Settings
from lab.engine.build import Flavor, build_engine
from lab.engine.contract import ArmResult, ContractClient, filler_tokens, text_step
from lab.engine.resolved import ResolvedConfig
from lab.engine.server import adhoc_server


@dataclass
class Check:
    """One sample of each arm at (L, new), the config the server resolved, and its log."""

    L: int
    new: int
    model: str
    commit: str
    results: list[ArmResult]
    config: ResolvedConfig
    log: Path

    @property
    def failure(self) -> str:
        """Why the contract was not honoured (the first failing arm and the memory type the server resolved), or
        "" when every arm honoured it."""
        bad = next((r for r in self.results if not r.ok), None)
        return "" if bad is None else f"the {bad.arm} arm: {bad.reason} (memory type {self.config.memory or 'unknown'})"

    def record(self) -> dict[str, Any]:
        """What the check table is printed from, JSON-ready (`--json`)."""
        return {
            "L": self.L,
            "new": self.new,
            "model": self.model,
            "commit": self.commit,
            "arms": [r.model_dump(mode="json") for r in self.results],
            "server_config": self.config.model_dump(mode="json"),
            "log": str(self.log),
            "failure": self.failure,
        }


def run_check(settings: Settings, model: Path, L: int, new: int, flavor: Flavor = "release") -> Check:
    """One sample of each arm (baseline, fake, genuine) through a server of `model`."""
    if L + new >= settings.server.ctx_size:
        raise UsageError(f"--L {L} + --new {new} do not fit server.ctx_size {settings.server.ctx_size}")
    engine = build_engine(settings.engine, settings.cache_dir, flavor=flavor, quiet=True)
    with adhoc_server(engine, model, settings.server, settings.cache_dir, "check") as srv:
        n_vocab = srv.n_vocab()
        step = text_step(filler_tokens(L, seed=1, n_vocab=n_vocab), filler_tokens(new, seed=2, n_vocab=n_vocab))
        client = ContractClient(srv)
        results = [client.run_arm(arm, step) for arm in ("baseline", "fake", "genuine")]
        return Check(L, new, model.name, engine.source.commit, results, srv.config, srv.log_path)
