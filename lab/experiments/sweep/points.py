"""What a sweep point's samples say, through the server or in one process alike: one row per timed step, each
arm's median with its interval, the ratios paired by rep with their verdicts, and when a point is decided. Each
place adds its own part of the point (lab.experiments.sweep.server, lab.experiments.sweep.inproc)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lab.core.components import variance_components
from lab.core.runs import utc_now
from lab.core.schemas import (
    BATCH_CHUNK,
    FILL_PASSES,
    KV_PAD,
    ArmStats,
    Components,
    InprocFill,
    InprocPointFields,
    Interval,
    PrefillTps,
    ServerPointFields,
    SweepPoint,
    SweepSample,
    Verdict,
    Where,
    ggml_pad,
)
from lab.core.settings import SweepSettings
from lab.core.stats import arm_stats, median_interval, paired_reps, reps_to_decide, rotated, unpaired_ratio, verdict
from lab.engine.contract import ARMS, Arm, ArmResult
from lab.engine.imagegrid import ImageGeometry
from lab.experiments.sweep.diagnose import diagnose
from lab.experiments.sweep.grid import GridPoint, image_counts
from lab.measure.fills import batch_values, fill_values

# what a sample keeps of the arm's result as it is
AS_MEASURED = {"arm", "ok", "reason", "encode_ms", "image_decode_ms", "warm"}


@dataclass
class RepOut:
    """One rep of one point in one place: its timed steps, the estimate's samples, its wall time, and whether it
    ran the direct baseline (a rep that did is not what one more rep costs)."""

    samples: list[SweepSample] = field(default_factory=list)
    tps: list[PrefillTps] = field(default_factory=list)
    wall_s: float = 0.0
    baseline: bool = False


def rep_arms(arms: Sequence[str], rep: int, sw: SweepSettings) -> list[Arm]:
    """The arms of one rep in a rotating order (no arm always goes first); the direct baseline only in the first
    sweep.baseline_reps reps (every rep when None): it is in no verdict and costs L + new."""
    cap = sw.max_reps if sw.baseline_reps is None else sw.baseline_reps
    return rotated([a for a in ARMS if a in arms and not (a == "baseline" and rep >= cap)], rep)


def sample_row(
    p: GridPoint, rep: int, r: ArmResult, geom: ImageGeometry | None = None, process: int = 0
) -> SweepSample:
    t = r.timings
    image_tokens, image_positions = image_counts(p, geom)
    return SweepSample(
        **r.model_dump(include=AS_MEASURED),
        image=p.image,
        image_tokens=image_tokens,
        image_positions=image_positions,
        point=p.id,
        L=p.L,
        new=p.new,
        rep=rep,
        prompt_ms=t.prompt_ms if t else None,
        prompt_n=t.prompt_n if t else None,
        cache_n=t.cache_n if t else None,
        fake_ms=t.fake_ms if t and r.arm == "fake" else None,
        **decode_fields(r),
        process=process,
        t_utc=utc_now(),
    )


def decode_fields(r: ArmResult) -> dict[str, Any]:
    """A sample's generation, when its request generated tokens to time (sweep.n_out)."""
    t = r.timings
    if t is None or t.decode_ms is None:
        return {}
    return {"predicted_n": t.predicted_n, "predicted_ms": t.predicted_ms, "decode_ms": t.decode_ms}


Keyed = dict[int, float]  # a value per rep
PlaceFields = ServerPointFields | InprocPointFields  # what a place adds to the point every place fills


def server_arm_stats(samples: list[SweepSample], arm: str, key: str) -> ArmStats:
    """The prompt_ms of one arm's timed steps (lab.core.stats.arm_stats), resampled by process when there are
    several."""
    ok = [s for s in samples if s.arm == arm and s.ok and s.prompt_ms is not None]
    failed = sum(1 for s in samples if s.arm == arm and not s.ok)
    return arm_stats(
        [s.prompt_ms for s in ok if s.prompt_ms is not None], failed, f"{key}/{arm}", [s.process for s in ok]
    )


def rep_values(samples: list[SweepSample]) -> dict[str, Keyed]:
    """One point's per-rep values of every figure paired by rep (a rep's arms run back to back), keyed by rep: the
    ratios, and in one process the cache read's bandwidth, its share of the step and memcpy's yardstick. A
    point's figure is their median; a run's pooled figure the median of every point's values together."""
    by_rep = {arm: _by_rep(samples, arm) for arm in ARMS}
    prep, copy = _by_rep(samples, "genuine", "prep_ms"), _by_rep(samples, "genuine", "copy_ms")
    blob = max((s.blob_bytes for s in samples if s.arm == "genuine" and s.blob_bytes), default=0)
    step = {r: prep[r] + by_rep["genuine"][r] for r in prep if r in by_rep["genuine"]}
    return {
        "fake/genuine": _ratio(by_rep["fake"], by_rep["genuine"]),
        "fake/baseline": _ratio(by_rep["fake"], by_rep["baseline"]),
        "genuine/plain": _ratio(by_rep["genuine"], by_rep["plain"]),
        "restore-step/genuine": _ratio(step, by_rep["genuine"]),
        "memcpy/restore": _ratio(copy, prep),
        "share": _ratio(prep, step),
        "restore/gbps": {r: blob / ms / 1e6 for r, ms in prep.items() if ms > 0} if blob else {},
        "memcpy/gbps": {r: blob / ms / 1e6 for r, ms in copy.items() if ms > 0} if blob else {},
    }


def _ratio(a: Keyed, b: Keyed) -> Keyed:
    return {r: a[r] / b[r] for r in paired_reps(a, b)}


def _by_rep(samples: list[SweepSample], arm: str, field: str = "prompt_ms") -> Keyed:
    return {s.rep: getattr(s, field) for s in samples if s.arm == arm and s.ok and getattr(s, field) is not None}


def processes_of(samples: list[SweepSample]) -> dict[int, int]:
    """The process each rep of a point ran in."""
    return {s.rep: s.process for s in samples}


def keyed_interval(values: Keyed, key: str, proc_of: dict[int, int]) -> Interval | None:
    """The median of per-rep values with its interval, resampling the reps' processes."""
    reps = sorted(values)
    return median_interval([values[r] for r in reps], key, [proc_of.get(r, 0) for r in reps])


@dataclass
class PointSamples:
    """One point's samples in one place, by rep, with the process each rep ran in (what every interval
    resamples). `key` names the point's intervals (their resampling is seeded by it)."""

    p: GridPoint
    samples: list[SweepSample]
    key: str
    proc_of: dict[int, int]

    @classmethod
    def of(cls, p: GridPoint, samples: list[SweepSample], where: Where, tps: Sequence[PrefillTps] = ()) -> PointSamples:
        estimates = {t.rep: t.process for t in tps if t.rep is not None}
        return cls(p, samples, p.id if where == "server" else f"inproc/{p.id}", processes_of(samples) | estimates)

    def by_rep(self, arm: str, field: str = "prompt_ms") -> Keyed:
        return _by_rep(self.samples, arm, field)

    def procs(self, values: Keyed) -> list[int]:
        return [self.proc_of.get(r, 0) for r in values]

    def interval(self, values: Keyed, name: str) -> Interval | None:
        return keyed_interval(values, f"{self.key}/{name}", self.proc_of)


@dataclass
class PointEstimate:
    """What a place takes as a point's estimate (only_new / prefill_tps(L)): its samples in ms, the fake arm
    against it, and through the server its value per rep (paired by rep with the arms, the image's encode added)."""

    ms: list[float]
    vs_fake: Interval | None
    chunk: int  # the tokens it decodes: only_new (an image step's image tokens too)
    by_rep: Keyed = field(default_factory=dict)
    encode_ms: float = 0.0  # an image step: the fake arm's median vision encode, added to the estimate

    def interval(self, ps: PointSamples) -> Interval | None:
        return ps.interval(self.by_rep, "estimate")


def summarize_point(
    ps: PointSamples, est: PointEstimate, tol: float, fills: list[InprocFill], extension: PlaceFields
) -> SweepPoint:
    """One point measured in one place: what every place fills (each arm, the ratios and their verdicts, in one
    process the baseline from the fill passes when it had no direct reps, the spread, decode at depth) and the
    place's own `extension` (its SweepPoint fields)."""
    p, key = ps.p, ps.key
    stats = {arm: server_arm_stats(ps.samples, arm, key) for arm in ARMS}
    values, fake = rep_values(ps.samples), ps.by_rep("fake")
    vs_gen, vs_plain, vs_base = (ps.interval(values[n], n) for n in ("fake/genuine", "genuine/plain", "fake/baseline"))
    base_fill, fill_chunk, fill_procs = fill_values(fills, p.L, est.chunk)
    direct, inproc = bool(ps.by_rep("baseline")), key != p.id
    if not direct and base_fill and inproc:  # in one process only: through the server, another place's number
        stats["baseline"] = arm_stats(base_fill, key=f"{key}/baseline/fill", procs=fill_procs)
        fake_ms = list(fake.values())
        vs_base = unpaired_ratio(fake_ms, base_fill, f"{key}/fake/baseline/fill", ps.procs(fake), fill_procs)
    checked = {"genuine": vs_gen, "plain": vs_plain} | ({"estimate": est.vs_fake} if inproc else {})
    verdicts, more = judged(checked, tol)
    est_median = statistics.median(est.ms) if est.ms else None
    point = SweepPoint(
        where="inproc" if inproc else "server",
        point=p.id,
        L=p.L,
        new=p.new,
        image=p.image,
        n_kv_padded=ggml_pad(p.L + est.chunk),
        measurable=p.L >= KV_PAD,
        prefill_tps=est.chunk / est_median * 1e3 if est_median else None,
        # only_new / prefill_tps(L) = the chunk's time at depth L (+ the encode for an image step)
        opt_prefill_ms=est_median + est.encode_ms if est_median is not None else None,
        fake_vs_estimate_ci=est.vs_fake,
        estimate_ci=est.interval(ps),
        fake_vs_genuine_ci=vs_gen,
        fake_vs_baseline_ci=vs_base,
        genuine_verdict=verdicts["genuine"],
        estimate_verdict=verdicts.get("estimate"),
        genuine_vs_plain_ci=vs_plain,
        plain_verdict=verdicts["plain"],
        genuine_warm=",".join(sorted({s.warm for s in ps.samples if s.arm == "genuine" and s.warm})),
        reps=len({s.rep for s in ps.samples} | set(est.by_rep)),
        processes=max(1, len({s.process for s in ps.samples})),
        reps_to_decide=more,
        baseline_fill=arm_stats(base_fill, key=f"{key}/baseline/fill", procs=fill_procs),
        **engine_alone(base_fill, fill_chunk, fill_procs, key),
        baseline_source="direct reps" if direct else FILL_PASSES if base_fill and inproc else "",
        components=spread_components(ps, values, est),
        baseline=stats["baseline"],
        fake=stats["fake"],
        genuine=stats["genuine"],
        plain=stats["plain"],
        **decode_at_depth(ps),
        **estimate_split(ps, est, fills),
        **dict(extension),
    )
    point.diagnostics = diagnose(point, ps.samples, tol)
    return point


def judge_point(ps: PointSamples, est: PointEstimate | None, tol: float) -> SweepPoint:
    """What the stop rule needs of a point between two reps and after each of its rounds (`decided`): its
    checks' intervals and verdicts, the same as the whole summary's (the same keys, the same samples), and the
    spread that sizes its next process (`components`, no bootstrap), nothing else. The whole summary
    (summarize_point) takes about ten bootstraps more, 0.25-0.45 s a point on a 2-core VM: after every rep, a
    third of an in-process run; after every round, of a run whose points need tens of processes, a third again."""
    values, inproc = rep_values(ps.samples), ps.key != ps.p.id
    vs_gen, vs_plain = (ps.interval(values[n], n) for n in ("fake/genuine", "genuine/plain"))
    vs_est = est.vs_fake if est is not None and inproc else None
    verdicts, _ = judged({"genuine": vs_gen, "plain": vs_plain} | ({"estimate": vs_est} if inproc else {}), tol)
    return SweepPoint(
        where="inproc" if inproc else "server",
        point=ps.p.id,
        L=ps.p.L,
        new=ps.p.new,
        n_kv_padded=ggml_pad(ps.p.L + ps.p.new),
        measurable=ps.p.L >= KV_PAD,
        baseline=ArmStats(),
        fake=ArmStats(),
        genuine=ArmStats(),
        fake_vs_genuine_ci=vs_gen,
        genuine_vs_plain_ci=vs_plain,
        fake_vs_estimate_ci=vs_est,
        genuine_verdict=verdicts["genuine"],
        plain_verdict=verdicts["plain"],
        estimate_verdict=verdicts.get("estimate"),
        reps=len({s.rep for s in ps.samples}),
        processes=max(1, len({s.process for s in ps.samples})),
        components=spread_components(ps, values, est),
    )


def judged(checked: dict[str, Interval | None], tol: float) -> tuple[dict[str, Verdict], int | None]:
    """The checks' verdicts, and about how many reps would decide the undecided ones. Through the server fake /
    estimate is none of them: it is the estimate plus the server's share, measured (estimate_split), not judged
    against a margin it sits on; in one process it is the first claim's check."""
    verdicts: dict[str, Verdict] = {name: verdict(iv, tol) for name, iv in checked.items()}
    more = [reps_to_decide(iv, tol) for name, iv in checked.items() if iv is not None and verdicts[name] == "undecided"]
    return verdicts, max((n for n in more if n is not None), default=None)


def engine_alone(base: list[float], chunk: list[float], procs: list[int], key: str) -> dict[str, Any]:
    """The step in one process from the fill passes: its cached step (the chunk after the pass's real prefix) and
    the pass's re-prefill over it, paired by fill pass (one pass per process)."""
    pairs = [(b / c, q) for b, c, q in zip(base, chunk, procs, strict=True) if c > 0]
    return {
        "fill_step_ci": median_interval(chunk, f"{key}/fill/step", procs),
        "fill_speedup_ci": median_interval([r for r, _ in pairs], f"{key}/fill/speedup", [q for _, q in pairs]),
    }


def estimate_split(ps: PointSamples, est: PointEstimate, fills: list[InprocFill]) -> dict[str, Any]:
    """What fake / estimate is made of beside fake / genuine: genuine / estimate paired by rep (through the server
    its per-request share), and the batch-size effect from the fill passes' reference chunks."""
    genuine = ps.by_rep("genuine")
    vs_est = ps.interval(_ratio(genuine, est.by_rep), "genuine/estimate") if est.by_rep else None
    batch, procs = batch_values(fills, ps.p.L, est.chunk, BATCH_CHUNK) if est.chunk != BATCH_CHUNK else ([], [])
    out = {"genuine_vs_estimate_ci": vs_est, "batch_effect_ci": median_interval(batch, f"{ps.key}/batch", procs)}
    if ps.key == ps.p.id and est.by_rep:  # through the server: its share in ms, what it adds to the estimate
        share = {r: genuine[r] - est.by_rep[r] for r in paired_reps(genuine, est.by_rep)}
        out["server_share_ms_ci"] = ps.interval(share, "server-share-ms")
    return out


def spread_components(ps: PointSamples, values: dict[str, Keyed], est: PointEstimate | None) -> dict[str, Components]:
    """The spread between processes and within one, per arm and ratio (what sizes a further process)."""
    spread = {arm: ps.by_rep(arm) for arm in ("fake", "genuine")} | {"fake/genuine": values["fake/genuine"]}
    if est is not None and est.by_rep:
        spread |= {"estimate": est.by_rep, "fake/estimate": _ratio(ps.by_rep("fake"), est.by_rep)}
    out = {}
    for name, keyed_values in spread.items():
        reps = sorted(keyed_values)
        c = variance_components([keyed_values[r] for r in reps], [ps.proc_of.get(r, 0) for r in reps])
        if c is not None:
            out[name] = c
    return out


def decode_at_depth(ps: PointSamples) -> dict[str, Any]:
    """sweep.n_out: the fake arm's generation, decode ms per token at depth L + new."""
    decode = ps.by_rep("fake", "decode_ms")
    if not decode:
        return {}
    n_out = max(s.predicted_n or 0 for s in ps.samples if s.arm == "fake")
    return {"n_out": n_out, "decode_ci": ps.interval(decode, "decode")}


def decided(point: SweepPoint, sw: SweepSettings) -> bool:
    """Whether a point needs no more reps: the verdicts of what is measured are decided, and the fake/genuine
    interval is as narrow as `sw.target`. fake / estimate counts in one process; through the server it is the
    server's share, measured, not a verdict."""
    if "genuine" in sw.arms:
        iv = point.fake_vs_genuine_ci
        if point.genuine_verdict == "undecided" or iv is None or iv.half_width > sw.target:
            return False
    if "plain" in sw.arms and point.plain_verdict == "undecided":
        return False
    inproc = point.where == "inproc"  # through the server fake / estimate is measured, never waited on
    return not ("estimate" in sw.arms and inproc and point.estimate_verdict == "undecided")
