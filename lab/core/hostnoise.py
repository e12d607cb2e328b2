"""The host-noise guard: what on this host can disturb a measurement, checked before it and measured over it
(in the spirit of `pyperf system show`). Read through the host shell (lab.core.shell), so `lab host check` and
every run record the same facts, locally or on a target host.

Before (through the host shell): the CPU frequency governor, turbo/boost, SMT, transparent huge pages, the
load average and the other processes using a CPU right now, each with a warning when it is a known source
of noise. Over the run (read in-process, where the lab measures): steal time and context switches
(/proc/stat), the lowest and highest CPU clock seen and the load, sampled in the background; the server's
own context switches come from its /proc/<pid>/status when it stops.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from lab.core.shell import Shell

# one shell round trip reads everything the check needs; each file is optional
FILES = {
    "governor": "cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor 2>/dev/null | sort | uniq -c",
    "no_turbo": "cat /sys/devices/system/cpu/intel_pstate/no_turbo 2>/dev/null",
    "boost": "cat /sys/devices/system/cpu/cpufreq/boost 2>/dev/null",
    "smt": "cat /sys/devices/system/cpu/smt/active 2>/dev/null",
    "thp": "cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null",
    "loadavg": "cat /proc/loadavg",
    "nproc": "nproc",
    "mhz": "grep -m 64 'cpu MHz' /proc/cpuinfo 2>/dev/null | awk '{print $4}'",
    # two snapshots of every process's CPU ticks half a second apart: who is using a CPU right now
    "procs1": "cat /proc/[0-9]*/stat 2>/dev/null; sleep 0.5",
    "procs2": "cat /proc/[0-9]*/stat 2>/dev/null",
    "clk_tck": "getconf CLK_TCK",
}
BUSY_PCT = 5.0
SEP = "@@lab-host@@"


class HostState(BaseModel):
    """What a host looks like to a measurement, with the warnings it deserves."""

    governor: str = ""
    turbo: str = Field(default="", description="on, off, or '' when the host does not say")
    smt: str = ""
    thp: str = ""
    loadavg_1m: float | None = None
    cpus: int | None = None
    mhz: list[float] = Field(default_factory=list)
    busy: list[str] = Field(default_factory=list, description="other processes using over 5% of a CPU")
    warnings: list[str] = Field(default_factory=list)


def read_state(shell: Shell, ignore_pids: frozenset[int] | None = None) -> HostState:
    """The host's state now; `ignore_pids` (default: this process) are not counted as competing work."""
    ignore_pids = frozenset({os.getpid()}) if ignore_pids is None else ignore_pids
    script = "; ".join(f"echo '{SEP} {k}'; {cmd}" for k, cmd in FILES.items())
    out = shell.run(script, timeout=60).stdout
    parts: dict[str, str] = {}
    for chunk in out.split(SEP)[1:]:
        key, _, text = chunk.partition("\n")
        parts[key.strip()] = text.strip()
    s = HostState(
        governor=" ".join(parts.get("governor", "").split()), smt=parts.get("smt", ""), thp=parts.get("thp", "")
    )
    if parts.get("no_turbo") in ("0", "1"):
        s.turbo = "off" if parts["no_turbo"] == "1" else "on"
    elif parts.get("boost") in ("0", "1"):
        s.turbo = "on" if parts["boost"] == "1" else "off"
    if parts.get("loadavg"):
        s.loadavg_1m = float(parts["loadavg"].split()[0])
    if parts.get("nproc", "").isdigit():
        s.cpus = int(parts["nproc"])
    s.mhz = [float(x) for x in parts.get("mhz", "").split() if x.replace(".", "", 1).isdigit()]
    tck = int(parts["clk_tck"]) if parts.get("clk_tck", "").isdigit() else 100
    before, after = _ticks(parts.get("procs1", "")), _ticks(parts.get("procs2", ""))
    for pid, (comm, ticks) in sorted(after.items()):
        pct = 100 * (ticks - before.get(pid, (comm, ticks))[1]) / tck / 0.5
        if pid not in ignore_pids and pct > BUSY_PCT:
            s.busy.append(f"{comm} (pid {pid}, {pct:.0f}% of a CPU)")
    s.warnings = warnings(s)
    return s


def _ticks(text: str) -> dict[int, tuple[str, int]]:
    """pid -> (command, user + system clock ticks) from /proc/<pid>/stat lines."""
    out: dict[int, tuple[str, int]] = {}
    for line in text.splitlines():
        head, _, rest = line.rpartition(")")  # the command may hold spaces and parentheses
        pid, _, comm = head.partition(" (")
        fields = rest.split()
        if pid.isdigit() and len(fields) > 12:
            out[int(pid)] = (comm, int(fields[11]) + int(fields[12]))
    return out


def warnings(s: HostState) -> list[str]:
    out = []
    if s.governor and "performance" not in s.governor:
        out.append(f"CPU frequency governor is {s.governor}, not performance: clocks move under load")
    if s.turbo == "on":
        out.append("turbo/boost is on: the clock depends on temperature and on how many cores are busy")
    if s.smt == "1":
        out.append("SMT is on: a sibling hyperthread's work slows a measuring thread; pin threads (server.cpu_list)")
    if s.thp.startswith("[always]") or "[always]" in s.thp:
        out.append("transparent huge pages are 'always': khugepaged can stall a run (madvise is quieter)")
    if s.busy:  # what uses a CPU right now; the load average (recorded) lags by a minute, so it only adds context
        load = f" (load average {s.loadavg_1m:.2f} on {s.cpus} CPUs)" if s.loadavg_1m is not None and s.cpus else ""
        out.append("other processes are using a CPU: " + ", ".join(s.busy[:4]) + load)
    return out


class CpuTimes(BaseModel):
    total: int
    steal: int
    ctxt: int
    t: float


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def cpu_times() -> CpuTimes | None:
    """This machine's CPU time split and context switches so far (/proc/stat)."""
    fields: dict[str, list[int]] = {}
    for line in _read("/proc/stat").splitlines():
        name, *vals = line.split()
        if name in ("cpu", "ctxt"):
            fields[name] = [int(v) for v in vals]
    cpu = fields.get("cpu", [])
    if len(cpu) < 8:
        return None
    return CpuTimes(total=sum(cpu[:8]), steal=cpu[7], ctxt=fields.get("ctxt", [0])[0], t=time.monotonic())


class NoiseFigures(BaseModel):
    """What the host did while the run measured."""

    seconds: float
    steal_pct: float | None = Field(default=None, description="CPU time stolen by the hypervisor, % of all")
    ctx_switches_per_s: float | None = None
    mhz_min: float | None = None
    mhz_max: float | None = None
    loadavg_1m_max: float | None = None
    server_ctx_switches: dict[str, int] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)

    def line(self) -> str:
        parts = [f"{self.seconds:.0f} s"]
        if self.steal_pct is not None:
            parts.append(f"steal {self.steal_pct:.1f}%")
        if self.ctx_switches_per_s is not None:
            parts.append(f"{self.ctx_switches_per_s:,.0f} context switches/s")
        if self.mhz_min is not None and self.mhz_max is not None:
            parts.append(f"clock {self.mhz_min:.0f}-{self.mhz_max:.0f} MHz")
        if self.loadavg_1m_max is not None:
            parts.append(f"load up to {self.loadavg_1m_max:.2f}")
        for k, v in self.server_ctx_switches.items():
            parts.append(f"server {k} ctx switches {v:,}")
        return ", ".join(parts)


@dataclass
class NoiseWindow:
    """Samples this machine (where the lab measures) every `period` seconds in a background thread between
    start() and stop(). It reads /proc in-process, without spawning anything, so it adds no noise itself."""

    period: float = 5.0
    start_times: CpuTimes | None = None
    mhz: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _sample(self) -> None:
        self.mhz += [
            float(line.split(":")[1]) for line in _read("/proc/cpuinfo").splitlines() if line.startswith("cpu MHz")
        ]
        load = _read("/proc/loadavg").split()
        if load:
            self.load.append(float(load[0]))

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def start(self) -> NoiseWindow:
        self.start_times = cpu_times()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="lab-noise", daemon=True)
        self._thread.start()
        return self

    def stop(self, server_ctx: dict[str, int] | None = None) -> NoiseFigures:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        end, start = cpu_times(), self.start_times
        fig = NoiseFigures(seconds=(end.t - start.t) if end and start else 0.0)
        if end and start and end.total > start.total:
            fig.steal_pct = 100 * (end.steal - start.steal) / (end.total - start.total)
            fig.ctx_switches_per_s = (end.ctxt - start.ctxt) / max(end.t - start.t, 1e-9)
        if self.mhz:
            fig.mhz_min, fig.mhz_max = min(self.mhz), max(self.mhz)
        if self.load:
            fig.loadavg_1m_max = max(self.load)
        fig.server_ctx_switches = dict(server_ctx or {})
        if fig.steal_pct is not None and fig.steal_pct > 2:
            fig.warnings.append(f"{fig.steal_pct:.1f}% of CPU time was stolen by the hypervisor during the run")
        if fig.mhz_min and fig.mhz_max and fig.mhz_max > 1.15 * fig.mhz_min:
            fig.warnings.append(f"the clock moved {fig.mhz_min:.0f}-{fig.mhz_max:.0f} MHz during the run")
        return fig


def proc_ctx_switches(pid: int) -> dict[str, int]:
    """A process's voluntary and involuntary context switches so far (/proc/<pid>/status), {} once it is gone."""
    out: dict[str, int] = {}
    for line in _read(f"/proc/{pid}/status").splitlines():
        key, _, val = line.partition(":")
        if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            out[key.split("_")[0]] = int(val.strip())
    return out


@dataclass(frozen=True)
class HostCheck:
    """What `lab host check` prints: the state, one line per fact, then the window's figures; the warnings."""

    lines: list[str]
    warnings: list[str]


def check_host(shell: Shell, seconds: float) -> HostCheck:
    """The host's state through `shell`, then this machine sampled for `seconds`."""
    state = read_state(shell)
    facts = {k: v for k, v in state.model_dump().items() if k != "warnings"}
    lines = [f"{k:>12}: {v if v not in ('', [], None) else '-'}" for k, v in facts.items()]
    window = NoiseWindow(period=min(1.0, seconds)).start()
    time.sleep(seconds)
    figures = window.stop()
    return HostCheck([*lines, f"{'window':>12}: {figures.line()}"], [*state.warnings, *figures.warnings])
