"""What a sweep point's samples say, through the server or in one process alike: one row per timed step, each
arm's median with its interval, the ratios paired by rep with their verdicts, the cache read's cost in one
process, when a point is decided, and the notes on what to check."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lab.engine.contract import ARMS, Arm, ArmResult
from lab.engine.imagegrid import ImageGeometry
from lab.experiments.sweep_grid import GridPoint, image_counts
from lab.fills import fill_values
from lab.models.memshape import MemoryShape
from lab.runs import utc_now
from lab.schemas import (
    KV_PAD,
    ArmStats,
    InprocFill,
    Interval,
    PrefillTps,
    SweepPoint,
    SweepSample,
    Where,
    ggml_pad,
)
from lab.settings import SweepSettings
from lab.stats import (
    arm_stats,
    median_interval,
    paired_ratio,
    paired_reps,
    reps_to_decide,
    unpaired_ratio,
    variance_components,
    verdict,
)

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
    todo = [a for a in ARMS if a in arms and not (a == "baseline" and rep >= cap)]
    k = rep % len(todo) if todo else 0
    return todo[k:] + todo[:k]


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


def server_arm_stats(samples: list[SweepSample], arm: str, key: str) -> ArmStats:
    """The prompt_ms of one arm's timed steps (lab.stats.arm_stats), resampled by process when there are several."""
    ok = [s for s in samples if s.arm == arm and s.ok and s.prompt_ms is not None]
    failed = sum(1 for s in samples if s.arm == arm and not s.ok)
    return arm_stats(
        [s.prompt_ms for s in ok if s.prompt_ms is not None], failed, f"{key}/{arm}", [s.process for s in ok]
    )


def bench_interval(t: PrefillTps) -> Interval:
    """llama-bench's mean chunk ms with a 95% interval from its own reps (normal approximation: it keeps no
    samples we could bootstrap here)."""
    half = 1.96 * t.stddev_ms / max(1, t.reps) ** 0.5
    return Interval(value=t.avg_ms, lo=t.avg_ms - half, hi=t.avg_ms + half, n=max(1, t.reps))


def rep_values(samples: list[SweepSample]) -> dict[str, Keyed]:
    """One point's per-rep values of every paired figure (a rep's arms run back to back), keyed by rep: the
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


def summarize_point(
    p: GridPoint,
    samples: list[SweepSample],
    tps: list[PrefillTps],
    tol: float,
    geom: ImageGeometry | None = None,
    fills: list[InprocFill] | None = None,
    where: Where = "server",
    shape: MemoryShape | None = None,
    inproc: list[SweepSample] | None = None,
) -> SweepPoint:
    """One point measured in one place, from its samples. The estimate: through the server, the driver's chunks
    interleaved with the reps (`tps`, paired); in one process, the fill passes' chunks (unpaired: the genuine arm
    is that very chunk, so the estimate comes free). `inproc`: the same point's in-process samples, for the
    server's own share per arm (a both-places sweep)."""
    key = p.id if where == "server" else f"inproc/{p.id}"
    stats = {arm: server_arm_stats(samples, arm, key) for arm in ARMS}
    by_rep = {arm: _by_rep(samples, arm) for arm in ARMS}
    values = rep_values(samples)
    proc_of = processes_of(samples) | {t.rep: t.process for t in tps if t.rep is not None}

    def iv(name: str) -> Interval | None:
        return keyed_interval(values[name], f"{key}/{name}", proc_of)

    def keyed(field: str, arm: str) -> Interval | None:
        return keyed_interval(_by_rep(samples, arm, field), f"{key}/{arm}/{field}", proc_of)

    # image steps: the estimate adds the vision encode explicitly (the fake arm's, per rep)
    encode = _by_rep(samples, "fake", "encode_ms")
    est = [t for t in tps if t.rep is not None]  # interleaved estimate samples; rep None: the cross-check
    check = next((t for t in tps if t.rep is None), None)
    only_new = est[0].chunk if est else p.new  # image steps: image tokens + text tokens
    base_fill, chunks, fill_procs = fill_values(fills or [], p.L, only_new)
    est_by_rep = {t.rep: t.avg_ms + encode.get(t.rep, 0.0) for t in est if t.rep is not None}
    est_ms = [t.avg_ms for t in est] if est else chunks if where == "inproc" else []
    img = image_counts(p, geom)
    encode_ci = keyed_interval(encode, f"{key}/encode", proc_of)
    lm = {r: by_rep["fake"][r] - e for r, e in encode.items() if r in by_rep["fake"]}
    lm_ci = keyed_interval(lm, f"{key}/lm", proc_of)
    fake_procs = [proc_of.get(r, 0) for r in by_rep["fake"]]
    if where == "inproc":
        vs_est = unpaired_ratio(list(by_rep["fake"].values()), chunks, f"{key}/fake/estimate", fake_procs, fill_procs)
    else:
        vs_est = paired_ratio(by_rep["fake"], est_by_rep, f"{key}/fake/estimate", proc_of)
    vs_gen, vs_plain, vs_base = iv("fake/genuine"), iv("genuine/plain"), iv("fake/baseline")
    if not by_rep["baseline"] and base_fill:  # no direct reps: the fill passes' prefix sums are the baseline
        stats["baseline"] = arm_stats(base_fill, key=f"{key}/baseline/fill", procs=fill_procs)
        fake = list(by_rep["fake"].values())
        vs_base = unpaired_ratio(fake, base_fill, f"{key}/fake/baseline/fill", fake_procs, fill_procs)
    verdicts = {"genuine": verdict(vs_gen, tol), "estimate": verdict(vs_est, tol), "plain": verdict(vs_plain, tol)}
    undecided = [
        reps_to_decide(iv, tol)
        for iv, v in ((vs_gen, verdicts["genuine"]), (vs_est, verdicts["estimate"]), (vs_plain, verdicts["plain"]))
        if iv is not None and v == "undecided"
    ]
    est_median = statistics.median(est_ms) if est_ms else None
    point = SweepPoint(
        where=where,
        point=p.id,
        L=p.L,
        new=p.new,
        image=p.image,
        image_tokens=img[0],
        image_positions=img[1],
        encode_ms=encode_ci.value if encode_ci else None,
        lm_ms=lm_ci.value if lm_ci else None,
        encode_ci=encode_ci,
        lm_ci=lm_ci,
        n_kv_padded=ggml_pad(p.L + only_new),
        measurable=p.L >= KV_PAD,
        prefill_tps=only_new / est_median * 1e3 if est_median else None,
        # only_new / prefill_tps(L) = the chunk's time at depth L (+ the encode for an image step)
        opt_prefill_ms=est_median + (encode_ci.value if encode_ci else 0.0) if est_median is not None else None,
        fake_vs_estimate=vs_est.value - 1 if vs_est else None,
        fake_vs_genuine=vs_gen.value - 1 if vs_gen else None,
        fake_vs_baseline=vs_base.value if vs_base else None,
        fake_vs_estimate_ci=vs_est,
        estimate_ci=keyed_interval(est_by_rep, f"{key}/estimate", proc_of)
        if est_by_rep
        else median_interval(est_ms, f"{key}/estimate", fill_procs if where == "inproc" else None),
        fake_vs_genuine_ci=vs_gen,
        fake_vs_baseline_ci=vs_base,
        genuine_verdict=verdicts["genuine"],
        estimate_verdict=verdicts["estimate"],
        genuine_vs_plain_ci=vs_plain,
        plain_verdict=verdicts["plain"],
        bench_check_ci=bench_interval(check) if check is not None else None,
        genuine_warm=",".join(sorted({s.warm for s in samples if s.arm == "genuine" and s.warm})),
        reps=len({s.rep for s in samples} | set(est_by_rep)),
        processes=max(1, len({s.process for s in samples})),
        reps_to_decide=max((n for n in undecided if n is not None), default=None),
        baseline=stats["baseline"],
        fake=stats["fake"],
        genuine=stats["genuine"],
        plain=stats["plain"],
        baseline_fill=arm_stats(base_fill, key=f"{key}/baseline/fill", procs=fill_procs),
        baseline_source="direct reps" if by_rep["baseline"] else "fill passes" if base_fill else "",
    )
    if where == "inproc":
        blobs = {s.blob_bytes for s in samples if s.arm == "genuine" and s.blob_bytes}
        point.fake_prep_ci, point.restore_prep_ci = keyed("prep_ms", "fake"), keyed("prep_ms", "genuine")
        point.memcpy_ci = keyed("copy_ms", "genuine")
        point.blob_bytes = max(blobs) if blobs else None
        point.predicted_blob_bytes = shape.blob_bytes(p.L) if shape else None
        point.restore_gbps_ci, point.memcpy_gbps_ci = iv("restore/gbps"), iv("memcpy/gbps")
        point.restore_vs_memcpy_ci, point.cache_read_share_ci = iv("memcpy/restore"), iv("share")
        point.restore_step_vs_genuine_ci = iv("restore-step/genuine")
    spread = {arm: by_rep[arm] for arm in ("fake", "genuine")} | {"fake/genuine": values["fake/genuine"]}
    if est_by_rep:
        spread |= {"estimate": est_by_rep, "fake/estimate": _ratio(by_rep["fake"], est_by_rep)}
    for name, keyed_values in spread.items():
        reps = sorted(keyed_values)
        c = variance_components([keyed_values[r] for r in reps], [proc_of.get(r, 0) for r in reps])
        if c is not None:
            point.components[name] = c
    in_of = processes_of(inproc or [])
    for arm in ARMS if inproc else ():  # the server's own share: server / in-process (unpaired: one after the other)
        mine, theirs = by_rep[arm], _by_rep(inproc or [], arm)
        ratio = unpaired_ratio(
            list(mine.values()),
            list(theirs.values()),
            f"{key}/{arm}/in",
            [proc_of.get(r, 0) for r in mine],
            [in_of.get(r, 0) for r in theirs],
        )
        if ratio is not None:
            point.vs_inproc[arm] = ratio
    decode = _by_rep(samples, "fake", "decode_ms")
    if decode:  # sweep.n_out: the fake arm's generation, decode ms per token at depth L + new
        point.n_out = max(s.predicted_n or 0 for s in samples if s.arm == "fake")
        point.decode_ci = keyed_interval(decode, f"{key}/decode", proc_of)
    point.diagnostics = diagnose(point, samples, tol)
    return point


def decided(point: SweepPoint, sw: SweepSettings) -> bool:
    """Whether a point needs no more reps: the verdicts of what is measured are decided, and the fake/genuine
    interval is as narrow as `sw.target`. In one process the estimate is the fill passes' (no rep narrows it)."""
    if "genuine" in sw.arms:
        iv = point.fake_vs_genuine_ci
        if point.genuine_verdict == "undecided" or iv is None or iv.half_width > sw.target:
            return False
    if "plain" in sw.arms and point.plain_verdict == "undecided":
        return False
    estimated = "estimate" in sw.arms and point.where == "server"
    return not (estimated and point.estimate_verdict == "undecided")


def diagnose(p: SweepPoint, samples: list[SweepSample], tol: float) -> list[str]:
    """Notes on a point: the checks to make where a verdict is `disagree` (what to look at when the fabricated
    prefix does not do a cache hit's work), how many reps would decide an `undecided` one, and facts (the
    256-column floor, failed samples)."""
    out: list[str] = []
    if not p.measurable:
        out.append(f"L={p.L} is below the {KV_PAD}-column floor: attention reads {p.n_kv_padded} columns anyway")
    failed = [s for s in samples if not s.ok]
    if failed:
        out.append(f"{len(failed)} failed sample(s), excluded: {failed[0].arm} rep {failed[0].rep}: {failed[0].reason}")
    fake, genuine = (
        {s.pos_min for s in samples if s.arm == a and s.ok and s.pos_min is not None} for a in ("fake", "genuine")
    )
    if fake and genuine and fake != genuine:
        out.append(
            f"the fake prefix's first held position {sorted(fake)} is not the genuine hit's {sorted(genuine)}: "
            "a sliding-window cache holds different cells in the two arms"
        )
    if p.blob_bytes and p.predicted_blob_bytes and abs(p.blob_bytes / p.predicted_blob_bytes - 1) > 0.01:
        out.append(
            f"the state blob is {p.blob_bytes:,} B, the GGUF predicts {p.predicted_blob_bytes:,} B: a KV type other "
            "than f16 (-ctk/-ctv), or a layout lab.models.memshape does not model"
        )
    only_new = p.new + (p.image_tokens or 0)  # an image step also decodes the image's tokens
    prompt_ns = sorted({s.prompt_n for s in samples if s.arm == "fake" and s.prompt_n is not None})
    est, gen = p.fake_vs_estimate_ci, p.fake_vs_genuine_ci
    if p.where == "inproc":  # the estimate is the fill passes' (unpaired, the same decode): only shown
        est = None
    if p.estimate_verdict == "disagree" and est is not None and est.value > 1:
        if prompt_ns != [only_new]:
            out.append(
                f"fake {est.fmt(pct=True)} vs the estimate, and prompt_n {prompt_ns} != only_new {only_new}: "
                "the only-new branch did not fire"
            )
        else:
            out.append(
                f"fake {est.fmt(pct=True)} vs the estimate although prompt_n == only_new: per-request "
                "server overhead (compare fake/genuine, which shares it)"
            )
    if p.estimate_verdict == "disagree" and est is not None and est.value < 1:
        out.append(
            f"fake {est.fmt(pct=True)} vs the estimate: check that both memory children report "
            f"seq_pos_max == L-1 (the hybrid takes the min) and that the attended KV is padded to "
            f"{p.n_kv_padded} >= L+new"
        )
    if p.genuine_verdict == "disagree" and gen is not None:
        out.append(
            f"fake {gen.fmt(pct=True)} vs the genuine hit: the fabricated prefix does not do the hit's work; "
            f"check prompt_n {prompt_ns} == {only_new}, both children's seq_pos_max == L-1, and the padded "
            f"n_kv {p.n_kv_padded}"
        )
    checks = [("fake/genuine", gen, p.genuine_verdict), ("genuine/plain", p.genuine_vs_plain_ci, p.plain_verdict)]
    if p.where == "server":  # in one process the estimate does not narrow with reps
        checks.append(("fake/estimate", est, p.estimate_verdict))
    if p.plain_verdict == "disagree" and p.genuine_vs_plain_ci is not None:
        out.append(
            f"genuine/plain {p.genuine_vs_plain_ci.fmt(pct=True)}: the restored state does not cost what decoding L "
            "in the same sequence does; check that the sequence's max position was L-1 before the new tokens"
        )
    for name, iv, v in checks:
        if v == "undecided" and iv is not None:
            more = reps_to_decide(iv, tol)
            if more is None:
                hint = "it sits on the bound: no number of reps decides it at this tolerance"
            elif more > 1000:
                hint = "far too noisy to decide at this tolerance (over 1000 reps); check the host's noise figures"
            else:
                hint = f"about {more} reps would likely decide it"
            out.append(f"{name} {iv.fmt(pct=True)} straddles 1 +- {tol:.0%} after {iv.n} reps: {hint}")
    return out
