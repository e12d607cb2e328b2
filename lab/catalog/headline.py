"""The answer the lab exists for, per host and model: what an agent step of `new` tokens after L cached tokens
costs with the cache (the fake prefix) and re-prefilled (the baseline), the speedup, and from the newest
profile where the time goes at the deepest depth and where attention overtakes the MoE FFN.

One record feeds every printer: `lab sweep`'s closing table, `lab catalog headline`, the top of
reports/index.html.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from lab.catalog.newest import newest, newest_run
from lab.core.schemas import BANDS, BandDepth, Interval, ProfileSummary, SweepPoint

if TYPE_CHECKING:
    pass


class HeadlineStep(BaseModel):
    host: str
    model: str
    run_id: str
    L: int
    new: int
    image: str | None = None
    cached_ms: Interval | None = None  # the fake-prefix step: prefill with the first L tokens cached
    reprefill_ms: Interval | None = None  # the baseline: all L + new prefilled
    speedup: Interval | None = None  # reprefill / cached, paired by rep


class HeadlineProfile(BaseModel):
    host: str
    model: str
    run_id: str
    depth: int
    shares: dict[str, float]  # band -> share of the chunk's time at `depth`
    crossover: Interval | None = None
    crossover_note: str = ""
    predicted_crossover: float | None = None  # from FLOPs
    time_crossover: Interval | None = None  # predicted in time from the profile's own rates

    @property
    def crossover_text(self) -> str:
        return self.crossover.fmt(digits=0) if self.crossover else self.crossover_note or "-"

    @property
    def predicted_text(self) -> str:
        time = self.time_crossover.fmt(digits=0) if self.time_crossover else "-"
        flops = "-" if self.predicted_crossover is None else f"{self.predicted_crossover:,.0f}"
        return f"{time} in time, {flops} from FLOPs"


def steps_of(points: list[SweepPoint], host: str, model: str, run_id: str) -> list[HeadlineStep]:
    return [
        HeadlineStep(
            host=host,
            model=model,
            run_id=run_id,
            L=p.L,
            new=p.new,
            image=p.image,
            cached_ms=p.fake.median,
            reprefill_ms=p.baseline.median,
            speedup=p.fake_vs_baseline_ci.inverse() if p.fake_vs_baseline_ci else None,
        )
        for p in sorted(points, key=lambda p: (p.image or "", p.L, p.new))
    ]


def profile_of(bands: list[BandDepth], summary: ProfileSummary, host: str, model: str, run_id: str) -> HeadlineProfile:
    deepest = max(r.depth for r in bands)
    at = {r.band: r.share for r in bands if r.depth == deepest}
    return HeadlineProfile(
        host=host,
        model=model,
        run_id=run_id,
        depth=deepest,
        shares={b: at.get(b, 0.0) for b in BANDS},
        crossover=summary.crossover_ci,
        crossover_note=summary.crossover_note,
        predicted_crossover=summary.predicted_crossover_depth,
        time_crossover=summary.time_crossover_ci,
    )


def summary_lines(steps: list[HeadlineStep], profiles: list[HeadlineProfile]) -> list[str]:
    """Three lines: the deepest text step's cost with and without the cache, the speedup, where time goes."""
    out = []
    text = [s for s in steps if s.image is None and s.cached_ms and s.reprefill_ms]
    if text:
        s = max(text, key=lambda s: (s.L, -s.new))
        out.append(
            f"{s.host} / {s.model}: a {s.new}-token step after {s.L:,} cached tokens costs "
            f"{s.cached_ms.fmt(digits=1) if s.cached_ms else '-'} ms with the cache, "
            f"{s.reprefill_ms.fmt(digits=1) if s.reprefill_ms else '-'} ms re-prefilled"
        )
        if s.speedup:
            out.append(f"the cache makes that step {s.speedup.fmt(digits=1)} times faster")
    for p in profiles[:1]:
        top = sorted(p.shares.items(), key=lambda kv: -kv[1])[:3]
        shares = f"at depth {p.depth:,}: " + ", ".join(f"{b} {v:.0%}" for b, v in top) + " of prefill time; "
        if p.crossover is None and p.crossover_note.startswith("not reached"):
            not_yet = f"attention has not overtaken the MoE FFN by depth {p.depth:,} (predicted: {p.predicted_text})"
            out.append(shares + not_yet)
        else:
            out.append(f"{shares}attention overtakes the MoE FFN at depth {p.crossover_text}")
    return out


def catalog_headline(catalog_dir: Path) -> tuple[list[HeadlineStep], list[HeadlineProfile]]:
    """The newest complete sweep and profile run per (host, model) in the catalog."""
    from lab.catalog.tables import RunRecord, load_table, rows_at, unflatten

    runs = load_table(catalog_dir, "runs")
    if runs.empty:
        return [], []
    records = [unflatten(r, RunRecord) for r in runs.to_dict("records")]
    points, bands, summaries = (
        load_table(catalog_dir, t) for t in ("sweep_points", "profile_bands", "profile_summary")
    )
    points = rows_at(points, "server")  # the headline's step: through the server, as an agent pays it
    steps: list[HeadlineStep] = []
    measured = set(points["run_id"]) if not points.empty else set()
    for r in newest((r for r in records if r.run_id in measured), "sweep"):
        rows = points[points["run_id"] == r.run_id].to_dict("records")
        steps += steps_of([unflatten(x, SweepPoint) for x in rows], r.host, Path(r.model_path).name, r.run_id)
    profiles: list[HeadlineProfile] = []
    if bands.empty or summaries.empty:
        return steps, profiles
    for r in newest(records, "profile"):
        b = [unflatten(x, BandDepth) for x in bands[bands["run_id"] == r.run_id].to_dict("records")]
        s = [unflatten(x, ProfileSummary) for x in summaries[summaries["run_id"] == r.run_id].to_dict("records")]
        if b and s:
            profiles.append(profile_of(b, s[0], r.host, Path(r.model_path).name, r.run_id))
    return steps, profiles


def newest_profile(runs_dir: Path, model_sha256: str, host: str) -> HeadlineProfile | None:
    """The newest complete profile run folder of this model on this host (for `lab sweep`'s closing table)."""
    from lab.catalog.ingest import IngestError, read_manifest, read_spec, run_record
    from lab.catalog.tables import SPEC_BY_NAME, unflatten

    d = newest_run(runs_dir, "profile", model_sha256, host)
    if d is None:
        return None
    r = run_record(d, read_manifest(d))
    try:
        bands = [unflatten(x, BandDepth) for x in read_spec(d, SPEC_BY_NAME["profile_bands"])]
        summary = [unflatten(x, ProfileSummary) for x in read_spec(d, SPEC_BY_NAME["profile_summary"])]
    except IngestError:
        return None  # a damaged run is the catalog's to report, not the sweep's
    if not bands or not summary:
        return None
    return profile_of(bands, summary[0], host, Path(r.model_path).name, r.run_id)


def conversation_lines(catalog_dir: Path) -> list[str]:
    """Per task of the newest conversation replay per (host, model): no cache / today's server / optimum, and the
    share of the optimum's saving today's server realises, each with its interval."""
    from lab.catalog.tables import RunRecord, load_table, unflatten
    from lab.core.schemas import ConversationTaskResult, cell

    runs, tasks = load_table(catalog_dir, "runs"), load_table(catalog_dir, "conversation_tasks")
    if runs.empty or tasks.empty:
        return []
    out = []
    for r in newest([unflatten(x, RunRecord) for x in runs.to_dict("records")], "conversation"):
        for x in tasks[tasks["run_id"] == r.run_id].to_dict("records"):
            t = unflatten(x, ConversationTaskResult)
            arms = f"no cache {cell(t.no_cache_s, 2)} s / today's server {cell(t.today_s, 2)} s / optimum"
            out.append(
                f"{r.host} / {Path(r.model_path).name}: conversation {t.task_id} ({t.n_steps} steps), prefill {arms} "
                f"{cell(t.optimum_s, 2)} s; today's server realises {cell(t.realised, share=True)} of the optimum's "
                "saving"
            )
    return out
