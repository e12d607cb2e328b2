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

import itertools
import math
import time
from dataclasses import dataclass, field, replace
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
from lab.core.schemas.trace import RecommendedAs, TuneSetting
from lab.core.settings import Settings
from lab.core.stats import called, median_interval, reps_to_decide, step_median_share, verdict
from lab.core.units import MIB
from lab.experiments.conversation import Replay
from lab.experiments.protocol import OpenRun, Outcome, RunParts
from lab.measure.plan import Rates, fmt_duration
from lab.models.hparams import HparamsError

CHECKPOINTS = (0, 8, 32, 128)
MIN_STEPS = (0, 64, 256, 1024)
EQUIVALENT = 0.01  # realised shares within a point of the defaults' agree


def setting_key(s: CacheSetting) -> str:
    key = f"ckpt{s.checkpoints}-step{s.checkpoint_min_step}-ram{s.cache_ram_mib}"
    return key + ("-swafull" if s.swa_full else "") + ("-nopreserve" if s.reasoning_preserve is False else "")


def grid(base: CacheSetting, window: bool, preserve: bool = False) -> list[CacheSetting]:
    """Every setting weighed: the defaults, and checkpoints x spacing (the defaults' among them) x RAM cache (off,
    or the defaults' size) x --swa-full for a sliding-window model x --reasoning-preserve on or off where it
    changes the conversation's prompts (`preserve`)."""
    rams = sorted({0, base.cache_ram_mib if base.cache_ram_mib else 8192})
    steps = sorted({*MIN_STEPS, base.checkpoint_min_step})
    fulls = (False, True) if window else (base.swa_full,)
    keeps = (True, False) if preserve and base.reasoning_preserve is not None else (base.reasoning_preserve,)
    out = [base]
    for ck, step, ram, full, keep in itertools.product(CHECKPOINTS, steps, rams, fulls, keeps):
        s = replace(
            base, checkpoints=ck, checkpoint_min_step=step, cache_ram_mib=ram, swa_full=full, reasoning_preserve=keep
        )
        if s not in out:
            out.append(s)
    return out


def renders_differently(a: dict[str, list[StepTokens]], b: dict[str, list[StepTokens]] | None) -> bool:
    """Whether some step's prompt differs between two renderings of the conversation."""
    return b is not None and any(x.prompt != y.prompt for k in a for x, y in zip(a[k], b[k], strict=True))


@dataclass
class Option:
    """A setting as the policy model predicts it for the conversation."""

    setting: CacheSetting
    prefill_s: float
    peak_bytes: int
    reused: int
    cache_n: dict[tuple[str, int], int]
    tasks: dict[str, list[StepTokens]] = field(repr=False, default_factory=dict)  # as its server renders them

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
        tasks,
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
    defaults do with as much memory (one that reuses the same holding less may be recommended as the same)."""
    return [o for o in on_front if o.cache_n != defaults.cache_n or o.peak_bytes < defaults.peak_bytes][:k]


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
    called_as = verdict(total, EQUIVALENT, center=0.0)
    return out | {
        "vs_defaults": total,
        "verdict": called_as,
        "reps_to_decide": reps_to_decide(total, EQUIVALENT, center=0.0) if called_as == "undecided" else None,
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
    version: str = "",
) -> list[TuneSetting]:
    """Every setting's row: the grid's predictions, and for the measured ones their intervals over reps. The
    recommendation as the evidence decides it (`recommend`)."""
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
                server_version=version,
                checkpoints=o.setting.checkpoints,
                checkpoint_min_step=o.setting.checkpoint_min_step,
                cache_ram_mib=o.setting.cache_ram_mib,
                swa_full=o.setting.swa_full,
                reasoning_preserve=o.setting.reasoning_preserve,
                role="defaults" if keys and k == keys[0] else "candidate" if k in keys else "grid",
                on_front=k in front_keys,
                predicted_prefill_s=o.prefill_s,
                predicted_peak_mib=o.peak_bytes / MIB,
                predicted_reused=o.reused,
                within_budget=ram_bytes is None or o.peak_bytes <= ram_bytes,
                **(measured_fields(samples, keys, o, base) if base and k in keys and k in measured else {}),
            )
        )
    recommend(rows)
    return rows


def _gain(r: TuneSetting) -> float:
    return r.vs_defaults.value if r.vs_defaults else 0.0


def gaining(r: TuneSetting) -> tuple[float, float]:
    """The order candidates are weighed in: the gain on the defaults, then the lighter."""
    return _gain(r), -r.predicted_peak_mib


def recommend(rows: list[TuneSetting]) -> None:
    """Mark the recommendation, which the evidence decides: the measured candidate (within --ram) decided better
    than the defaults that gains most; else one decided the same (within EQUIVALENT) that holds less memory, the
    lightest; else the defaults. Defaults beyond --ram: the candidate within it not decided worse that gains most."""
    measured = [r for r in rows if r.role != "grid" and r.realised is not None]
    defaults = next((r for r in measured if r.role == "defaults"), None)
    candidates = [r for r in measured if r.role == "candidate" and r.within_budget]
    better = [r for r in candidates if called(r.verdict, _gain(r)) == "better"]
    lighter = [
        r
        for r in candidates
        if r.verdict == "agree" and defaults is not None and r.predicted_peak_mib < defaults.predicted_peak_mib
    ]
    fits = [r for r in candidates if called(r.verdict, _gain(r)) != "worse"]
    why: RecommendedAs
    if better:
        best, why = max(better, key=gaining), "gain"
    elif lighter:
        best, why = min(lighter, key=lambda r: r.predicted_peak_mib), "less memory"
    elif defaults is not None and defaults.within_budget:
        best, why = defaults, "defaults"
    elif fits:
        best, why = max(fits, key=gaining), "within budget"
    else:
        return
    best.recommended, best.recommended_as = True, why


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


def tune_plan(chosen: list[Option], rates: Rates, reps: int) -> TunePlan:
    """Per rep: every step's optimum (its new part) and no cache (the defaults' rendering); for every setting each
    step's prompt (as its server renders it) past the predicted reuse and its reply held; the servers started
    (each task's side by side)."""
    tasks = chosen[0].tasks if chosen else {}
    steps = [st for v in tasks.values() for st in v]
    controls = sum(rates.ms(st.common, st.cells) + rates.ms(0, st.cells) for st in steps) / 1e3
    today = 0.0
    for o in chosen:
        for st in (st for v in o.tasks.values() for st in v):
            today += rates.ms(o.cache_n[(st.task_id, st.step)], st.cells) + rates.ms(st.cells, cells(st.held))
    start = rates.process_start_s or 1.0
    return TunePlan(reps, len(chosen), len(tasks), controls, today / 1e3, start * (1 + len(chosen) * len(tasks)))
