"""What a sweep point's samples say: one row per timed request, each arm's median with its interval, the
ratios paired by rep with their verdicts, when a point is decided, and the notes on what to check."""

from __future__ import annotations

import statistics

from lab.engine.contract import ARMS, ArmResult
from lab.engine.imagegrid import ImageGeometry
from lab.experiments.sweep_grid import GridPoint, image_counts
from lab.fills import fill_values
from lab.runs import utc_now
from lab.schemas import KV_PAD, ArmStats, InprocFill, Interval, PrefillTps, SweepPoint, SweepSample, ggml_pad
from lab.settings import SweepSettings
from lab.stats import arm_stats, median_interval, paired_ratio, reps_to_decide, unpaired_ratio, verdict


def sample_row(p: GridPoint, rep: int, r: ArmResult, geom: ImageGeometry | None = None) -> SweepSample:
    t = r.timings
    img = image_counts(p, geom)
    return SweepSample(
        image=p.image,
        image_tokens=img[0],
        image_positions=img[1],
        encode_ms=r.encode_ms,
        image_decode_ms=r.image_decode_ms,
        point=p.id,
        L=p.L,
        new=p.new,
        arm=r.arm,
        rep=rep,
        ok=r.ok,
        reason=r.reason,
        prompt_ms=t.prompt_ms if t else None,
        prompt_n=t.prompt_n if t else None,
        cache_n=t.cache_n if t else None,
        fake_ms=t.fake_ms if t and r.arm == "fake" else None,
        warm=r.warm,
        t_utc=utc_now(),
    )


def server_arm_stats(samples: list[SweepSample], arm: str, key: str) -> ArmStats:
    """The prompt_ms of one server arm's timed requests (lab.stats.arm_stats)."""
    ms = [s.prompt_ms for s in samples if s.arm == arm and s.ok and s.prompt_ms is not None]
    return arm_stats(ms, sum(1 for s in samples if s.arm == arm and not s.ok), key=f"{key}/{arm}")


def bench_interval(t: PrefillTps) -> Interval:
    """llama-bench's mean chunk ms with a 95% interval from its own reps (normal approximation: it keeps no
    samples we could bootstrap here)."""
    half = 1.96 * t.stddev_ms / max(1, t.reps) ** 0.5
    return Interval(value=t.avg_ms, lo=t.avg_ms - half, hi=t.avg_ms + half, n=max(1, t.reps))


def summarize_point(
    p: GridPoint,
    samples: list[SweepSample],
    tps: list[PrefillTps],
    tol: float,
    geom: ImageGeometry | None = None,
    fills: list[InprocFill] | None = None,
) -> SweepPoint:
    stats = {arm: server_arm_stats(samples, arm, p.id) for arm in ARMS}
    by_rep = {arm: {s.rep: s.prompt_ms for s in samples if s.arm == arm and s.ok and s.prompt_ms} for arm in ARMS}
    # image steps: the estimate adds the vision encode explicitly (the fake arm's, per rep)
    encode = {s.rep: s.encode_ms for s in samples if s.arm == "fake" and s.ok and s.encode_ms is not None}
    est = [t for t in tps if t.rep is not None]  # interleaved estimate samples; rep None: the cross-check
    check = next((t for t in tps if t.rep is None), None)
    est_by_rep = {t.rep: t.avg_ms + encode.get(t.rep, 0.0) for t in est if t.rep is not None}
    est_ms = statistics.median(t.avg_ms for t in est) if est else None
    only_new = est[0].chunk if est else p.new  # image steps: image tokens + text tokens
    img = image_counts(p, geom)
    encode_ci = median_interval(list(encode.values()), key=f"{p.id}/encode")
    lm = [by_rep["fake"][r] - e for r, e in encode.items() if r in by_rep["fake"]]
    lm_ci = median_interval(lm, key=f"{p.id}/lm")
    vs_est = paired_ratio(by_rep["fake"], est_by_rep, key=f"{p.id}/fake/estimate")
    vs_gen = paired_ratio(by_rep["fake"], by_rep["genuine"], key=f"{p.id}/fake/genuine")
    vs_base = paired_ratio(by_rep["fake"], by_rep["baseline"], key=f"{p.id}/fake/baseline")
    vs_plain = paired_ratio(by_rep["genuine"], by_rep["plain"], key=f"{p.id}/genuine/plain")
    verdicts = {"genuine": verdict(vs_gen, tol), "estimate": verdict(vs_est, tol), "plain": verdict(vs_plain, tol)}
    undecided = [
        reps_to_decide(iv, tol)
        for iv, v in ((vs_gen, verdicts["genuine"]), (vs_est, verdicts["estimate"]), (vs_plain, verdicts["plain"]))
        if iv is not None and v == "undecided"
    ]
    warms = sorted({s.warm for s in samples if s.arm == "genuine" and s.warm})
    base_fill = fill_values(fills or [], p.L, only_new)[0]
    if not by_rep["baseline"] and base_fill:  # no direct reps: the fill passes' prefix sums are the baseline
        stats["baseline"] = arm_stats(base_fill, key=f"{p.id}/baseline/fill")
        vs_base = unpaired_ratio(list(by_rep["fake"].values()), base_fill, key=f"{p.id}/fake/baseline/fill")
    point = SweepPoint(
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
        prefill_tps=only_new / est_ms * 1e3 if est_ms else None,
        # only_new / prefill_tps(L) = the chunk's time at depth L (+ the encode for an image step)
        opt_prefill_ms=est_ms + (encode_ci.value if encode_ci else 0.0) if est_ms is not None else None,
        fake_vs_estimate=vs_est.value - 1 if vs_est else None,
        fake_vs_genuine=vs_gen.value - 1 if vs_gen else None,
        fake_vs_baseline=vs_base.value if vs_base else None,
        fake_vs_estimate_ci=vs_est,
        estimate_ci=median_interval(list(est_by_rep.values()), key=f"{p.id}/estimate"),
        fake_vs_genuine_ci=vs_gen,
        fake_vs_baseline_ci=vs_base,
        genuine_verdict=verdicts["genuine"],
        estimate_verdict=verdicts["estimate"],
        genuine_vs_plain_ci=vs_plain,
        plain_verdict=verdicts["plain"],
        bench_check_ci=bench_interval(check) if check is not None else None,
        genuine_warm=",".join(warms),
        reps=len({s.rep for s in samples} | set(est_by_rep)),
        reps_to_decide=max((n for n in undecided if n is not None), default=None),
        baseline=stats["baseline"],
        fake=stats["fake"],
        genuine=stats["genuine"],
        plain=stats["plain"],
        baseline_fill=arm_stats(base_fill, key=f"{p.id}/baseline/fill"),
        baseline_source="direct reps" if by_rep["baseline"] else "fill passes" if base_fill else "",
    )
    point.diagnostics = diagnose(point, samples, tol)
    return point


def decided(point: SweepPoint, sw: SweepSettings) -> bool:
    """Whether a point needs no more reps: the verdicts of what is measured are decided, and the fake/genuine
    interval is as narrow as `sw.target`."""
    if "genuine" in sw.arms:
        iv = point.fake_vs_genuine_ci
        if point.genuine_verdict == "undecided" or iv is None or iv.half_width > sw.target:
            return False
    if "plain" in sw.arms and point.plain_verdict == "undecided":
        return False
    return not ("estimate" in sw.arms and point.estimate_verdict == "undecided")


def diagnose(p: SweepPoint, samples: list[SweepSample], tol: float) -> list[str]:
    """Notes on a point: the checks to make where a verdict is `disagree` (what to look at when the fabricated
    prefix does not do a cache hit's work), how many reps would decide an `undecided` one, and facts (the
    256-column floor, failed samples)."""
    out: list[str] = []
    if not p.measurable:
        out.append(f"L={p.L} is below the {KV_PAD}-column floor: attention reads {p.n_kv_padded} columns anyway")
    failed = [s.reason for s in samples if not s.ok]
    if failed:
        out.append(f"{len(failed)} failed sample(s), excluded: {failed[0]}")
    only_new = p.new + (p.image_tokens or 0)  # an image step also decodes the image's tokens
    prompt_ns = sorted({s.prompt_n for s in samples if s.arm == "fake" and s.prompt_n is not None})
    est, gen = p.fake_vs_estimate_ci, p.fake_vs_genuine_ci
    if p.estimate_verdict == "disagree" and est is not None and est.value > 1:
        if prompt_ns != [only_new]:
            out.append(f"fake {est.fmt(pct=True)} vs the estimate, and prompt_n {prompt_ns} != only_new {only_new}: "
                       "the only-new branch did not fire")  # fmt: skip
        else:
            out.append(f"fake {est.fmt(pct=True)} vs the estimate although prompt_n == only_new: per-request "
                       "server overhead (compare fake/genuine, which shares it)")  # fmt: skip
    if p.estimate_verdict == "disagree" and est is not None and est.value < 1:
        out.append(f"fake {est.fmt(pct=True)} vs the estimate: check that both memory children report "
                   f"seq_pos_max == L-1 (the hybrid takes the min) and that the attended KV is padded to "
                   f"{p.n_kv_padded} >= L+new")  # fmt: skip
    if p.genuine_verdict == "disagree" and gen is not None:
        out.append(f"fake {gen.fmt(pct=True)} vs the genuine hit: the fabricated prefix does not do the hit's work; "
                   f"check prompt_n {prompt_ns} == {only_new}, both children's seq_pos_max == L-1, and the padded "
                   f"n_kv {p.n_kv_padded}")  # fmt: skip
    for name, iv, v in (("fake/genuine", gen, p.genuine_verdict), ("fake/estimate", est, p.estimate_verdict)):
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
