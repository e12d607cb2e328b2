"""The rates a sweep's plan prices with (ms per token over depth, a decode rate, a process start): a rates file,
a profile run's time model, or a short calibration here with the in-process driver and the server."""

from __future__ import annotations

import time
from pathlib import Path

from lab.core.errors import UsageError
from lab.core.runs import RunError, resolve_run
from lab.core.schemas.raw import PROFILE_BAND_PROCESSES, PROFILE_BANDS, PROFILE_SUMMARY
from lab.core.settings import Settings
from lab.core.stats import median_interval
from lab.experiments.profile.rates import plan_rates
from lab.measure.plan import Rates, rates_from_chunks, rates_from_file

CALIBRATION_DEPTH = 2048  # the deepest chunk a calibration times: the slope is extrapolated beyond it


def resolve_rates(settings: Settings) -> Rates:
    """sweep.rates: a rates file (YAML/JSON), or a profile run (id, unique prefix, or folder) whose time model is
    applied to the sweep's model."""
    ref = settings.sweep.rates
    assert ref is not None
    path = Path(ref)
    if path.is_file():
        return rates_from_file(path)
    try:
        run = resolve_run(ref, settings.runs_dir)
    except RunError as e:
        raise UsageError(f"--rates {ref}: neither a rates file nor a run ({e})") from e
    summary, bands = run.table_path(PROFILE_SUMMARY), run.table_path(PROFILE_BANDS)
    if run.manifest().experiment != "profile" or not summary.exists() or not bands.exists():
        raise UsageError(f"--rates {ref}: {run.path.name} is not a complete profile run")
    if not run.table_path(PROFILE_BAND_PROCESSES).exists():
        raise UsageError(f"--rates {ref}: {run.path.name} is a profile of an older format (no per-process bands)")
    from lab.models.resolve import resolve_model

    deepest = max(settings.sweep.Ls) + max(settings.sweep.news)
    return plan_rates(run, settings.runs_dir, resolve_model(settings), deepest)


def calibrate(settings: Settings) -> Rates:
    """A short calibration: the in-process driver times a chunk of the grid's smallest `new` at its smallest L
    and at min(its largest L, 2048) after one cumulative fill, and the rates are fitted to them."""
    from lab.experiments.protocol import resolve_parts
    from lab.inproc import DriverSession, prepare_driver, sweep_driver_command
    from lab.measure.fills import fills_of

    sw = settings.sweep
    Ls = sorted({min(sw.Ls), min(max(sw.Ls), CALIBRATION_DEPTH)})
    news = [min(sw.news)]
    cal = settings.model_copy(update={"sweep": sw.model_copy(update={"Ls": Ls, "news": news})})
    parts = resolve_parts(cal, needs_engine=True)
    assert parts.engine is not None and parts.model is not None
    driver, _ = prepare_driver(parts.engine, cal, parts.model, news, fake=False, who="sweep --plan")
    logs = settings.cache_dir / "logs"
    cmd = sweep_driver_command(driver, cal, parts.model, news, fake=False)
    started = time.monotonic()
    with DriverSession(cmd, logs / "calibration.log") as d:
        load_s = time.monotonic() - started  # one model load: a sweep's process starts a server and a driver
        d.fill(0)  # a first pass warms the process up
        rows = fills_of(d.fill(1))
    chunks = [(f.L, f.new, f.ms) for f in rows if f.kind == "chunk" and f.new and f.ok]
    rates = rates_from_chunks(chunks, f"calibration: chunks of {news[0]} at depths {', '.join(map(str, Ls))}")
    return rates.model_copy(update={"process_start_s": 2 * load_s})


def rates_for(settings: Settings) -> Rates:
    """sweep.rates when set, else a short calibration here; with sweep.n_out and no decode rate in them, the
    decode's calibrated too."""
    rates = resolve_rates(settings) if settings.sweep.rates else calibrate(settings)
    if settings.sweep.n_out and rates.decode_ms_per_token is None:
        rates = with_decode(settings, rates)
    return rates


def with_decode(settings: Settings, rates: Rates) -> Rates:
    """The rates with a decode rate calibrated here: a few tokens generated through the server after a
    fabricated prefix at the grid's shallowest and (up to 2048) deepest L, a line through the two medians."""
    from lab.engine.contract import ContractClient, decode_samples, filler_tokens
    from lab.engine.server import adhoc_server
    from lab.experiments.decode import decode_at_depths, decode_steps
    from lab.experiments.protocol import resolve_parts

    sw = settings.sweep
    new = min(sw.news)
    Ls = sorted({min(sw.Ls), min(max(sw.Ls), CALIBRATION_DEPTH)})
    depths = [L + new for L in Ls]
    n_out = max(2, min(sw.n_out, 16))
    parts = resolve_parts(settings, needs_engine=True)
    assert parts.engine is not None and parts.model is not None
    with adhoc_server(parts.engine, parts.model, settings.server, settings.cache_dir, "calibration-decode") as srv:
        log = srv.log_path
        steps = decode_steps(depths, new, filler_tokens(max(depths), seed=1, n_vocab=srv.n_vocab()))
        samples = decode_at_depths(ContractClient(srv), steps, n_out, rounds=3)
    ms = {d: median_interval(decode_samples(r), f"calibration/decode/{d}") for d, r in samples.items()}
    medians = [(d, iv.value) for d, iv in sorted(ms.items()) if iv is not None]
    if len(medians) < len(depths):
        raise UsageError(f"sweep --plan: the decode calibration failed; see {log}")
    (d0, a), (d1, b) = medians[0], medians[-1]
    slope = max(0.0, (b - a) / (d1 - d0) * 1000) if d1 > d0 else 0.0
    source = f"{rates.source}; decode: the server's generated tokens at depths L = {', '.join(map(str, Ls))}"
    update = {"decode_ms_per_token": max(a - slope * d0 / 1000, 1e-6), "decode_ms_per_token_per_1k": slope}
    return rates.model_copy(update={**update, "source": source})
