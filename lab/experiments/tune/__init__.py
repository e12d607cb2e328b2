"""`lab trace tune CONVERSATION`: the llama-server cache flags for a user's own recorded workload, from numbers.

Lifecycle (the protocol's, lab.experiments.protocol; measuring is the replay's, lab.experiments.conversation):

    prepare   the replay's (the trace loaded and derived, nothing created before); then every setting on the grid
              (context checkpoints: count and spacing; the RAM prompt cache: on or off; a sliding-window model's
              --swa-full) run through the model of today's cache policy (lab.conversation.policy): the cells each
              step reuses and the memory the caches hold, and with the host's prefill rates (a short calibration, or
              sweep.rates) the conversation's prefill seconds. The front: settings no other beats in both seconds
              and peak memory, within --ram. The candidates: the --candidates fastest settings on the front
    plan      what measuring costs, from the same rates: each rep replays every step in the optimum and no cache,
              and in today's server once per setting (the user's defaults and the candidates), with a fresh server
              per setting and task
    measure   the replay, today's arm once per setting, every step's arms interleaved in an order rotated by rep
              and step, each rep in processes of its own
    summary   per setting: today's prefill seconds, the share of the optimum's saving it realises and its
              difference from the defaults (each step's median over reps of the paired difference, summed, as a
              share of the saving; with a verdict: within a point, or decided either way), split into the steps
              whose measured reuse differs from the defaults' and the alike ones (the bookkeeping), and how many
              steps' reuse the model predicted exactly. The recommendation, decided by the evidence: a candidate
              decided better than the defaults, else one decided the same that holds less memory, else the
              defaults (and how many reps would decide the closest candidate), as flags to paste for the
              server's version
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, ClassVar

from rich.console import Console

from lab.conversation.arms import ARMS
from lab.conversation.cache_setting import CacheSetting, todays_setting
from lab.core.errors import UsageError
from lab.core.gguf_io import read_gguf_metadata
from lab.core.runs import RunFolder
from lab.core.schemas.raw import TUNE_SETTINGS
from lab.core.schemas.trace import TuneSetting
from lab.core.settings import Settings
from lab.experiments.conversation import Replay
from lab.experiments.protocol import OpenRun, Outcome, RunParts
from lab.experiments.tune.decide import tune_results
from lab.experiments.tune.grid import Option, front, grid, pick, predict_option, renders_differently, setting_key
from lab.experiments.tune.plan import TunePlan, tune_plan
from lab.measure.plan import Rates
from lab.models.hparams import HparamsError


class Tune(Replay):
    """A conversation replayed in its three arms, today's once per setting: the defaults and the candidates."""

    name = "tune"
    records: ClassVar[tuple[str, ...]] = ("server", "model", "mmproj", "conversation")

    def __init__(self, trace: Path | None = None, reps: int = 3, ram_bytes: int | None = None, k: int = 3) -> None:
        super().__init__(trace, reps, list(ARMS))
        self.decode_replies = False  # the saving's share needs prefill only
        self.ram_bytes, self.k = ram_bytes, k
        self.rates: Rates | None = None
        self.options: list[Option] = []
        self.on_front: list[Option] = []
        self.chosen: list[CacheSetting] = []  # the defaults, then the candidates (a resumed run keeps its own)
        self.results: list[TuneSetting] = []
        self.plan: TunePlan | None = None
        self.took_s: float | None = None

    def own_params(self, settings: Settings) -> dict[str, Any]:
        return {
            **super().own_params(settings),
            "ram_bytes": self.ram_bytes,
            "candidates": self.k,
            "settings": [vars(s) for s in self.chosen],
            "rates": self.rates.model_dump(mode="json") if self.rates else None,
        }

    def restore_own(self, settings: Settings, params: dict[str, Any], run: RunFolder) -> Settings:
        settings = super().restore_own(settings, params, run)
        self.ram_bytes, self.k = params.get("ram_bytes"), int(params.get("candidates", 3))
        self.chosen = [CacheSetting(**s) for s in params.get("settings", [])]
        self.rates = Rates.model_validate(params["rates"]) if params.get("rates") else None
        return settings

    def prepare(self, settings: Settings, parts: RunParts) -> None:
        if self.trace is not None and self.trace.is_file():
            from lab.conversation.load import is_conversation
            from lab.conversation.shapes import load_trace

            if not is_conversation(self.trace):
                load_trace(self.trace)  # a line that is neither is named first, with its file and line
                raise UsageError(f"{self.trace}: a trace of step shapes has no prompts to tune today's server on")
        super().prepare(settings, parts)
        assert parts.model is not None
        meta = read_gguf_metadata(parts.model)
        assert self.server_defaults is not None
        base = todays_setting(settings.conversation, settings.server, self.server_defaults)
        if self.rates is None:
            from lab.experiments.sweep.rates import rates_for

            self.rates = rates_for(settings)
        ctx = settings.server.ctx_size
        window = self.window is not None
        preserve = renders_differently(self.tasks, self.unpreserved)
        if not preserve:  # the flag changes nothing here: not weighed, and the user's own flags stand
            base = replace(base, reasoning_preserve=None)
        try:
            self.options = [
                predict_option(self.tasks_for(s), meta, s, ctx, self.image_pos, self.rates, self.rules)
                for s in grid(base, window, preserve)
            ]
        except (UsageError, HparamsError) as e:  # a memory layout the policy does not model
            raise UsageError(f"lab trace tune: {e}") from e
        fits = [o for o in self.options if self.ram_bytes is None or o.peak_bytes <= self.ram_bytes]
        self.on_front = front(fits)
        if not self.chosen:
            self.chosen = [base, *(o.setting for o in pick(self.on_front, self.options[0], self.k))]
        self.todays = {setting_key(s): s for s in self.chosen}
        by_key = {o.key: o for o in self.options}
        self.plan = tune_plan([by_key[k] for k in self.todays if k in by_key], self.rates, self.reps)

    def measure(self, sess: OpenRun, console: Console) -> Outcome:
        if self.plan is not None:  # printed first: what the measuring will cost
            console.print(self.plan.describe(), highlight=False, soft_wrap=True)
        started = time.monotonic()
        outcome = super().measure(sess, console)
        self.took_s = time.monotonic() - started
        self.results = tune_results(
            self.options, self.on_front, self.chosen, self.samples, self.ram_bytes, self.version
        )
        sess.run.rewrite(TUNE_SETTINGS, self.results)
        best = next((r for r in self.results if r.recommended), None)
        outcome.results["recommended"] = best.flags if best else None
        outcome.results["recommended_as"] = best.recommended_as if best else None
        outcome.results["recommended_for"] = self.version  # today's server's --version: the flags are for it
        outcome.results["plan_s"] = self.plan.total_s if self.plan else None
        outcome.results["tune_plan"] = asdict(self.plan) if self.plan else None  # to print it again
        outcome.results["took_s"] = self.took_s
        return outcome

    def predicted_rows(self) -> list[TuneSetting]:
        """Every setting's row before anything is measured (`--plan`)."""
        return tune_results(self.options, self.on_front, self.chosen, [], self.ram_bytes, self.version)

    @property
    def version(self) -> str:
        return self.server_defaults.version if self.server_defaults else ""

    def tables(self) -> dict[str, Any]:
        return {**super().tables(), "settings": [r.model_dump(mode="json") for r in self.results]}
