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
              steps' reuse the model predicted exactly. The recommendation: the measured setting (within --ram)
              that gains most on the defaults, as flags to paste
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from rich.console import Console

from lab.conversation.arms import ARMS
from lab.conversation.cache_setting import CacheSetting, todays_setting
from lab.conversation.derive import StepTokens, cells
from lab.conversation.prediction import predict_conversation
from lab.conversation.rules import Rules
from lab.core.errors import UsageError
from lab.core.gguf_io import read_gguf_metadata
from lab.core.runs import RunFolder
from lab.core.schemas import ConversationSample, Interval
from lab.core.schemas.raw import TUNE_SETTINGS
from lab.core.schemas.trace import TuneSetting
from lab.core.settings import Settings
from lab.core.stats import median_interval, step_median_share, verdict
from lab.core.units import MIB
from lab.experiments.conversation import Replay
from lab.experiments.protocol import OpenRun, Outcome, RunParts
from lab.measure.plan import Rates, fmt_duration
from lab.models.hparams import HparamsError

CHECKPOINTS = (0, 8, 32, 128)
MIN_STEPS = (0, 64, 256, 1024)
EQUIVALENT = 0.01  # realised shares within a point of the defaults' agree


def setting_key(s: CacheSetting) -> str:
    return f"ckpt{s.checkpoints}-step{s.checkpoint_min_step}-ram{s.cache_ram_mib}" + ("-swafull" if s.swa_full else "")


def grid(base: CacheSetting, window: bool) -> list[CacheSetting]:
    """Every setting weighed: the defaults, and checkpoints x spacing x RAM cache (off, or the defaults' size)
    x --swa-full for a sliding-window model."""
    rams = sorted({0, base.cache_ram_mib if base.cache_ram_mib else 8192})
    fulls = (False, True) if window else (base.swa_full,)
    out = [base]
    for ck, step, ram, full in itertools.product(CHECKPOINTS, MIN_STEPS, rams, fulls):
        s = replace(base, checkpoints=ck, checkpoint_min_step=step, cache_ram_mib=ram, swa_full=full)
        if s not in out:
            out.append(s)
    return out


@dataclass
class Option:
    """A setting as the policy model predicts it for the conversation."""

    setting: CacheSetting
    prefill_s: float
    peak_bytes: int
    reused: int
    cache_n: dict[tuple[str, int], int]

    @property
    def key(self) -> str:
        return setting_key(self.setting)


def predict_option(
    tasks: dict[str, list[StepTokens]],
    meta: dict[str, Any],
    setting: CacheSetting,
    ctx: int,
    image_pos: dict[str, int],
    rates: Rates,
    rules: Rules,
) -> Option:
    """One setting over the conversation: its prefill seconds from the rates (each step prefills from its reuse to
    its end), the most memory its caches hold, and each step's reuse."""
    predicted = predict_conversation(tasks, meta, setting, ctx, image_pos, rules)
    cells_of = {(st.task_id, st.step): st.cells for steps in tasks.values() for st in steps}
    return Option(
        setting,
        sum(rates.ms(p.reuse.cache_n, cells_of[k]) for k, p in predicted.items()) / 1e3,
        max((max(p.held_bytes, p.reuse.held_bytes) for p in predicted.values()), default=0),
        sum(p.reuse.cache_n for p in predicted.values()),
        {k: p.reuse.cache_n for k, p in predicted.items()},
    )


def front(options: list[Option]) -> list[Option]:
    """The settings no other beats in both predicted seconds and peak memory; of those predicting the same
    outcome, the first (the grid puts the defaults first)."""
    out: list[Option] = []
    for o in options:
        beaten = any(
            (p.prefill_s <= o.prefill_s and p.peak_bytes <= o.peak_bytes)
            and (p.prefill_s < o.prefill_s or p.peak_bytes < o.peak_bytes)
            for p in options
        )
        same = any(p.cache_n == o.cache_n and p.peak_bytes == o.peak_bytes for p in out)
        if not beaten and not same:
            out.append(o)
    return sorted(out, key=lambda o: o.prefill_s)


def pick(on_front: list[Option], defaults: Option, k: int) -> list[Option]:
    """The k fastest settings on the front (where the recommendation will be), none that predicts what the
    defaults do."""
    return [o for o in on_front if o.cache_n != defaults.cache_n][:k]


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
            from lab.experiments.planning import rates_for

            self.rates = rates_for(settings)
        ctx = settings.server.ctx_size
        window = self.window is not None
        try:
            self.options = [
                predict_option(self.tasks, meta, s, ctx, self.image_pos, self.rates, self.rules)
                for s in grid(base, window)
            ]
        except (UsageError, HparamsError) as e:  # a memory layout the policy does not model
            raise UsageError(f"lab trace tune: {e}") from e
        fits = [o for o in self.options if self.ram_bytes is None or o.peak_bytes <= self.ram_bytes]
        self.on_front = front(fits)
        if not self.chosen:
            self.chosen = [base, *(o.setting for o in pick(self.on_front, self.options[0], self.k))]
        self.todays = {setting_key(s): s for s in self.chosen}
        by_key = {o.key: o for o in self.options}
        self.plan = tune_plan(self.tasks, [by_key[k] for k in self.todays if k in by_key], self.rates, self.reps)

    def measure(self, sess: OpenRun, console: Console) -> Outcome:
        if self.plan is not None:  # printed first: what the measuring will cost
            console.print(self.plan.describe(), highlight=False, soft_wrap=True)
        started = time.monotonic()
        outcome = super().measure(sess, console)
        self.took_s = time.monotonic() - started
        self.results = tune_results(self.options, self.on_front, self.chosen, self.samples, self.ram_bytes)
        sess.run.rewrite(TUNE_SETTINGS, self.results)
        best = next((r for r in self.results if r.recommended), None)
        outcome.results["recommended"] = best.flags if best else None
        outcome.results["plan_s"] = self.plan.total_s if self.plan else None
        outcome.results["took_s"] = self.took_s
        return outcome

    def predicted_rows(self) -> list[TuneSetting]:
        """Every setting's row before anything is measured (`--plan`)."""
        return tune_results(self.options, self.on_front, self.chosen, [], self.ram_bytes)

    def tables(self) -> dict[str, Any]:
        return {**super().tables(), "settings": [r.model_dump(mode="json") for r in self.results]}


Step = tuple[str, int]
Rows = dict[int, list[float]]


def seconds(samples: list[ConversationSample], arm: str, setting: str, steps: list[Step]) -> Rows:
    """One arm's prefill seconds by rep, a row over the steps (NaN where a step failed or is missing)."""
    col = {st: j for j, st in enumerate(steps)}
    rows: Rows = {}
    for s in samples:
        if s.arm == arm and s.setting == setting:
            row = rows.setdefault(s.rep, [math.nan] * len(steps))
            if s.ok and s.prompt_ms is not None:
                row[col[(s.task_id, s.step)]] = s.prompt_ms / 1e3
    return rows


def minus(a: Rows, b: Rows, cols: list[int] | None = None) -> Rows:
    """a - b in the reps both have, step by step (only the columns `cols` when given)."""
    keep = cols if cols is not None else range(len(next(iter(a.values()), [])))
    return {r: [a[r][j] - b[r][j] for j in keep] for r in sorted(a.keys() & b.keys())}


def differing(samples: list[ConversationSample], a: str, b: str) -> set[Step]:
    """The steps whose measured reuse under setting b differs from a's in some rep."""
    reuse = {(s.setting, s.rep, s.task_id, s.step): s.cache_n for s in samples if s.arm == "today"}
    return {
        (t, st)
        for (k, rep, t, st), n in reuse.items()
        if k == a and (b, rep, t, st) in reuse and reuse[(b, rep, t, st)] != n
    }


class Baseline(NamedTuple):
    """What every measured setting is weighed against, read from the samples once: the steps, the optimum's
    prefill, the saving (no cache minus the optimum) and the defaults' prefill, by rep."""

    steps: list[Step]
    optimum: Rows
    saving: Rows
    defaults: Rows

    @classmethod
    def of(cls, samples: list[ConversationSample], defaults_key: str) -> Baseline:
        steps = sorted({(s.task_id, s.step) for s in samples})
        optimum = seconds(samples, "optimum", "", steps)
        saving = minus(seconds(samples, "no_cache", "", steps), optimum)
        return cls(steps, optimum, saving, seconds(samples, "today", defaults_key, steps))


def measured_fields(samples: list[ConversationSample], keys: list[str], o: Option, base: Baseline) -> dict[str, Any]:
    """A measured setting's intervals. Each is a sum over steps of each step's median over reps, as a share of the
    optimum's saving (no cache minus the optimum, the same way): realised, from its own prefill; vs the defaults,
    from the defaults' prefill minus its, paired by rep (both run in every rep, side by side), in all and split
    into the steps whose reuse differs (what the setting changes) and those alike (its bookkeeping, and noise)."""
    k = o.key
    own = seconds(samples, "today", k, base.steps)
    today = [x for x in samples if x.arm == "today" and x.setting == k and x.cache_n is not None]
    totals = {r: sum(v for v in row if not math.isnan(v)) for r, row in own.items()}
    lost = step_median_share(minus(own, base.optimum), base.saving, f"tune/{k}/lost")  # no cache only in the scale
    out = {
        "predicted_exact": sum(x.cache_n == o.cache_n.get((x.task_id, x.step)) for x in today),
        "measured_steps": len(today),
        "today_s": median_interval(list(totals.values()), f"tune/{k}/today", list(totals)),
        "realised": lost.complement() if lost else None,
    }
    if k == keys[0]:
        return out
    diff = differing(samples, keys[0], k)
    differ = [j for j, st in enumerate(base.steps) if st in diff]
    alike = [j for j in range(len(base.steps)) if j not in differ]

    def vs(cols: list[int] | None, what: str) -> Interval | None:
        return step_median_share(minus(base.defaults, own, cols), base.saving, f"tune/{k}/{what}")

    total = vs(None, "diff")
    return out | {
        "vs_defaults": total,
        "verdict": verdict(total, EQUIVALENT, center=0.0),
        "differing_steps": len(diff),
        "vs_defaults_differing": vs(differ, "ndiff"),
        "vs_defaults_alike": vs(alike, "alike"),
    }


def tune_results(
    options: list[Option],
    on_front: list[Option],
    chosen: list[CacheSetting],
    samples: list[ConversationSample],
    ram_bytes: int | None,
) -> list[TuneSetting]:
    """Every setting's row: the grid's predictions, and for the measured ones their intervals over reps. The
    recommendation: the measured setting within --ram that gains most on the defaults (paired, the lower-noise
    comparison), the defaults when none gains."""
    keys = [setting_key(s) for s in chosen]
    measured = {s.setting for s in samples if s.arm == "today"}
    base = Baseline.of(samples, keys[0]) if keys else None
    front_keys = {o.key for o in on_front}
    rows = []
    for o in options:
        k = o.key
        rows.append(
            TuneSetting(
                key=k,
                flags=" ".join(o.setting.flags()),
                checkpoints=o.setting.checkpoints,
                checkpoint_min_step=o.setting.checkpoint_min_step,
                cache_ram_mib=o.setting.cache_ram_mib,
                swa_full=o.setting.swa_full,
                role="defaults" if keys and k == keys[0] else "candidate" if k in keys else "grid",
                on_front=k in front_keys,
                predicted_prefill_s=o.prefill_s,
                predicted_peak_mib=o.peak_bytes / MIB,
                predicted_reused=o.reused,
                within_budget=ram_bytes is None or o.peak_bytes <= ram_bytes,
                **(measured_fields(samples, keys, o, base) if base and k in keys and k in measured else {}),
            )
        )
    fits = [r for r in rows if r.role != "grid" and r.realised is not None and r.within_budget]
    if fits:
        gain = {r.key: r.vs_defaults.value if r.vs_defaults else 0.0 for r in fits}
        best = max(fits, key=lambda r: (gain[r.key], r.role == "defaults", -r.predicted_peak_mib))
        best.recommended = True
    return rows


@dataclass(frozen=True)
class TunePlan:
    """What measuring costs, predicted from the host's rates: seconds per rep by part, and in all."""

    reps: int
    settings: int
    tasks: int
    controls_s: float  # the optimum and no cache, every step
    today_s: float  # today's server, every setting: each step's prompt past its reuse and its reply held
    starts_s: float  # today's servers started (one per setting and task) and the lab's own

    @property
    def total_s(self) -> float:
        return self.reps * (self.controls_s + self.today_s + self.starts_s)

    def describe(self, took_s: float | None = None) -> str:
        took = f"; it took {fmt_duration(took_s)} ({took_s / self.total_s:.2f}x the plan)" if took_s else ""
        return (
            f"plan: {self.reps} reps x ({self.settings} settings x {self.tasks} tasks of today's server, the optimum "
            f"and no cache): about {fmt_duration(self.total_s)} (per rep: controls {self.controls_s:.1f} s, "
            f"today's {self.today_s:.1f} s, server starts {self.starts_s:.1f} s){took}"
        )


def tune_plan(tasks: dict[str, list[StepTokens]], chosen: list[Option], rates: Rates, reps: int) -> TunePlan:
    """Per rep: every step's optimum (its new part) and no cache; for every setting each step's prompt past the
    predicted reuse and its reply held; the servers started (each task's side by side)."""
    steps = [st for v in tasks.values() for st in v]
    controls = sum(rates.ms(st.common, st.cells) + rates.ms(0, st.cells) for st in steps) / 1e3
    today = 0.0
    for o in chosen:
        for st in steps:
            today += rates.ms(o.cache_n[(st.task_id, st.step)], st.cells) + rates.ms(st.cells, cells(st.held))
    start = rates.process_start_s or 1.0
    return TunePlan(reps, len(chosen), len(tasks), controls, today / 1e3, start * (1 + len(chosen) * len(tasks)))
