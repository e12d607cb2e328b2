"""`lab engine decode`: decode at depth, through the server against llama-bench.

An agent step's reply is decoded at depth L + new. The fake prefix makes that cheap to measure: a fake-arm
request with `n_fake_cached = L` prefills only the new tokens, then generates n_out tokens (lab.engine.contract,
`measure_decode`), each a single-token decode attending over L + new + i cells. `llama-bench -p 0 -n n_out -d
L+new` times the same decodes after really filling the depth. Per depth: both medians with their 95% intervals,
server / llama-bench (unpaired: two processes) and a verdict at the tolerance.

The two tools alternate rep by rep (the server's sample at every depth in a rotating order, then one llama-bench
call with -r 1 over every depth), so drift on a shared machine hits both; an untimed server request precedes
each rep's samples (the server wakes after llama-bench with its caches cold).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.engine.build import EngineInfo, build_engine
from lab.engine.contract import (
    ArmResult,
    ContractClient,
    Step,
    decode_interval,
    filler_tokens,
    measure_decode,
    text_step,
)
from lab.engine.server import LlamaServer, ResolvedConfig
from lab.errors import UsageError
from lab.experiments.prefill_tps import LlamaBench, measure_decode_tps
from lab.models.resolve import resolve_model
from lab.schemas import DecodeDepth
from lab.settings import Settings
from lab.stats import median_interval, unpaired_ratio, verdict
from lab.target import LocalTarget, Target

WARM_NEW = 8  # the untimed request before a rep's samples: a few new tokens, two generated


@dataclass
class DecodeRun:
    """What `lab engine decode` found: one row per depth, and what it ran with."""

    rows: list[DecodeDepth]
    model: Path
    threads: int
    config: ResolvedConfig
    log_dir: Path
    took_s: float = 0.0
    failures: list[str] = field(default_factory=list)


def check_depths(depths: list[int], new: int, n_out: int, ctx_size: int) -> None:
    """Refuse what cannot be measured: a depth shallower than its new tokens, too few generated tokens to time
    one decode, or a depth whose generation overflows the server's context."""
    if not depths:
        raise UsageError("--depths: give at least one depth")
    if n_out < 2:
        raise UsageError(f"--n-out {n_out}: a decode is timed between two generated tokens, so at least 2")
    if new < 1 or min(depths) < new:
        raise UsageError(f"--new {new}: every depth (L + new) must be at least new >= 1, got depths {depths}")
    if max(depths) + n_out >= ctx_size:
        raise UsageError(f"depth {max(depths)} + --n-out {n_out} do not fit server.ctx_size {ctx_size}")


def decode_steps(depths: list[int], new: int, tokens: list[int]) -> dict[int, Step]:
    """The step of each depth, cut from one token stream: L = depth - new placeholder positions, then new."""
    return {d: text_step(tokens[: d - new], tokens[d - new : d]) for d in depths}


def summarize_depth(
    step: Step, n_out: int, server: list[ArmResult], bench_ms: list[float], tolerance: float
) -> DecodeDepth:
    """One depth's row from its samples: both medians with their intervals, server / llama-bench, the verdict."""
    depth = step.L + step.new
    ms = [r.timings.decode_ms for r in server if r.ok and r.timings and r.timings.decode_ms is not None]
    ratio = unpaired_ratio(ms, bench_ms, key=f"decode/{depth}/ratio")
    return DecodeDepth(
        depth=depth,
        L=step.L,
        new=step.new,
        n_out=n_out,
        server_ms=decode_interval(server, key=f"decode/{depth}/server"),
        bench_ms=median_interval(bench_ms, key=f"decode/{depth}/bench"),
        ratio=ratio,
        verdict=verdict(ratio, tolerance),
        tolerance=tolerance,
        server_samples_ms=ms,
        bench_samples_ms=bench_ms,
        failed=[f"{r.kind}: {r.reason}" for r in server if not r.ok],
    )


def measure_depths(
    client: ContractClient,
    target: Target,
    bench: LlamaBench,
    steps: dict[int, Step],
    n_out: int,
    reps: int,
    log: Path,
) -> tuple[dict[int, list[ArmResult]], dict[int, list[float]]]:
    """Every depth's server samples and llama-bench ms per token, rep after rep (the tools alternating)."""
    depths = sorted(steps)
    first = steps[depths[0]]
    warm = text_step(first.prefix, first.prompt[first.L : first.L + min(first.new, WARM_NEW)])
    server: dict[int, list[ArmResult]] = {d: [] for d in depths}
    ms: dict[int, list[float]] = {d: [] for d in depths}
    for rep in range(reps):
        client.run_arm("fake", warm, n_out=2)  # untimed: failures show in the timed samples
        for d in depths[rep % len(depths) :] + depths[: rep % len(depths)]:
            server[d] += measure_decode(client, steps[d], n_out, 1)[0]
        for row in measure_decode_tps(target, bench, log):
            ms[row.depth] += row.samples_ms
    return server, ms


def run_decode(settings: Settings, depths: list[int], new: int, n_out: int, reps: int, tolerance: float) -> DecodeRun:
    """Decode ms per token at each depth through the server and in llama-bench (release build, the settings'
    model, threads and pinning), rep by rep; logs under the cache's logs/decode-<time>/."""
    srv_settings = settings.server
    depths = sorted(set(depths))
    check_depths(depths, new, n_out, srv_settings.ctx_size)
    if reps < 1:
        raise UsageError(f"--reps {reps}: at least 1")
    engine: EngineInfo = build_engine(settings.engine, settings.cache_dir, flavor="release", quiet=True)
    model = resolve_model(settings)
    log_dir = settings.cache_dir / "logs" / f"decode-{time.strftime('%Y%m%dT%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    bench = LlamaBench(
        engine,
        model,
        [0],
        depths,
        1,
        srv_settings.threads,
        srv_settings.flash_attn,
        cpu_list=srv_settings.cpu_list,
        n_gen=n_out,
    )
    started = time.monotonic()
    with LlamaServer(engine, model, srv_settings, log_dir / "server.log") as srv:
        client = ContractClient(srv)
        steps = decode_steps(depths, new, filler_tokens(max(depths), seed=1, n_vocab=srv.n_vocab()))
        target = LocalTarget(settings.host_name)
        server, ms = measure_depths(client, target, bench, steps, n_out, reps, log_dir / "llama-bench.log")
        config = srv.config
    rows = [summarize_depth(steps[d], n_out, server[d], ms[d], tolerance) for d in depths]
    failures = [f"depth {r.depth}: {why}" for r in rows for why in r.failed]
    return DecodeRun(rows, model, srv_settings.threads, config, log_dir, time.monotonic() - started, failures)
