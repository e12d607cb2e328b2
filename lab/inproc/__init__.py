"""In-process arms: `arms.cpp`, a small C++ driver linked against the engine's libllama (public API plus the
lab's llama_memory_seq_fake_prefix), measures baseline, genuine hit, fake prefix and state restore of one step
inside one process, with no server in the numbers. Built and cached like the profiler instrument."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from lab.engine.build import EngineInfo
from lab.engine.pinning import taskset
from lab.errors import LabError
from lab.instrument import InstrumentInfo, build_tool

SOURCE = Path(__file__).with_name("arms.cpp")
BINARY = "lab-inproc-arms"
ARMS = ("baseline", "fake", "genuine", "restore")


class DriverError(LabError):
    pass


def build_driver(engine: EngineInfo, cache_dir: Path) -> InstrumentInfo:
    return build_tool(engine, cache_dir, SOURCE, BINARY)


def driver_command(
    driver: InstrumentInfo, model: Path, out: Path | None, *, Ls: list[int], news: list[int], reps: int,
    threads: int, threads_batch: int | None = None, arms: tuple[str, ...] = ARMS, n_ctx: int | None = None,
    ubatch: int = 512, first_rep: int = 0, flash_attn: str = "auto", tokens: str | None = None,
    cpu_list: str | None = None, check: bool = False,
) -> list[str]:  # fmt: skip
    """tokens: a file of whitespace-separated ids, or "-" (stdin); check: validate and exit, measuring nothing."""
    return [
        *taskset(cpu_list), str(driver.binary), "--model", str(model), *(["--out", str(out)] if out else []),
        "--Ls", ",".join(map(str, Ls)), "--news", ",".join(map(str, news)), "--reps", str(reps),
        "--arms", ",".join(arms), "-t", str(threads), *(["-tb", str(threads_batch)] if threads_batch else []),
        "--ubatch", str(ubatch), "--flash-attn", flash_attn,
        *(["--n-ctx", str(n_ctx)] if n_ctx else []), *(["--first-rep", str(first_rep)] if first_rep else []),
        *(["--tokens", tokens] if tokens else []), *(["--check"] if check else []),
    ]  # fmt: skip


def run_driver(cmd: list[str], out: Path, log_path: Path, tokens: list[int] | None = None) -> list[dict[str, Any]]:
    """Run the driver (token ids on its stdin when given) and return what it wrote to `out`: the meta line
    first, then the samples. `out` is removed after reading; a non-zero exit raises with the driver's reason."""
    from lab.engine.server import die_with_parent  # here: the image's tool layer builds without the server

    out.unlink(missing_ok=True)
    stdin = " ".join(map(str, tokens)) if tokens is not None else None
    with log_path.open("a") as log:
        proc = subprocess.run(
            cmd, input=stdin, stdout=log, stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent
        )
        log.write(proc.stderr)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise DriverError(f"the in-process driver failed ({proc.returncode}): {lines[-1] if lines else 'no reason'}")
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    out.unlink(missing_ok=True)
    return rows
