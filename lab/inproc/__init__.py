"""In-process arms: `arms.cpp`, a small C++ driver linked against the engine's libllama (public API plus the
lab's llama_memory_seq_fake_prefix), measures baseline, genuine hit, fake prefix and state restore of one step
inside one process, with no server in the numbers. Built and cached like the profiler instrument."""

from __future__ import annotations

from pathlib import Path

from lab.engine.build import EngineInfo
from lab.engine.pinning import taskset
from lab.instrument import InstrumentInfo, build_tool

SOURCE = Path(__file__).with_name("arms.cpp")
BINARY = "lab-inproc-arms"
ARMS = ("baseline", "fake", "genuine", "restore")


def build_driver(engine: EngineInfo, cache_dir: Path) -> InstrumentInfo:
    return build_tool(engine, cache_dir, SOURCE, BINARY)


def driver_command(
    driver: InstrumentInfo, model: Path, out: Path, *, Ls: list[int], news: list[int], reps: int, threads: int,
    arms: tuple[str, ...] = ARMS, n_ctx: int | None = None, ubatch: int = 512, first_rep: int = 0,
    cpu_list: str | None = None,
) -> list[str]:  # fmt: skip
    return [
        *taskset(cpu_list), str(driver.binary), "--model", str(model), "--out", str(out),
        "--Ls", ",".join(map(str, Ls)), "--news", ",".join(map(str, news)), "--reps", str(reps),
        "--arms", ",".join(arms), "-t", str(threads), "--ubatch", str(ubatch),
        *(["--n-ctx", str(n_ctx)] if n_ctx else []), *(["--first-rep", str(first_rep)] if first_rep else []),
    ]  # fmt: skip
