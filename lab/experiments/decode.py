"""`lab engine decode`: decode at depth, through the server against llama-bench.

An agent step's reply is decoded at depth L + new. The fake prefix makes that cheap to measure: a fake-arm
request with `n_fake_cached = L` prefills only the new tokens, then generates n_out tokens (lab.engine.contract,
`measure_decode`), each a single-token decode attending over L + new + i cells. `llama-bench -p 0 -n n_out -d
L+new` times the same decodes after really filling the depth. Per depth: both medians with their 95% intervals,
server / llama-bench (unpaired: two processes) and a verdict at the tolerance.

The two tools alternate rep by rep, each rep in processes of their own (a new server's sample at every depth in a
rotating order, then one llama-bench call with -r 1 over every depth), so drift on a shared machine hits both and
the intervals resample processes; an untimed server request precedes each rep's samples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from lab.core.errors import UsageError
from lab.core.runs import RunError, RunFolder
from lab.core.schemas import DecodeDepth
from lab.core.schemas.raw import DECODE_DEPTHS
from lab.core.settings import Settings
from lab.core.shell import Shell
from lab.core.stats import median_interval, rotated, unpaired_ratio, verdict
from lab.engine.contract import (
    ArmResult,
    ContractClient,
    Step,
    decode_samples,
    filler_tokens,
    measure_decode,
    text_step,
)
from lab.experiments.prefill_tps import LlamaBench, measure_decode_tps
from lab.experiments.protocol import Experiment, OpenRun, Outcome, Processes, RunParts, drain


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
    step: Step, n_out: int, server: list[tuple[ArmResult, int]], bench: list[tuple[float, int]], tolerance: float
) -> DecodeDepth:
    """One depth's row from its samples (each with the process it came from): both medians with their intervals
    over processes, server / llama-bench, the verdict."""
    depth = step.L + step.new
    ok = [(ms, k) for r, k in server for ms in decode_samples([r])]
    ms, procs = [x for x, _ in ok], [k for _, k in ok]
    bench_ms, bench_procs = [x for x, _ in bench], [k for _, k in bench]
    ratio = unpaired_ratio(ms, bench_ms, f"decode/{depth}/ratio", procs, bench_procs)
    return DecodeDepth(
        depth=depth,
        L=step.L,
        new=step.new,
        n_out=n_out,
        server_ms=median_interval(ms, f"decode/{depth}/server", procs),
        bench_ms=median_interval(bench_ms, f"decode/{depth}/bench", bench_procs),
        ratio=ratio,
        verdict=verdict(ratio, tolerance),
        tolerance=tolerance,
        server_samples_ms=ms,
        bench_samples_ms=bench_ms,
        server_processes=procs,
        bench_processes=bench_procs,
        failed=[f"{r.kind}: {r.reason}" for r, _ in server if not r.ok],
    )


def decode_at_depths(
    client: ContractClient, steps: dict[int, Step], n_out: int, rounds: int = 1, first: int = 0
) -> dict[int, list[ArmResult]]:
    """Decode at every depth through one server: an untimed request first (a server that wakes after another
    process's work finds its caches cold), then `rounds` rounds of one sample per depth, each round's depths in
    an order rotated from round `first` on (no depth always goes first)."""
    depths = sorted(steps)
    client.warm_up(steps[depths[0]], n_out=2)
    out: dict[int, list[ArmResult]] = {d: [] for d in depths}
    for k in range(first, first + rounds):
        for d in rotated(depths, k):
            out[d] += measure_decode(client, steps[d], n_out, 1)[0]
    return out


def measure_rep(
    client: ContractClient, shell: Shell, bench: LlamaBench, steps: dict[int, Step], n_out: int, rep: int, log: Path
) -> tuple[dict[int, ArmResult], dict[int, list[float]]]:
    """One rep: a fresh server's sample at every depth, then one llama-bench call over every depth."""
    server = {d: results[0] for d, results in decode_at_depths(client, steps, n_out, first=rep).items()}
    return server, {row.depth: row.samples_ms for row in measure_decode_tps(shell, bench, log)}


class DecodeCheck(Experiment):
    """`lab engine decode`: one run folder, its depths' rows in `decode_depths`."""

    name = "decode"
    records = ("decode", "server", "model")

    def __init__(self) -> None:
        self.rows: list[DecodeDepth] = []

    def restore_own(self, settings: Settings, params: dict[str, Any], run: RunFolder) -> Settings:
        if "decode" not in params:
            raise RunError(f"{run.path.name}: a decode check of an older format (no decode settings recorded)")
        return settings

    def prepare(self, settings: Settings, parts: RunParts) -> None:
        d = settings.decode
        self.depths, self.new, self.n_out = sorted(set(d.depths)), d.new, d.n_out
        self.reps, self.tolerance = d.reps, d.tolerance
        check_depths(self.depths, self.new, self.n_out, settings.server.ctx_size)

    def measure(self, sess: OpenRun, console: Console) -> Outcome:
        return drain(self.processes(sess, console))

    def processes(self, sess: OpenRun, console: Console) -> Processes:
        """A step per rep (a server process of its own, then llama-bench). Every depth again on a resume: a rep is
        a few tokens per depth, the run's whole is minutes."""
        srv_settings, logs = sess.settings.server, sess.run.path / "logs"
        bench = LlamaBench(
            sess.engine,
            sess.model,
            [0],
            self.depths,
            1,
            srv_settings.threads,
            srv_settings.flash_attn,
            cpu_list=srv_settings.cpu_list,
            n_gen=self.n_out,
            kv=tuple(srv_settings.kv_args),
        )
        server: dict[int, list[tuple[ArmResult, int]]] = {d: [] for d in self.depths}
        bench_samples: dict[int, list[tuple[float, int]]] = {d: [] for d in self.depths}
        steps: dict[int, Step] = {}
        for rep in range(self.reps):  # a server process per rep: a process is a level of variance of its own
            with sess.server() as srv:
                sess.record_server(srv)
                client = ContractClient(srv)
                if not steps:
                    tokens = filler_tokens(max(self.depths), seed=1, n_vocab=srv.n_vocab())
                    steps = decode_steps(self.depths, self.new, tokens)
                got, theirs = measure_rep(client, sess.shell, bench, steps, self.n_out, rep, logs / "llama-bench.log")
            for d in self.depths:
                server[d].append((got[d], rep))
                bench_samples[d] += [(ms, rep) for ms in theirs.get(d, [])]
            yield rep  # a process ends here (an interleaved run measures the other side's next)
        self.rows = [
            summarize_depth(steps[d], self.n_out, server[d], bench_samples[d], self.tolerance) for d in self.depths
        ]
        sess.run.rewrite(DECODE_DEPTHS, self.rows)
        failures = [f"depth {r.depth}: {why}" for r in self.rows for why in r.failed]
        return Outcome(failure="; ".join(failures))

    def tables(self) -> dict[str, Any]:
        return {"depths": [r.model_dump(mode="json") for r in self.rows]}
