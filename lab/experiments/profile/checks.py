"""The profile's checks, decided with the process as the unit: TIMED / FUSED and fake / real depth paired by rep
(back to back in one process), FUSED / llama-bench paired by process pair (lab.experiments.profile.bench), each per
depth and over all depths at once."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from lab.core.schemas import BANDS, Interval, ProfileSummary, ProfileWall
from lab.core.stats import PairRep, from_draws, median_interval, paired_processes, resamples, verdict

Chunk = tuple[int, bool, str, int, int]  # (process, check, fill, depth, rep): one timed chunk


def chunk_key(r: dict[str, Any]) -> Chunk:
    return (r["process"], r["check"], r["fill"], r["depth"], r["rep"])


def chunk_sums(nodes: list[dict[str, Any]]) -> tuple[dict[Chunk, float], dict[tuple[Chunk, str], float]]:
    """Each TIMED chunk's node sum, and each of its bands'."""
    total: dict[Chunk, float] = defaultdict(float)
    band: dict[tuple[Chunk, str], float] = defaultdict(float)
    for r in nodes:
        k = chunk_key(r)
        total[k] += r["ms"]
        band[(k, r["band"])] += r["ms"]
    return total, band


def paired_by_rep(
    a: dict[tuple[int, int, int], float], b: dict[tuple[int, int, int], float], key: str
) -> dict[int, Interval]:
    """Per depth: the median over the (process, rep) both have of a / b, paired by rep (a rep's a and b measured
    back to back in one process, so what moves both cancels in its ratio); the interval resamples processes, then
    reps within them, widened for few processes (lab.core.stats.median_interval)."""
    out: dict[int, Interval] = {}
    for depth in sorted({d for d, _, _ in a} & {d for d, _, _ in b}):
        keys = sorted(k for k in a.keys() & b.keys() if k[0] == depth and b[k] > 0)
        iv = median_interval([a[k] / b[k] for k in keys], f"{key}/{depth}", [k[1] for k in keys])
        if iv is not None:
            out[depth] = iv
    return out


def over_depths(per: dict[tuple[int, int], float], key: str) -> Interval | None:
    """One ratio over every depth: per process the geometric mean of its depths' ratios (`per`: (depth, process)
    -> ratio), their geometric mean over processes with its interval (processes resampled, widened for few): a
    depth's own noise averages out over the depths, so this decides where a single depth's interval cannot."""
    procs = sorted({p for _, p in per})
    depths = sorted({d for d, _ in per})
    logs = [
        statistics.fmean(math.log(per[(d, p)]) for d in depths)
        for p in procs
        if all(per.get((d, p), 0) > 0 for d in depths)
    ]
    if len(logs) < 2:
        return None
    draws = [math.exp(statistics.fmean(logs[i] for i in idx)) for idx in resamples(len(logs), key, count=2000)]
    return from_draws(math.exp(statistics.fmean(logs)), draws, len(logs), len(logs))


def process_ratios(
    a: dict[tuple[int, int, int], float], b: dict[tuple[int, int, int], float], by_rep: bool
) -> dict[tuple[int, int], float]:
    """Per (depth, process): the median of a / b over the reps (`by_rep`: paired by rep, a rep's a and b measured
    back to back in one process), or the ratio of the medians (a process pair's two processes)."""
    groups: dict[tuple[int, int], tuple[list[float], list[float], list[float]]] = defaultdict(lambda: ([], [], []))
    for k, v in a.items():
        groups[k[:2]][0].append(v)
        if by_rep and b.get(k, 0) > 0:
            groups[k[:2]][2].append(v / b[k])
    for k, v in b.items():
        groups[k[:2]][1].append(v)
    out: dict[tuple[int, int], float] = {}
    for cell, (xa, xb, ratios) in groups.items():
        if by_rep and ratios:
            out[cell] = statistics.median(ratios)
        elif not by_rep and xa and xb and statistics.median(xb) > 0:
            out[cell] = statistics.median(xa) / statistics.median(xb)
    return out


def paired_by_process_pair(
    a: dict[tuple[int, int, int], float], b: dict[tuple[int, int, int], float], key: str
) -> dict[int, Interval]:
    """Per depth: median(a) / median(b) over the (process, rep) both have, paired by process pair: a's and b's
    process of one number ran next to each other in time, their reps did not run back to back
    (lab.core.stats.paired_processes: pairs resampled, then reps within one, the same draws on both sides,
    widened for few pairs)."""
    out: dict[int, Interval] = {}
    for depth in sorted({d for d, _, _ in a} & {d for d, _, _ in b}):
        sa: dict[PairRep, float] = {(p, r): v for (d, p, r), v in a.items() if d == depth}
        sb: dict[PairRep, float] = {(p, r): v for (d, p, r), v in b.items() if d == depth}
        iv, _ = paired_processes(sa, sb, f"{key}/{depth}")
        if iv is not None:
            out[depth] = iv
    return out


def timed_vs_fused(
    walls: list[ProfileWall], nodes: list[dict[str, Any]]
) -> tuple[dict[int, Interval], Interval | None]:
    """Per depth and over all depths: the TIMED chunk's node sum / the FUSED chunk's wall of the same rep (back to
    back in one process), over the profile's own chunks."""
    total, _ = chunk_sums([r for r in nodes if not r["check"]])
    timed = {(k[3], k[0], k[4]): ms for k, ms in total.items()}
    fused = {(w.depth, w.process, w.rep): w.ms for w in walls if w.mode == "fused" and not w.check}
    return paired_by_rep(timed, fused, "timed/fused"), over_depths(process_ratios(timed, fused, True), "timed/fused")


MIN_SHARE = 0.05  # a band checked fake against real holds at least this share of the chunk's time


def kind_part(kind: str) -> str:
    """The fake-vs-real part of attn_core in the layers of one kind (full or window)."""
    return f"attn_core {kind}"


def fake_vs_real(
    walls: list[ProfileWall],
    nodes: list[dict[str, Any]],
    s: ProfileSummary,
    tol: float,
    layers: dict[int, str] | None = None,
) -> None:
    """The fake-vs-real check, into the summary: per depth and over all checked depths, the FUSED wall (total),
    each band's TIMED ms and (`layers`: a sliding-window model's attention layers by kind) attn_core's in the layers
    of each kind after a fake prefix / after a restored real fill, paired by rep; verdicts for the total and every
    part holding at least MIN_SHARE of the real chunks' TIMED time."""
    checked = [w for w in walls if w.check]
    if not checked:
        return
    s.real_tolerance = tol
    samples = {"total": check_samples([w for w in checked if w.mode == "fused"], {})}
    checking = [r for r in nodes if r["check"]]
    _, band = chunk_sums(checking)
    for band_name in BANDS:
        samples[band_name] = check_samples([], {k: ms for (k, b), ms in band.items() if b == band_name})
    for kind in sorted(set((layers or {}).values())):
        of_kind = [r for r in checking if r["band"] == "attn_core" and (layers or {}).get(r.get("layer", -1)) == kind]
        samples[kind_part(kind)] = check_samples([], chunk_sums(of_kind)[0])
    per: dict[str, dict[str, Interval]] = defaultdict(dict)
    for what, (fake, real) in samples.items():
        for d, iv in paired_by_rep(fake, real, f"fake/real/{what}").items():
            per[str(d)][what] = iv
        if (whole := over_depths(process_ratios(fake, real, True), f"fake/real/{what}")) is not None:
            s.fake_vs_real_all[what] = whole
    real_ms: dict[tuple[int, str], float] = defaultdict(float)  # the real chunks' TIMED ms per (depth, part)
    for what, (_, real) in samples.items():
        if what != "total":
            for (d, _, _), ms in real.items():
                real_ms[(d, what)] += ms
    s.fake_vs_real = dict(per)
    for depth, ivs in per.items():
        total = sum(real_ms[(int(depth), name)] for name in BANDS) or 1.0
        s.fake_vs_real_verdict[depth] = {
            what: verdict(iv, tol)
            for what, iv in ivs.items()
            if what == "total" or real_ms[(int(depth), what)] / total >= MIN_SHARE
        }
    everything = sum(v for (_, name), v in real_ms.items() if name in BANDS) or 1.0
    for what, iv in s.fake_vs_real_all.items():
        if what == "total" or sum(v for (_, name), v in real_ms.items() if name == what) / everything >= MIN_SHARE:
            s.fake_vs_real_all_verdict[what] = verdict(iv, tol)


RepMs = dict[tuple[int, int, int], float]  # (depth, process, rep) -> ms


def check_samples(walls: list[ProfileWall], band: dict[Chunk, float]) -> tuple[RepMs, RepMs]:
    """The fake-vs-real check's fake and real samples keyed by (depth, process, rep): FUSED walls, or one band's
    TIMED ms per chunk."""
    out: dict[str, RepMs] = {"fake": {}, "real": {}}
    for w in walls:
        out[w.fill][(w.depth, w.process, w.rep)] = w.ms
    for k, ms in band.items():
        out[k[2]][(k[3], k[0], k[4])] = ms
    return out["fake"], out["real"]
