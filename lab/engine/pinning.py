"""Optional thread pinning (`server.cpu_list`, e.g. "0-7" or "0,2,4,6"): the server, llama-bench and the
profiler instrument all run under `taskset --cpu-list`, so their threads stay on those CPUs, and the server and
llama-bench also get llama.cpp's own `-C <mask> --cpu-strict 1` (per-thread placement where they create a
threadpool). Recorded in every run's params (server.cpu_list)."""

from __future__ import annotations

import re

from lab.core.errors import UsageError

_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def cpus(cpu_list: str) -> list[int]:
    """The CPUs of a list like "0-3,6" (a bad list is a clear error)."""
    if not _LIST.match(cpu_list):
        raise UsageError(f"server.cpu_list must look like 0-3,6 (CPU numbers and ranges), got {cpu_list!r}")
    out: set[int] = set()
    for part in cpu_list.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return sorted(out)


def cpu_mask(cpu_list: str) -> str:
    """llama.cpp's -C mask (hex) for a CPU list."""
    return hex(sum(1 << c for c in cpus(cpu_list)))


def taskset(cpu_list: str | None) -> list[str]:
    """The command prefix that pins a process to the list (none without one)."""
    return [] if cpu_list is None else ["taskset", "--cpu-list", ",".join(map(str, cpus(cpu_list)))]


def llama_args(cpu_list: str | None) -> list[str]:
    return [] if cpu_list is None else ["-C", cpu_mask(cpu_list), "--cpu-strict", "1"]
