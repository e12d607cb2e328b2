"""The fake-prefix sweep: per (L, new) point, baseline / fake / genuine hit interleaved and
repeated, against the arithmetic estimate opt_prefill = only_new / prefill_tps(L).

Resumable at point granularity: a point's samples and its summary row are appended together when the
point is done, so an interrupted sweep resumes with no duplicated or lost point.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lab.engine.contract import ARMS, Arm, ArmResult, ContractClient, Step, filler_tokens, text_step
from lab.engine.imagegrid import ImageGeometry
from lab.engine.media import synthetic_image_step
from lab.engine.models import resolve_projector
from lab.errors import LabError
from lab.experiments.prefill_tps import measure_prefill_tps
from lab.experiments.protocol import Experiment, Outcome, Parts, Session, progress_bar, run_experiment
from lab.headline import newest_profile, steps_of, summary_lines
from lab.presenters import headline_tables
from lab.runs import RunFolder, utc_now
from lab.schemas import KV_PAD, ArmStats, Interval, PrefillTps, SweepPoint, SweepSample, ggml_pad
from lab.settings import ServerSettings, Settings, SweepSettings
from lab.stats import arm_stats, median_interval, paired_ratio, reps_to_decide, verdict

SAMPLES, POINTS, TPS = "samples", "points", "prefill_tps"


def point_id(L: int, new: int, image: str | None = None) -> str:
    return f"L{L}_n{new}" + (f"_img{image}" if image else "")


@dataclass(frozen=True)
class GridPoint:
    L: int
    new: int
    image: str | None = None  # WxH of the screenshot in the new part

    @property
    def id(self) -> str:
        return point_id(self.L, self.new, self.image)

    @property
    def size(self) -> tuple[int, int]:
        assert self.image is not None
        w, h = self.image.split("x")
        return int(w), int(h)


def grid(params: SweepSettings) -> list[GridPoint]:
    images = [None if i == "none" else i for i in params.images]
    return [GridPoint(L, new, img) for img in images for L in params.Ls for new in params.news]


def image_counts(p: GridPoint, geom: ImageGeometry | None) -> tuple[int | None, int | None]:
    """(image tokens, positions) of a point's screenshot; (None, None) for a text step."""
    if p.image is None:
        return None, None
    assert geom is not None, "an image point needs the projector's geometry"
    return geom.tokens(*p.size)


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
        t_utc=utc_now(),
    )


def server_arm_stats(samples: list[SweepSample], arm: str, key: str) -> ArmStats:
    """The prompt_ms of one server arm's timed requests (lab.stats.arm_stats)."""
    ms = [s.prompt_ms for s in samples if s.arm == arm and s.ok and s.prompt_ms is not None]
    return arm_stats(ms, sum(1 for s in samples if s.arm == arm and not s.ok), key=f"{key}/{arm}")


def summarize_point(
    p: GridPoint, samples: list[SweepSample], tps: list[PrefillTps], tol: float, geom: ImageGeometry | None = None
) -> SweepPoint:
    stats = {arm: server_arm_stats(samples, arm, p.id) for arm in ARMS}
    by_rep = {arm: {s.rep: s.prompt_ms for s in samples if s.arm == arm and s.ok and s.prompt_ms} for arm in ARMS}
    # image steps: the estimate adds the vision encode explicitly (the fake arm's, per rep)
    encode = {s.rep: s.encode_ms for s in samples if s.arm == "fake" and s.ok and s.encode_ms is not None}
    est_by_rep = {t.rep: t.avg_ms + encode.get(t.rep, 0.0) for t in tps if t.rep is not None}
    bench_ms = statistics.median(t.avg_ms for t in tps) if tps else None
    only_new = tps[0].chunk if tps else p.new  # image steps: image tokens + text tokens
    img = image_counts(p, geom)
    encode_ci = median_interval(list(encode.values()), key=f"{p.id}/encode")
    lm = [by_rep["fake"][r] - e for r, e in encode.items() if r in by_rep["fake"]]
    lm_ci = median_interval(lm, key=f"{p.id}/lm")
    vs_est = paired_ratio(by_rep["fake"], est_by_rep, key=f"{p.id}/fake/estimate")
    vs_gen = paired_ratio(by_rep["fake"], by_rep["genuine"], key=f"{p.id}/fake/genuine")
    vs_base = paired_ratio(by_rep["fake"], by_rep["baseline"], key=f"{p.id}/fake/baseline")
    verdicts = {"genuine": verdict(vs_gen, tol), "estimate": verdict(vs_est, tol)}
    undecided = [reps_to_decide(iv, tol) for iv, v in ((vs_gen, verdicts["genuine"]), (vs_est, verdicts["estimate"]))
                 if v == "undecided"]  # fmt: skip
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
        prefill_tps=only_new / bench_ms * 1e3 if bench_ms else None,
        # only_new / prefill_tps(L) = the chunk's time at depth L (+ the encode for an image step)
        opt_prefill_ms=bench_ms + (encode_ci.value if encode_ci else 0.0) if bench_ms is not None else None,
        fake_vs_estimate=vs_est.value - 1 if vs_est else None,
        fake_vs_genuine=vs_gen.value - 1 if vs_gen else None,
        fake_vs_baseline=vs_base.value if vs_base else None,
        fake_vs_estimate_ci=vs_est,
        estimate_ci=median_interval(list(est_by_rep.values()), key=f"{p.id}/estimate"),
        fake_vs_genuine_ci=vs_gen,
        fake_vs_baseline_ci=vs_base,
        genuine_verdict=verdicts["genuine"],
        estimate_verdict=verdicts["estimate"],
        reps=len({s.rep for s in samples} | {t.rep for t in tps if t.rep is not None}),
        reps_to_decide=max((n for n in undecided if n is not None), default=None),
        baseline=stats["baseline"],
        fake=stats["fake"],
        genuine=stats["genuine"],
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


def point_seed(p: GridPoint, seed: int) -> int:
    return seed * 1_000_003 + p.L


def point_text_step(p: GridPoint, seed: int, n_vocab: int) -> Step:
    """The deterministic filler step of a text point: the same token ids for every arm, server or in-process."""
    base = point_seed(p, seed)
    prefix = filler_tokens(p.L, seed=base, n_vocab=n_vocab)
    return text_step(prefix, filler_tokens(p.new, seed=base + p.new + 1, n_vocab=n_vocab))


def measure_point(
    client: ContractClient,
    p: GridPoint,
    sw: SweepSettings,
    n_vocab: int,
    bench: Callable[[GridPoint, int], PrefillTps],
    on_sample: Callable[[], None],
    geom: ImageGeometry | None = None,
) -> tuple[list[SweepSample], list[PrefillTps], SweepPoint]:
    """The arms and the llama-bench estimate of one point, one interleaved rep after another in a rotating order
    (no arm always goes first; drift on a shared machine hits every arm and the estimate alike), until the
    point is decided (after at least min_reps) or max_reps is reached."""
    if p.image:
        assert geom is not None
        step = synthetic_image_step(client.srv, geom, p.L, p.new, p.size, point_seed(p, sw.seed) + p.new)
    else:
        step = point_text_step(p, sw.seed, n_vocab)
    samples: list[SweepSample] = []
    tps: list[PrefillTps] = []
    slots: list[Arm | None] = [a for a in ARMS if a in sw.arms]
    if "estimate" in sw.arms:
        slots.append(None)  # None: the llama-bench estimate sample
    for rep in range(sw.max_reps):
        for arm in slots[rep % len(slots) :] + slots[: rep % len(slots)]:
            if arm == "baseline" and sw.baseline_reps is not None and rep >= sw.baseline_reps:
                continue
            if arm is None:
                tps.append(bench(p, rep))
            else:
                r = client.run_arm(arm, step)
                if not r.ok and client.died(r):
                    srv = client.srv
                    raise ServerCrashed(
                        f"llama-server died during {p.id} {arm} rep {rep} (exit {srv.proc and srv.proc.returncode})"
                        f"; see {srv.log_path}"
                    )
                samples.append(sample_row(p, rep, r, geom))
            on_sample()
        point = summarize_point(p, samples, tps, sw.tolerance, geom)
        if rep + 1 >= sw.min_reps and decided(point, sw):
            break
    return samples, tps, point


class ServerCrashed(LabError):
    pass


def done_points(run: RunFolder) -> dict[str, SweepPoint]:
    return run.finished_points(POINTS, SweepPoint, [(SAMPLES, SweepSample), (TPS, PrefillTps)])


class Sweep(Experiment):
    """The fake-prefix sweep over the grid L x new (x screenshot sizes)."""

    name = "sweep"

    def __init__(self) -> None:
        self.projector: Path | None = None
        self.geometry: ImageGeometry | None = None
        self.points: list[SweepPoint] = []

    def params(self, settings: Settings) -> dict[str, Any]:
        return {
            "sweep": settings.sweep.model_dump(mode="json"),
            "server": settings.server.model_dump(mode="json"),
            "model": str(settings.model) if settings.model else None,
            "mmproj": str(settings.mmproj) if settings.mmproj else None,
        }

    def restore(self, settings: Settings, run: RunFolder) -> Settings:
        params = run.manifest().params
        return settings.model_copy(
            update={
                "sweep": SweepSettings.model_validate(params["sweep"]),
                "server": ServerSettings.model_validate(params["server"]),
                "model": Path(params["model"]) if params.get("model") else None,
                "mmproj": Path(params["mmproj"]) if params.get("mmproj") else None,
            }
        )

    def prepare(self, settings: Settings, parts: Parts) -> None:
        if any(p.image for p in grid(settings.sweep)):
            self.projector = resolve_projector(settings)  # a missing projector leaves no run folder behind
            self.geometry = ImageGeometry.of_projector(self.projector)

    def measure(self, sess: Session, console: Console) -> Outcome:
        settings, run = sess.settings, sess.run
        params = settings.sweep
        done = done_points(run)
        todo = [p for p in grid(params) if p.id not in done]

        def bench(p: GridPoint, rep: int) -> PrefillTps:
            only_new = p.new + (image_counts(p, self.geometry)[0] or 0)  # image tokens cost like text tokens
            row = measure_prefill_tps(
                sess.target, sess.engine, sess.model, [only_new], [p.L], params.bench_reps,
                settings.server.threads, settings.server.flash_attn, run.path / "logs" / "llama-bench.log",
                cpu_list=settings.server.cpu_list,
            )[0]  # fmt: skip
            return row.model_copy(update={"point": p.id, "rep": rep})

        if todo:
            extra = [*settings.server.extra_args, *(["--mmproj", str(self.projector)] if self.projector else [])]
            with sess.server(extra_args=extra) as srv, progress_bar(console) as progress:
                sess.record_server(srv)
                client = ContractClient(srv)
                n_vocab = srv.n_vocab()
                per_rep = len(params.arms)
                task = progress.add_task("sweep", total=len(todo) * params.min_reps * per_rep)
                for i, p in enumerate(todo):
                    progress.update(task, description=f"L={p.L} new={p.new}" + (f" img={p.image}" if p.image else ""))
                    started = time.monotonic()
                    samples, tps, point = measure_point(
                        client, p, params, n_vocab, bench, lambda: progress.advance(task), self.geometry
                    )
                    extra_samples = (point.reps - params.min_reps) * per_rep  # adaptive reps beyond the plan
                    progress.update(task, total=(progress.tasks[0].total or 0) + extra_samples)
                    if i == 0 and len(todo) > 1:
                        took = time.monotonic() - started
                        eta = took * (len(todo) - 1) / 60
                        console.print(f"first point: {took:.1f} s; the other {len(todo) - 1} take about "
                                      f"{eta:.1f} min more (longer if they need more reps)")  # fmt: skip
                    run.append(SAMPLES, samples)
                    run.append(TPS, tps)
                    run.append(POINTS, [point])
                    done[p.id] = point
        self.points = [done[p.id] for p in grid(params)]
        return Outcome()

    def present(self, sess: Session, outcome: Outcome, console: Console) -> None:
        print_summary(console, self.points)
        # the answer: the step with the cache vs re-prefilled, and where the newest profile says time goes
        host = sess.run.manifest().host
        steps = steps_of(self.points, host, sess.model.name, sess.run.path.name)
        profile = newest_profile(sess.settings.runs_dir, sess.parts.model_record.get("sha256", ""), host)
        profiles = [profile] if profile else []
        for t in headline_tables(steps, profiles):
            console.print(t)
        for line in summary_lines(steps, profiles):
            console.print(line, highlight=False)


def run_sweep(settings: Settings, resume: RunFolder | None = None, console: Console | None = None) -> RunFolder:
    return run_experiment(Sweep(), settings, resume, console)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _arm(a: ArmStats) -> str:
    """`12.3 [11.9-12.8]`: the median ms and its 95% interval."""
    if a.median_ms is None:
        return "-"
    if a.median_lo_ms is None or a.median_hi_ms is None or a.n_ok < 2:
        return f"{a.median_ms:.1f}"
    return f"{a.median_ms:.1f} [{a.median_lo_ms:.1f}-{a.median_hi_ms:.1f}]"


def _est(p: SweepPoint) -> str:
    iv = p.estimate_ci
    if p.opt_prefill_ms is None or iv is None or iv.n < 2:
        return _ms(p.opt_prefill_ms)
    return f"{p.opt_prefill_ms:.1f} [{iv.lo:.1f}-{iv.hi:.1f}]"


VERDICT_STYLE = {"agree": "green", "disagree": "red", "undecided": "yellow"}


def _ratio(iv: Interval | None, v: str) -> str:
    if iv is None:
        return "-"
    return f"{iv.fmt(pct=True)} [{VERDICT_STYLE[v]}]{v}[/{VERDICT_STYLE[v]}]"


def summary_table(points: list[SweepPoint], notes: dict[str, int]) -> Table:
    t = Table(
        title="fake-prefix sweep: median prompt_ms per arm [95% interval] vs the estimate only_new / prefill_tps(L)"
        " + encode; ratios paired by rep, with their interval and verdict"
    )
    images = any(p.image for p in points)
    cols = ("L", "new", *(("image", "img tok", "encode") if images else ()), "baseline", "fake", "genuine", "estimate")
    for col in (*cols, "fake/estimate - 1", "fake/genuine - 1", "reps", "note"):
        t.add_column(col, justify="right")
    for p in points:
        enc = p.encode_ci.fmt(digits=0) if p.encode_ci and p.encode_ci.n > 1 else _ms(p.encode_ms)
        img = (p.image or "-", str(p.image_tokens or "-"), enc) if images else ()
        t.add_row(
            str(p.L), str(p.new), *img,
            _arm(p.baseline), _arm(p.fake), _arm(p.genuine), _est(p),
            _ratio(p.fake_vs_estimate_ci, p.estimate_verdict), _ratio(p.fake_vs_genuine_ci, p.genuine_verdict),
            str(p.reps), f"[{notes[p.point]}]" if p.point in notes else "",
        )  # fmt: skip
    return t


def print_summary(console: Console, points: list[SweepPoint]) -> None:
    """The table, then each point's notes under its number, then the verdict counts."""
    noted = [p for p in points if p.diagnostics]
    console.print(summary_table(points, {p.point: i for i, p in enumerate(noted, start=1)}))
    for i, p in enumerate(noted, start=1):
        for d in p.diagnostics:
            console.print(f"[{i}] L={p.L} new={p.new}: {d}", highlight=False)
    for name, attr in (("fake vs genuine hit", "genuine_verdict"), ("fake vs estimate", "estimate_verdict")):
        counts = {v: sum(getattr(p, attr) == v for p in points) for v in VERDICT_STYLE}
        console.print(f"{name}: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n), highlight=False)
