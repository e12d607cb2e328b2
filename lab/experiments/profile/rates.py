"""A profile run's time model: its per-process band rows fitted against the cost model of the model it profiled
(lab.measure.timemodel), for `lab model cost` (with --rates), `lab sweep --plan --rates` and the held-out benchmark."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab.core.errors import UsageError
from lab.core.runs import RunError, RunFolder, resolve_run
from lab.core.schemas.raw import PROFILE_BAND_PROCESSES
from lab.measure.costmodel import CostModel, cost_record, model_cost
from lab.measure.plan import Rates
from lab.measure.timemodel import TimeFit, TimePrediction, fit, predict
from lab.models.hparams import HparamsError


def profile_fit(ref: str | RunFolder, runs_dir: Path, max_depth: int | None = None) -> tuple[TimeFit, str]:
    """The time model of a complete profile run (id, unique prefix or folder, or the run already resolved),
    fitted on its depths up to `max_depth` (all when None), and a line saying where it comes from."""
    if isinstance(ref, RunFolder):
        run, ref = ref, ref.path.name
    else:
        try:
            run = resolve_run(ref, runs_dir)
        except RunError as e:
            raise UsageError(f"--rates {ref}: {e}") from e
    m = run.manifest()
    if m.experiment != "profile" or not run.ready:
        raise UsageError(f"--rates {ref}: {run.path.name} is not a complete profile run")
    rows = run.read(PROFILE_BAND_PROCESSES)
    chunk = m.shape().params.profile.chunk
    if chunk is None:
        raise UsageError(f"--rates {ref}: {run.path.name} records no profile chunk (params.profile.chunk)")
    model = Path(str(m.model.get("path", "")))
    if not model.is_file():
        raise UsageError(f"--rates {ref}: the profiled model {model} is not here (its FLOPs are counted from it)")
    try:
        cost = model_cost(model, chunk)
        tf = fit(rows, cost, max_depth, key=run.path.name)
    except (HparamsError, ValueError) as e:
        raise UsageError(f"--rates {ref}: {e}") from e
    upto = f"depths {tf.depths[0]}..{tf.depths[-1]}"
    return tf, f"profile {run.path.name} ({model.name}, {upto}, {tf.processes} processes, chunk {chunk})"


def predict_with_rates(model: Path, ref: str, runs_dir: Path, depths: list[int]) -> tuple[CostModel, TimePrediction]:
    """`lab model cost MODEL --rates RUN`: the profile's rates applied to MODEL's FLOPs (at the chunk the rates
    were measured with) at `depths`."""
    tf, source = profile_fit(ref, runs_dir)
    cost = model_cost(model, tf.flops.cost.chunk)
    return cost, predict(tf, cost, depths, source, model.name)


@dataclass(frozen=True)
class CostReport:
    """What `lab model cost` prints: the cost model at `depths`, and the time model's prediction with --rates."""

    model: CostModel
    depths: list[int]
    timed: TimePrediction | None = None

    def json(self) -> str:
        record = cost_record(self.model, self.depths)
        if self.timed is not None:
            record["time"] = self.timed.model_dump(mode="json")
        return json.dumps(record, indent=2)


def cost_report(
    model: Path, depths: list[int], chunk: int | None, rates: str | None, runs_dir: Callable[[], Path]
) -> CostReport:
    """`lab model cost MODEL`: FLOPs and bytes per band of a `chunk`-token prefill chunk (default 512) at each of
    `depths`; with `rates` (a profile run in `runs_dir()`, asked for only then), at the chunk the rates were
    measured with, and each band's predicted ms/token. Bad options and files are UsageErrors."""
    if (chunk is not None and chunk < 1) or any(d < 0 for d in depths):
        raise UsageError("--chunk must be positive and --depths non-negative")
    if not model.is_file():
        raise UsageError(f"{model}: {'a directory, not a GGUF file' if model.is_dir() else 'no such file'}")
    if rates is None:
        return CostReport(model_cost(model, chunk or 512), depths)
    cost, timed = predict_with_rates(model, rates, runs_dir(), depths)
    if chunk is not None and chunk != cost.chunk:
        raise UsageError(f"--chunk {chunk}: the rates of {rates} were measured with chunks of {cost.chunk}")
    return CostReport(cost, depths, timed)


def plan_rates(ref: str | RunFolder, runs_dir: Path, model: Path, deepest: int) -> Rates:
    """`lab sweep --plan --rates RUN`: the profile's time model applied to the sweep's model, as ms per token at
    positions up to `deepest` (a chunk's prediction stands at its middle position)."""
    tf, source = profile_fit(ref, runs_dir)
    try:
        cost = model_cost(model, tf.flops.cost.chunk)
    except HparamsError as e:
        name = ref.path.name if isinstance(ref, RunFolder) else ref
        raise UsageError(f"--rates {name}: the sweep's model {model.name}: {e}") from e
    c = cost.chunk
    step = max(c, -(-deepest // 32) // c * c)  # at most about 32 points, on the chunk grid the rates came from
    depths = list(range(0, deepest + step, step))
    pred = predict(tf, cost, depths, source, model.name)
    curve = [(d + c / 2, iv.value) for d in depths if (iv := pred.band_at(d, "total")) is not None]
    (x0, y0), (x1, y1) = curve[0], curve[-1]
    slope = max(0.0, (y1 - y0) / (x1 - x0) * 1000) if x1 > x0 else 0.0
    if tf.flops.cost.h != cost.h:
        source += f", applied to {model.name}"
    return Rates(flat_ms_per_token=y0, attn_ms_per_token_per_1k=slope, source=f"time model of {source}", curve=curve)
