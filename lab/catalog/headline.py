"""The answer the lab exists for, per host, model and engine: what an agent step of `new` tokens after L cached
tokens costs with the cache and re-prefilled, the speedup, and from the newest profile where the time goes at the
deepest depth and where attention overtakes the MoE FFN.

Both numbers of a step, and so its speedup, come from one place, named on its line: through llama-server where
the sweep ran direct baseline reps (`--arms baseline,...`: each prefills L + new from nothing, paired by rep with
the fake arm), else in one process (libllama, the engine alone), where each fill pass times the step after its
real prefix and the prefix sum to L + new, paired by fill pass. The default is the second: a direct baseline at
every rep is the expensive control (on the reference host's rates, five reps of a 4k-40k grid cost 4.2 h against
13 min for a fill pass). The server's fake-prefix step, what an agent pays, stands beside it with the server's
per-request share. Every line and table names the llama.cpp it was measured on.

One record feeds every printer (`headline`: its lines and its tables' cells): `lab sweep`'s closing table,
`lab catalog headline`, the top of reports/index.html.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from lab.catalog.newest import newest, newest_run
from lab.core.releases import engine_label
from lab.core.schemas import BANDS, BandDepth, Interval, ProfileSummary, SweepPoint, cell

SERVER = "through llama-server"
ENGINE_ALONE = "in one process (libllama, no server)"


class HeadlineStep(BaseModel):
    host: str
    model: str
    run_id: str
    L: int
    new: int
    engine: str = ""  # the llama.cpp commit the run measured
    image: str | None = None
    place: str = SERVER  # where both numbers and the speedup were measured
    paired_by: str = "rep"  # what the speedup's ratios are paired by: rep (server), fill pass (in one process)
    cached_ms: Interval | None = None  # the step with the first L tokens cached
    reprefill_ms: Interval | None = None  # all L + new prefilled from nothing, in the same place
    speedup: Interval | None = None  # reprefill / cached, paired by `paired_by`
    server_ms: Interval | None = None  # the fake-prefix step through llama-server, as an agent pays it
    server_share: Interval | None = None  # through the server / in one process, the same cached step, paired by rep

    @property
    def group(self) -> tuple[str, str, str, str]:
        return (self.host, self.model, self.engine, self.place)


class HeadlineProfile(BaseModel):
    host: str
    model: str
    run_id: str
    depth: int
    engine: str = ""
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


def steps_of(points: list[SweepPoint], host: str, model: str, run_id: str, engine: str = "") -> list[HeadlineStep]:
    """A sweep's server points as the headline's steps, each from one place: through the server with direct
    baseline reps, else in one process from the fill passes."""
    steps = []
    for p in sorted(points, key=lambda p: (p.image or "", p.L, p.new)):
        step = HeadlineStep(
            host=host,
            model=model,
            run_id=run_id,
            L=p.L,
            new=p.new,
            engine=engine,
            image=p.image,
            server_ms=p.fake.median,
            server_share=p.genuine_vs_estimate_ci,
        )
        if p.baseline_source == "direct reps":
            step.cached_ms, step.reprefill_ms = p.fake.median, p.baseline.median
            step.speedup = p.fake_vs_baseline_ci.inverse() if p.fake_vs_baseline_ci else None
        else:
            step.place, step.paired_by = ENGINE_ALONE, "fill pass"
            step.cached_ms, step.reprefill_ms, step.speedup = p.fill_step_ci, p.baseline_fill.median, p.fill_speedup_ci
        steps.append(step)
    return steps


def profile_of(
    bands: list[BandDepth], summary: ProfileSummary, host: str, model: str, run_id: str, engine: str = ""
) -> HeadlineProfile:
    deepest = max(r.depth for r in bands)
    at = {r.band: r.share for r in bands if r.depth == deepest}
    return HeadlineProfile(
        host=host,
        model=model,
        run_id=run_id,
        depth=deepest,
        engine=engine,
        shares={b: at.get(b, 0.0) for b in BANDS},
        crossover=summary.crossover_ci,
        crossover_note=summary.crossover_note,
        predicted_crossover=summary.predicted_crossover_depth,
        time_crossover=summary.time_crossover_ci,
    )


def who(host: str, model: str, engine: str) -> str:
    """`nuc16 / model.gguf, llama.cpp 465b1f0e7 (pin)`: whose answer a line or table is."""
    return f"{host} / {model}, {engine_label(engine)}"


def summary_lines(steps: list[HeadlineStep], profiles: list[HeadlineProfile]) -> list[str]:
    """Per host, model, engine and place: the deepest text step's cost with and without the cache and the speedup,
    the server's step beside it; then where the time goes."""
    out = []
    for group in dict.fromkeys(s.group for s in steps):
        text = [s for s in steps if s.group == group and s.image is None and s.cached_ms and s.reprefill_ms]
        if not text:
            continue
        s = max(text, key=lambda s: (s.L, -s.new))
        assert s.cached_ms is not None and s.reprefill_ms is not None
        out.append(
            f"{who(*group[:3])}, {s.place}: a {s.new}-token step after {s.L:,} cached tokens costs "
            f"{s.cached_ms.fmt(digits=1)} ms with the cache, {s.reprefill_ms.fmt(digits=1)} ms re-prefilled"
        )
        if s.speedup:
            out.append(f"the cache makes that step {s.speedup.fmt(digits=1)} times faster (paired by {s.paired_by})")
        if s.place != SERVER and s.server_ms:
            share = f", the server's per-request share {s.server_share.fmt(pct=True)}" if s.server_share else ""
            out.append(f"{SERVER}, the cached step costs {s.server_ms.fmt(digits=1)} ms (fake prefix){share}")
    for p in profiles:
        top = sorted(p.shares.items(), key=lambda kv: -kv[1])[:3]
        shares = f"at depth {p.depth:,}: " + ", ".join(f"{b} {v:.0%}" for b, v in top) + " of prefill time; "
        if p.crossover is None and p.crossover_note.startswith("not reached"):
            not_yet = f"attention has not overtaken the MoE FFN by depth {p.depth:,} (predicted: {p.predicted_text})"
            out.append(f"{who(p.host, p.model, p.engine)}: {shares}{not_yet}")
        else:
            crossover = f"attention overtakes the MoE FFN at depth {p.crossover_text}"
            out.append(f"{who(p.host, p.model, p.engine)}: {shares}{crossover} (predicted: {p.predicted_text})")
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


STEPS_TITLE = "an agent step's prefill {place}: medians and speedup [95% interval]"
STEPS_NOTE = (
    "With the cache: the first L tokens cached; re-prefilled: all L + new tokens prefilled from nothing; speedup: "
    "re-prefilled / with the cache. Through llama-server: the fake-prefix arm and the direct baseline, paired by "
    "rep. In one process (libllama, no server): each fill pass's step after its real depth-L prefix and its "
    "prefix sum to L + new, paired by fill pass; the lines above add the server's fake-prefix step, what an agent "
    "pays. "
    "The newest complete sweep per host, model and engine."
)
PROFILES_TITLE = "where a prefill chunk's time goes at depth {depth:,} (share per band)"
PROFILES_NOTE = (
    "Share of a prefill chunk's time per band at the deepest profiled depth, and the depth at which attention "
    "overtakes the MoE FFN, measured (the line above adds the prediction in time from the profile's own per-band "
    "rates, and from FLOPs). The newest complete profile per host, model and engine."
)


def headline(steps: list[HeadlineStep], profiles: list[HeadlineProfile]) -> Headline:
    """The headline's record, which the terminal and the page format: per host, model and engine the step with the
    cache, re-prefilled and the speedup, and where the time goes (a table only where there are rows)."""
    groups = dict.fromkeys(s.group for s in steps)
    tables = [steps_table([s for s in steps if s.group == g]) for g in groups]
    tables += [profile_table(p) for p in profiles]
    return Headline(tuple(summary_lines(steps, profiles)), tuple(tables))


def steps_table(steps: list[HeadlineStep]) -> HeadlineTable:
    """One host, model, engine and place's steps by (L, new): with the cache, re-prefilled, the speedup (the
    server's step, when the place is one process, is in the lines and the sweep's own table)."""
    columns: tuple[str, ...] = ("L", "new", "with the cache (ms)", "re-prefilled (ms)", "speedup")
    rows: list[tuple[str, ...]] = []
    for s in steps:
        new = f"{s.new} + {s.image}" if s.image else str(s.new)
        rows.append((str(s.L), new, ms_cell(s.cached_ms), ms_cell(s.reprefill_ms), cell(s.speedup, 1)))
    title = f"{who(*steps[0].group[:3])}: {STEPS_TITLE.format(place=steps[0].place)}"
    return HeadlineTable(title, STEPS_NOTE, columns, tuple(rows))


def ms_cell(iv: Interval | None) -> str:
    """ms to about 4 significant digits: `1965 [1849, 2006]`, `48.3 [46.2, 51.6]`."""
    return cell(iv, 0 if iv is None or iv.value >= 100 else 1)


def profile_table(p: HeadlineProfile) -> HeadlineTable:
    """One host, model and engine's newest profile: each band's share at its deepest depth, the crossover."""
    columns: tuple[str, ...] = (*BANDS, "crossover (measured)")
    row = (*(f"{p.shares[b]:.0%}" for b in BANDS), p.crossover_text)
    title = f"{who(p.host, p.model, p.engine)}: {PROFILES_TITLE.format(depth=p.depth)}"
    return HeadlineTable(title, PROFILES_NOTE, columns, (row,))


def catalog_headline(catalog_dir: Path) -> tuple[list[HeadlineStep], list[HeadlineProfile]]:
    """The newest complete sweep and profile run per host, model and engine in the catalog."""
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
        model = Path(r.model_path).name
        steps += steps_of([unflatten(x, SweepPoint) for x in rows], r.host, model, r.run_id, r.engine_commit)
    profiles: list[HeadlineProfile] = []
    if bands.empty or summaries.empty:
        return steps, profiles
    for r in newest(records, "profile"):
        b = [unflatten(x, BandDepth) for x in bands[bands["run_id"] == r.run_id].to_dict("records")]
        s = [unflatten(x, ProfileSummary) for x in summaries[summaries["run_id"] == r.run_id].to_dict("records")]
        if b and s:
            profiles.append(profile_of(b, s[0], r.host, Path(r.model_path).name, r.run_id, r.engine_commit))
    return steps, profiles


def newest_profile(runs_dir: Path, model_sha256: str, host: str, engine_commit: str) -> HeadlineProfile | None:
    """The newest complete profile of this model on this host and engine (for `lab sweep`'s closing table)."""
    from lab.catalog.folders import IngestError, current_manifest
    from lab.catalog.ingest import read_spec, run_record
    from lab.catalog.tables import SPEC_BY_NAME, unflatten

    d = newest_run(runs_dir, "profile", model_sha256, host, engine_commit)
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
    return profile_of(bands, summary[0], host, Path(r.model_path).name, r.run_id, r.engine_commit)


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
                f"{who(r.host, Path(r.model_path).name, r.engine_commit)}: conversation {t.task_id} "
                f"({t.n_steps} steps), prefill {arms} "
                f"{cell(t.optimum_s, 2)} s; today's server realises {cell(t.realised, share=True)} of the optimum's "
                "saving"
            )
    return out
