"""The answer said once and honestly (lab.catalog.headline): both numbers of a step from one place, the speedup
only where it was paired, and every line and table naming the llama.cpp it was measured on; a pin run and a newer
release's of one host and model stand side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.catalog.headline import catalog_headline, headline, steps_of
from lab.catalog.ingest import ingest
from lab.core.runs import RunFolder
from lab.core.schemas import ArmStats, Interval, SweepPoint
from lab.core.schemas.raw import SWEEP_POINTS, SWEEP_SAMPLES

pytestmark = pytest.mark.fast

PIN, LATEST = "465b1f0e7", "0c1e57098"


def point(source: str, speedup: float = 40.0) -> SweepPoint:
    fake = ArmStats(median_ms=46.7, median_lo_ms=43.9, median_hi_ms=49.7, n_ok=5)
    base = ArmStats(median_ms=46.7 * speedup, median_lo_ms=46.0 * speedup, median_hi_ms=48.0 * speedup, n_ok=5)
    fill = ArmStats(median_ms=1800.0, median_lo_ms=1790.0, median_hi_ms=1850.0, n_ok=5)
    vs = 1 / speedup
    return SweepPoint(
        point="L4096_n64",
        L=4096,
        new=64,
        n_kv_padded=4352,
        measurable=True,
        fake=fake,
        genuine=fake,
        baseline=base if source == "direct reps" else ArmStats(),
        baseline_fill=fill,
        fake_vs_baseline_ci=Interval(value=vs, lo=vs * 0.95, hi=vs * 1.05, n=5, processes=5),
        fill_step_ci=Interval(value=44.0, lo=43.0, hi=46.0, n=5, processes=5),
        fill_speedup_ci=Interval(value=40.9, lo=39.0, hi=42.0, n=5, processes=5),
        genuine_vs_estimate_ci=Interval(value=1.03, lo=1.02, hi=1.05, n=25, processes=5),
        baseline_source=source,
        where="server",
    )


def test_a_step_takes_both_numbers_from_one_place() -> None:
    (server,) = steps_of([point("direct reps")], "nuc16", "m.gguf", "r1", PIN)
    assert server.place == "through llama-server" and server.paired_by == "rep"
    assert server.cached_ms == point("direct reps").fake.median and server.speedup is not None
    assert server.speedup.value == pytest.approx(40.0)
    # no direct reps (the default): both numbers and the speedup from the fill passes, in one process; the
    # server's step beside them, never divided by the other place's re-prefill
    (alone,) = steps_of([point("")], "nuc16", "m.gguf", "r1", PIN)
    assert alone.place == "in one process (libllama, no server)" and alone.paired_by == "fill pass"
    assert alone.cached_ms is not None and alone.cached_ms.value == 44.0
    assert alone.reprefill_ms is not None and alone.reprefill_ms.value == 1800.0
    assert alone.speedup is not None and alone.speedup.value == 40.9
    lines = headline([alone], []).lines
    assert lines[0].endswith(
        "in one process (libllama, no server): a 64-token step after 4,096 cached tokens "
        "costs 44.0 [43.0, 46.0] ms with the cache, 1800.0 [1790.0, 1850.0] ms re-prefilled"
    )
    assert lines[1] == "the cache makes that step 40.9 [39.0, 42.0] times faster (paired by fill pass)"
    assert lines[2] == (
        "through llama-server, the cached step costs 46.7 [43.9, 49.7] ms (fake prefix), the "
        "server's per-request share +3.0% [+2.0%, +5.0%]"
    )
    (table,) = headline([alone], []).tables  # one place per table: the server's step is in the lines
    assert table.rows[0] == ("4096", "64", "44.0 [43.0, 46.0]", "1800 [1790, 1850]", "40.9 [39.0, 42.0]")


def test_every_line_and_table_names_the_engine_and_the_place() -> None:
    steps = steps_of([point("direct reps")], "nuc16", "m.gguf", "r1", PIN)
    steps += steps_of([point("direct reps", 35.0)], "nuc16", "m.gguf", "r2", LATEST)
    h = headline(steps, [])
    assert [t.title.split(":")[0] for t in h.tables] == [
        "nuc16 / m.gguf, llama.cpp 465b1f0e7 (pin)",
        "nuc16 / m.gguf, llama.cpp 0c1e57098 (latest)",
    ]
    assert all("through llama-server" in t.title for t in h.tables)
    said = [x for x in h.lines if "cached tokens costs" in x]
    assert len(said) == 2 and "(pin), through llama-server" in said[0] and "(latest)" in said[1]
    assert [x for x in h.lines if "times faster" in x] == [
        "the cache makes that step 40.0 [38.1, 42.1] times faster (paired by rep)",
        "the cache makes that step 35.0 [33.3, 36.8] times faster (paired by rep)",
    ]


def sweep_run(root: Path, commit: str, started: str) -> str:
    run = RunFolder.create(root, "sweep", "nuc16", {})
    source = {"commit": commit, "origin": "test", "pinned": commit == PIN}
    run.update(started_utc=started, model={"sha256": "m1", "path": "/models/m.gguf"}, engine={"source": source})
    run.rewrite(SWEEP_POINTS, [point("direct reps")])
    run.rewrite(SWEEP_SAMPLES, [])
    run.complete()
    return run.path.name


def test_the_catalog_keeps_the_newest_answer_per_engine(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    sweep_run(runs, PIN, "2026-12-01T00:00:00Z")
    pin = sweep_run(runs, PIN, "2026-12-02T00:00:00Z")
    latest = sweep_run(runs, LATEST, "2026-12-03T00:00:00Z")
    ingest(runs, tmp_path / "catalog")
    steps, _ = catalog_headline(tmp_path / "catalog")
    assert sorted((s.engine, s.run_id) for s in steps) == sorted([(PIN, pin), (LATEST, latest)])
