"""The profile's two references, decided: FUSED against llama-bench, TIMED against FUSED.

llama-bench times the same chunk at the same depths in a process of its own. Its reps used to run after all
the instrument's cycles, clustered in time depth by depth, so a minute of the host running slower or faster
showed up as a pattern over depth (FUSED / llama-bench 1.38 at shallow depths and 0.95 at 4096 in one run,
0.86 to 1.09 in the next). Here one llama-bench call (every depth, one rep per cycle) follows every instrument
process, so the host's drift reaches both sides alike, and the ratio's interval resamples both sides'
processes (lab.core.stats.unpaired_ratio). Each reference gets a verdict at its tolerance.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from lab.core.runs import RunFolder
from lab.core.schemas import PrefillTps, ProfileSummary, ProfileWall
from lab.core.schemas.raw import PREFILL_TPS
from lab.core.settings import ProfileSettings
from lab.core.stats import unpaired_ratio, verdict
from lab.experiments.prefill_tps import LlamaBench, measure_prefill_tps
from lab.experiments.protocol import OpenRun


def bench_process(sess: OpenRun, p: ProfileSettings, threads: int, depths: list[int], reps: int, process: int) -> None:
    """One llama-bench call after instrument process `process` (its cycles' worth of reps at every depth, on the
    profile's build, model, chunk and threads); its rows appended under that process."""
    srv = sess.settings.server
    call = LlamaBench(
        sess.engine, sess.model, [p.chunk], depths, reps, threads, "auto", cpu_list=srv.cpu_list, kv=tuple(srv.kv_args)
    )
    rows = measure_prefill_tps(sess.shell, call, sess.run.path / "logs" / "llama-bench.log")
    sess.run.append(PREFILL_TPS, [r.model_copy(update={"process": process}) for r in rows])


def processes_without_bench(run: RunFolder, cycles_done: int, per_process: int) -> dict[int, int]:
    """The instrument processes with complete cycles whose llama-bench call is missing (a resumed run), each
    with its count of complete cycles."""
    have = {r.process for r in read_bench(run)}
    return {k: n for k, n in Counter(c // per_process for c in range(cycles_done)).items() if k not in have}


def read_bench(run: RunFolder) -> list[PrefillTps]:
    return run.read(PREFILL_TPS)


def decide_references(
    summary: ProfileSummary, walls: list[ProfileWall], bench: list[PrefillTps], bench_tol: float, timed_tol: float
) -> None:
    """FUSED / llama-bench per depth (medians, the interval over both sides' processes) and both references'
    verdicts, into the summary."""
    fused: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for w in walls:
        if w.mode == "fused":
            fused[w.depth].append((w.ms, w.process))
    theirs: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for b in bench:
        theirs[b.depth] += [(ms, b.process) for ms in b.samples_ms]
    summary.bench_tolerance, summary.timed_tolerance = bench_tol, timed_tol
    for depth in sorted(set(fused) & set(theirs)):
        ours, other = fused[depth], theirs[depth]
        iv = unpaired_ratio(
            [x for x, _ in ours],
            [x for x, _ in other],
            f"fused/bench/{depth}",
            [k for _, k in ours],
            [k for _, k in other],
        )
        if iv is not None:
            summary.fused_vs_bench[str(depth)] = iv.value
            summary.fused_vs_bench_ci[str(depth)] = iv
            summary.fused_vs_bench_verdict[str(depth)] = verdict(iv, bench_tol)
    for d, gap in summary.timed_vs_fused_gap_ci.items():
        summary.timed_vs_fused_verdict[d] = verdict(gap, timed_tol)


def undecided_references(s: ProfileSummary) -> str:
    """Which reference is still undecided and where ('' when both are decided at every depth)."""
    out = []
    for what, verdicts in (("FUSED/llama-bench", s.fused_vs_bench_verdict), ("TIMED/FUSED", s.timed_vs_fused_verdict)):
        open_ = [d for d, v in verdicts.items() if v == "undecided"]
        if open_:
            out.append(f"{what} is undecided at depth {', '.join(open_[:4])}")
    return "; ".join(out)
