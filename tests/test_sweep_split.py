"""Through the server, fake / estimate is no verdict but a measurement: a point whose fake arm costs what the
genuine hit does but 10% more than the engine's own chunk has that 10% as the server's per-request share
(genuine / estimate, and genuine - estimate in ms, paired by rep), printed per point with its interval, with the
batch-size effect (the step's chunk against a 512-token one in the same fill pass) beside it in --wide."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from lab.core.schemas import BATCH_CHUNK, InprocFill, PrefillTps, SweepSample
from lab.experiments.sweep.grid import GridPoint
from lab.experiments.sweep.inproc import summarize_inproc
from lab.experiments.sweep.server import summarize_server
from lab.presenters.sweep import print_summary

pytestmark = pytest.mark.fast

L, NEW, REPS, PROCS = 2048, 64, 10, 5


def samples(p: GridPoint, engine_ms: float, share: float) -> tuple[list[SweepSample], list[PrefillTps]]:
    """Each rep: the engine's chunk (the estimate), then fake and genuine through the server at `share` more;
    the host's level moves from rep to rep and falls on all three alike."""
    rows, tps = [], []
    for rep in range(REPS):
        level = 1 + 0.04 * ((rep * 7) % 5 - 2)  # +-8%, the same for the rep's arms and its estimate
        process = rep % PROCS
        chunk = engine_ms * level
        tps.append(
            PrefillTps(
                point=p.id, rep=rep, depth=L, chunk=NEW, tps=NEW / chunk * 1e3, avg_ms=chunk, stddev_ms=0.0, reps=1,
                tool="lab-inproc-driver", process=process,
            )
        )  # fmt: skip
        for arm, jitter in (("fake", 1.002), ("genuine", 0.998)):
            rows.append(
                SweepSample(
                    point=p.id, L=L, new=NEW, arm=arm, rep=rep, ok=True, prompt_ms=chunk * share * jitter,
                    prompt_n=NEW, cache_n=L, process=process,
                )
            )  # fmt: skip
    return rows, tps


def fills(per_token_64: float, per_token_512: float) -> list[InprocFill]:
    """One fill pass per process, each timing the step's chunk and the 512-token reference at depth L."""
    out = []
    for n in range(PROCS):
        wobble = 1 + 0.01 * (n - 2)
        out += [
            InprocFill(kind="fill", fill_pass=n, L=L, start=0, ms=900.0, process=n),
            InprocFill(kind="chunk", fill_pass=n, L=L, new=NEW, ms=NEW * per_token_64 * wobble, process=n),
            InprocFill(kind="chunk", fill_pass=n, L=L, new=BATCH_CHUNK, ms=BATCH_CHUNK * per_token_512, process=n),
        ]
    return out


def test_the_servers_share_is_measured_not_judged() -> None:
    p = GridPoint(L, NEW)
    rows, tps = samples(p, engine_ms=40.0, share=1.10)
    point = summarize_server(p, rows, tps, 0.03, fills=fills(0.625, 0.5))
    assert point.estimate_verdict is None and point.genuine_verdict == "agree"
    est, share, batch = point.fake_vs_estimate_ci, point.genuine_vs_estimate_ci, point.batch_effect_ci
    assert est is not None and share is not None and batch is not None
    assert est.value == pytest.approx(1.10 * 1.002, rel=1e-3) and est.processes == PROCS
    # the host's +-8% falls on both sides of every ratio: the intervals stay well inside +-3%
    assert share.value == pytest.approx(1.10 * 0.998, rel=1e-3) and share.hi - share.lo < 0.01
    ms = point.server_share_ms_ci
    assert ms is not None and ms.lo <= 40.0 * (1.10 * 0.998 - 1) <= ms.hi and ms.processes == PROCS
    assert batch.value == pytest.approx(1.25, rel=0.02) and batch.n == PROCS and batch.processes == PROCS
    assert not any(d.startswith("fake / estimate") for d in point.diagnostics)  # no verdict, nothing to explain

    out = io.StringIO()
    print_summary(Console(file=out, width=100), [point])
    text = out.getvalue()
    assert "the server's per-request share" in text and "+9.8% [" in text
    assert "fake vs estimate" not in text and "fake / estimate" not in text  # no check through the server
    out = io.StringIO()
    print_summary(Console(file=out, width=400), [point], wide=True)  # the split: --wide
    assert "server share - 1" in out.getvalue() and "per token vs 512 - 1" in out.getvalue()


def test_without_the_reference_chunk_there_is_no_batch_part() -> None:
    p = GridPoint(L, NEW)
    rows, tps = samples(p, engine_ms=40.0, share=0.9)
    point = summarize_server(p, rows, tps, 0.03, fills=[f for f in fills(0.6, 0.5) if f.new != BATCH_CHUNK])
    assert point.estimate_verdict is None and point.batch_effect_ci is None
    assert point.genuine_vs_estimate_ci is not None and point.genuine_vs_estimate_ci.value < 0.91


def test_the_stop_rule_reads_the_summarys_own_checks() -> None:
    """Between two reps the stop rule reads judge_point, not the whole summary: the same intervals and verdicts
    (the same keys, the same samples), so stopping early changes nothing the run then stores."""
    from lab.experiments.sweep.estimate import paired_estimate
    from lab.experiments.sweep.points import PointSamples, judge_point

    p = GridPoint(L, NEW)
    rows, tps = samples(p, engine_ms=40.0, share=1.03)
    whole = summarize_server(p, rows, tps, 0.03, fills=fills(0.625, 0.5))
    judged = judge_point(PointSamples.of(p, rows, "server", tps), None, 0.03)
    assert judged.fake_vs_genuine_ci == whole.fake_vs_genuine_ci and judged.genuine_verdict == whole.genuine_verdict
    assert judged.estimate_verdict is None and whole.estimate_verdict is None  # through the server: measured
    inproc = [r.model_copy(update={"where": "inproc"}) for r in rows]
    in_tps = [t.model_copy(update={"where": "inproc"}) for t in tps]
    ps = PointSamples.of(p, inproc, "inproc", in_tps)
    one = judge_point(ps, paired_estimate(ps, in_tps), 0.03)
    full = summarize_inproc(p, inproc, 0.03, fills(0.625, 0.5), None, in_tps)
    assert one.fake_vs_estimate_ci == full.fake_vs_estimate_ci and one.estimate_verdict == full.estimate_verdict
    assert one.fake_vs_genuine_ci == full.fake_vs_genuine_ci and one.estimate_verdict is not None
