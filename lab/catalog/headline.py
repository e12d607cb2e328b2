"""The answer the lab exists for, per host and model: what an agent step of `new` tokens after L cached tokens
costs with the cache (the fake prefix) and re-prefilled (the baseline), the speedup, and from the newest
profile where the time goes at the deepest depth and where attention overtakes the MoE FFN.

One record feeds every printer (`headline`: its lines and its tables' cells): `lab sweep`'s closing table,
`lab catalog headline`, the top of reports/index.html.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from lab.catalog.newest import newest, newest_run
from lab.core.schemas import BANDS, BandDepth, Interval, ProfileSummary, SweepPoint, cell


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


@dataclass(frozen=True)
class HeadlineTable:
    """One of the headline's tables as every printer shows it: what it is in a line (the terminal's title), what
    its cells mean (the page's note beneath it), its columns, and its rows of cells as text."""

    title: str
    note: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Headline:
    """The answer per host and model: its lines in words (summary_lines), then its tables."""

    lines: tuple[str, ...]
    tables: tuple[HeadlineTable, ...]


STEPS_TITLE = (
    "an agent step's prefill: the first L tokens cached (fake prefix) vs re-prefilled (baseline); medians and "
    "speedup [95% interval]"
)
STEPS_NOTE = (
    "Medians with their 95% interval; with the cache: the fake prefix (the first L tokens cached); re-prefilled: "
    "the baseline (all L + new tokens prefilled); speedup: re-prefilled / with the cache, paired by rep. The newest "
    "complete sweep per host and model."
)
PROFILES_TITLE = "where a prefill chunk's time goes at the deepest profiled depth (newest profile)"
PROFILES_NOTE = (
    "Share of a prefill chunk's time per band at the deepest profiled depth, and the depth at which attention "
    "overtakes the MoE FFN (measured; predicted in time from the profile's own per-band rates, and from FLOPs). The "
    "newest complete profile per host and model."
)


def headline(steps: list[HeadlineStep], profiles: list[HeadlineProfile]) -> Headline:
    """The headline's record, which the terminal and the page format: per host and model the step with the cache,
    re-prefilled and the speedup, and where the time goes (a table only where there are rows)."""
    tables = ([steps_table(steps)] if steps else []) + ([profiles_table(profiles)] if profiles else [])
    return Headline(tuple(summary_lines(steps, profiles)), tuple(tables))


def steps_table(steps: list[HeadlineStep]) -> HeadlineTable:
    """Per host, model and (L, new): with the cache, re-prefilled, the speedup."""
    columns = ("host", "model", "L", "new", "with the cache (ms)", "re-prefilled (ms)", "speedup")
    rows: list[tuple[str, ...]] = []
    for s in steps:
        new = f"{s.new} + {s.image}" if s.image else str(s.new)
        times = (cell(s.cached_ms, 1), cell(s.reprefill_ms, 1), cell(s.speedup, 1))
        rows.append((s.host, s.model, str(s.L), new, *times))
    return HeadlineTable(STEPS_TITLE, STEPS_NOTE, columns, tuple(rows))


def profiles_table(profiles: list[HeadlineProfile]) -> HeadlineTable:
    """Per host and model: each band's share at the deepest profiled depth, the crossover measured and predicted."""
    columns: tuple[str, ...] = ("host", "model", "depth", *BANDS, "crossover (measured)", "predicted")
    rows: list[tuple[str, ...]] = []
    for p in profiles:
        shares = (f"{p.shares[b]:.0%}" for b in BANDS)
        rows.append((p.host, p.model, str(p.depth), *shares, p.crossover_text, p.predicted_text))
    return HeadlineTable(PROFILES_TITLE, PROFILES_NOTE, columns, tuple(rows))


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
    from lab.catalog.folders import IngestError, current_manifest
    from lab.catalog.ingest import read_spec, run_record
    from lab.catalog.tables import SPEC_BY_NAME, unflatten

    d = newest_run(runs_dir, "profile", model_sha256, host)
    if d is None:
        return None
    try:
        r = run_record(d, current_manifest(d))
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
