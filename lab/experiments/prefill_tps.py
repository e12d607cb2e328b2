"""prefill_tps(depth), measured independently of the server: llama-bench -p <chunk> -d <depth> on the same
build, model and threads. The arithmetic estimate opt_prefill = only_new / prefill_tps(L) uses it. Decoding at
depth the same way: llama-bench -p 0 -n <n_gen> -d <depth> (`lab engine decode`'s cross-check)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.core.errors import LabError
from lab.core.schemas import BenchDecode, PrefillTps
from lab.core.shell import Shell
from lab.engine.build import EngineInfo
from lab.engine.pinning import llama_args, taskset


class BenchError(LabError):
    pass


@dataclass(frozen=True)
class LlamaBench:
    """One llama-bench call: every chunk at every depth, `reps` times, on this build, model and threads. ubatch: also
    pass -b/-ub (a prompt longer than one ubatch is then a plain chunked prefill); cpu_list: pin it like the server
    (lab.engine.pinning); n_gen: also generate this many tokens at every depth (chunks [0]: generation only)."""

    engine: EngineInfo
    model: Path
    chunks: list[int]
    depths: list[int]
    reps: int
    threads: int
    flash_attn: str
    ubatch: int | None = None
    cpu_list: str | None = None
    n_gen: int = 0
    kv: tuple[str, ...] = ()  # -ctk / -ctv (lab.core.settings_server.ServerSettings.kv_args)


def bench_command(b: LlamaBench) -> str:
    batching = ["-b", str(b.ubatch), "-ub", str(b.ubatch)] if b.ubatch else []
    args = [
        *taskset(b.cpu_list),
        str(b.engine.bench),
        "-m",
        str(b.model),
        "-p",
        ",".join(map(str, sorted(set(b.chunks)))),
        "-n",
        str(b.n_gen),
        "-d",
        ",".join(map(str, sorted(set(b.depths)))),
        "-r",
        str(b.reps),
        "-t",
        str(b.threads),
        "-fa",
        b.flash_attn,
        "-o",
        "jsonl",
        *b.kv,
        *batching,
        *llama_args(b.cpu_list),
    ]
    return f"LD_LIBRARY_PATH={shlex.quote(str(b.engine.lib_dir))} " + shlex.join(args)


def bench_rows(text: str) -> list[dict[str, Any]]:
    """The JSON rows of llama-bench's `-o jsonl` output (other lines, such as its log, skipped)."""
    return [json.loads(line) for line in map(str.strip, text.splitlines()) if line.startswith("{")]


def parse_bench_jsonl(text: str) -> list[PrefillTps]:
    """The prompt rows (-p N, no generation): a chunk's ms and tokens/s at each depth, every rep's."""
    return [
        PrefillTps(
            depth=int(d["n_depth"]),
            chunk=int(d["n_prompt"]),
            tps=float(d["avg_ts"]),
            avg_ms=float(d["avg_ns"]) / 1e6,
            stddev_ms=float(d["stddev_ns"]) / 1e6,
            reps=len(d.get("samples_ns") or []),
            samples_ms=[float(x) / 1e6 for x in d.get("samples_ns") or []],
        )
        for d in bench_rows(text)
        if int(d.get("n_gen", 0)) == 0
    ]


def parse_decode_jsonl(text: str) -> list[BenchDecode]:
    """The generation rows (-n N, no prompt) of llama-bench's JSONL: ms per generated token, every rep's."""
    return [
        BenchDecode(
            depth=int(d["n_depth"]),
            n_gen=int(d["n_gen"]),
            samples_ms=[float(x) / 1e6 / int(d["n_gen"]) for x in d.get("samples_ns") or []],
        )
        for d in bench_rows(text)
        if int(d.get("n_gen", 0)) != 0 and int(d.get("n_prompt", 0)) == 0
    ]


def run_bench(shell: Shell, bench: LlamaBench, log: Path) -> str:
    """Run `bench` through `shell` (its output appended to `log`); its stdout (JSONL), or BenchError."""
    cmd = bench_command(bench)
    r = shell.run(cmd)
    with log.open("a") as fh:
        fh.write(f"$ {cmd}\n{r.stdout}\n--- stderr ---\n{r.stderr}\n")
    if not r.ok:
        raise BenchError(f"llama-bench failed ({r.exited}); log {log}")
    return r.stdout


def measure_decode_tps(shell: Shell, bench: LlamaBench, log: Path) -> list[BenchDecode]:
    """Run `bench` (n_gen > 0, chunks [0]); its generation at every depth it asked for, or BenchError."""
    rows = parse_decode_jsonl(run_bench(shell, bench, log))
    missing = sorted(set(bench.depths) - {row.depth for row in rows})
    if missing:
        raise BenchError(f"llama-bench gave no generation result at depth {missing}; log {log}")
    return rows


def measure_prefill_tps(shell: Shell, bench: LlamaBench, log: Path) -> list[PrefillTps]:
    """Run `bench` through `shell` (its output appended to `log`); every (chunk, depth) it asked for, or BenchError."""
    rows = parse_bench_jsonl(run_bench(shell, bench, log))
    want = {(c, d) for c in bench.chunks for d in bench.depths}
    got = {(row.chunk, row.depth) for row in rows}
    if want - got:
        raise BenchError(f"llama-bench gave no result for (chunk, depth) {sorted(want - got)}; log {log}")
    return rows
