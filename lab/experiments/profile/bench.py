"""The profile's two references, decided: FUSED against llama-bench, TIMED against FUSED.

llama-bench times the same chunk at the same depths in a process of its own, reaching each depth as it does
upstream: one real fill, then the state restored before every rep. One llama-bench process follows every
instrument process, with as many reps, so the host's drift reaches both sides alike: the two are a process pair,
and FUSED / llama-bench pairs them by process pair and rep (lab.core.stats.paired_processes, the interval over
process pairs). Its depths are those a real fill reaches (profile.real_max_depth). Each reference gets a verdict
at its tolerance.
"""

from __future__ import annotations

from lab.core.runs import RunFolder
from lab.core.schemas import PrefillTps, ProfileSummary, ProfileWall
from lab.core.schemas.raw import PREFILL_TPS
from lab.core.settings_profile import ProfileSettings
from lab.core.stats import verdict
from lab.experiments.prefill_tps import LlamaBench, measure_prefill_tps
from lab.experiments.profile.checks import over_depths, paired_by_process_pair, process_ratios
from lab.experiments.protocol import OpenRun


def bench_process(sess: OpenRun, p: ProfileSettings, threads: int, depths: list[int], reps: int, process: int) -> None:
    """One llama-bench call after instrument process `process` (as many reps at each of `depths`, on the profile's
    build, model, chunk and threads); its rows appended under that process."""
    srv = sess.settings.server
    call = LlamaBench(
        sess.engine, sess.model, [p.chunk], depths, reps, threads, "auto", cpu_list=srv.cpu_list, kv=tuple(srv.kv_args)
    )
    rows = measure_prefill_tps(sess.shell, call, sess.run.path / "logs" / "llama-bench.log")
    sess.run.append(PREFILL_TPS, [r.model_copy(update={"process": process}) for r in rows])


def processes_without_bench(run: RunFolder, processes_done: int) -> list[int]:
    """The complete instrument processes whose llama-bench call is missing (a resumed run)."""
    have = {r.process for r in read_bench(run)}
    return [k for k in range(processes_done) if k not in have]


def read_bench(run: RunFolder) -> list[PrefillTps]:
    return run.read(PREFILL_TPS)


def decide_references(
    summary: ProfileSummary, walls: list[ProfileWall], bench: list[PrefillTps], bench_tol: float, timed_tol: float
) -> None:
    """FUSED / llama-bench per depth, paired by process pair (each instrument process's reps with those of the
    llama-bench process after it, rep by rep), and both references' verdicts, into the summary."""
    fused = {(w.depth, w.process, w.rep): w.ms for w in walls if w.mode == "fused" and not w.check}
    theirs = {(b.depth, b.process, r): ms for b in bench for r, ms in enumerate(b.samples_ms)}
    summary.bench_tolerance, summary.timed_tolerance = bench_tol, timed_tol
    for depth, iv in paired_by_process_pair(fused, theirs, "fused/bench").items():
        summary.fused_vs_bench[str(depth)] = iv.value
        summary.fused_vs_bench_ci[str(depth)] = iv
        summary.fused_vs_bench_verdict[str(depth)] = verdict(iv, bench_tol)
    summary.fused_vs_bench_all = over_depths(process_ratios(fused, theirs, False), "fused/bench")
    summary.fused_vs_bench_all_verdict = verdict(summary.fused_vs_bench_all, bench_tol) if theirs else None
    for d, gap in summary.timed_vs_fused_gap_ci.items():
        summary.timed_vs_fused_verdict[d] = verdict(gap, timed_tol)
    summary.timed_vs_fused_all_verdict = verdict(summary.timed_vs_fused_all, timed_tol)


def undecided_references(s: ProfileSummary) -> str:
    """Which check is still undecided and where ('' when every one is decided at every depth)."""
    out = []
    fake_real = {d: "undecided" for d, vs in s.fake_vs_real_verdict.items() if "undecided" in vs.values()}
    for what, verdicts in (
        ("FUSED/llama-bench", s.fused_vs_bench_verdict),
        ("TIMED/FUSED", s.timed_vs_fused_verdict),
        ("fake/real depth", fake_real),
    ):
        open_ = [d for d, v in verdicts.items() if v == "undecided"]
        if open_:
            out.append(f"{what} is undecided at depth {', '.join(open_[:4])}")
    return "; ".join(out)
