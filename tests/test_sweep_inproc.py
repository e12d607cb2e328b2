"""The sweep in both places on the real tiny model (`lab sweep --where both`): in one process every arm's
position check, the fill passes' baseline and estimate, the cache read explained; through the server the same
points and the server's own share per arm; one table family in the catalog, `lab compare` and the chart; and
`lab arms` (the sweep in one process): bad inputs create nothing, SIGTERM resumes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from labcli import lab

from lab.catalog.compare import compare_catalog, compare_runs
from lab.catalog.ingest import ingest
from lab.catalog.tables import load_table
from lab.core.runs import RunFolder
from lab.core.schemas import SweepPoint, SweepSample
from lab.core.schemas.raw import ARMS_SUMMARY, PREFILL_TPS, SWEEP_FILLS, SWEEP_POINTS, SWEEP_SAMPLES
from lab.core.settings import ReportSettings
from lab.reports.arms import arms_chart
from lab.reports.data import catalog_runs

from conftest import interrupt_after_first_row

pytestmark = pytest.mark.engine

LAB = str(Path(sys.executable).parent / "lab")
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def both_run(tmp_path_factory: pytest.TempPathFactory) -> RunFolder:
    runs = tmp_path_factory.mktemp("both") / "runs"
    r = lab(
        "sweep",
        "--Ls",
        "300,700",
        "--news",
        "16",
        "--reps",
        "3",
        "--where",
        "both",
        "--arms",
        "baseline,fake,genuine,plain",
        "--fill-passes",
        "2",
        "--runs-dir",
        str(runs),
    )
    assert r.returncode == 0, r.stderr + r.stdout
    return RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))


def inproc_samples(run: RunFolder) -> list[SweepSample]:
    return [s for s in run.read(SWEEP_SAMPLES) if s.where == "inproc"]


def points_at(run: RunFolder, where: str) -> dict[int, SweepPoint]:
    return {p.L: p for p in run.read(SWEEP_POINTS) if p.where == where}


def test_a_complete_run_checks_every_arms_positions(both_run: RunFolder) -> None:
    assert both_run.ready and both_run.manifest().status == "complete"
    assert "_sweep_" in both_run.path.name
    samples = inproc_samples(both_run)
    assert len(samples) == 2 * 3 * 4 and all(s.ok for s in samples), [s for s in samples if not s.ok]
    for s in samples:
        # baseline starts empty; genuine, plain and fake start the new tokens at depth L
        assert s.pos_max == (-1 if s.arm == "baseline" else s.L - 1), s
        assert s.prompt_ms and s.prompt_ms > 0
        assert (s.prep_ms is not None) == (s.arm in ("fake", "genuine"))
        assert (s.copy_ms is not None and s.blob_bytes is not None) == (s.arm == "genuine")
    fills = both_run.read(SWEEP_FILLS)  # two passes: a segment and a chunk per L
    assert sorted((f.fill_pass, f.kind, f.L) for f in fills) == sorted(
        (n, k, L) for n in range(2) for k in ("fill", "chunk") for L in (300, 700)
    )
    # three reps in three driver processes: the first two made a fill pass each, the third read the depth-L
    # states the first one saved (a read, not a prefill)
    assert {(f.fill_pass, f.process) for f in fills} == {(0, 0), (1, 1)}
    assert {(s.rep, s.process) for s in samples} == {(0, 0), (1, 1), (2, 2)}
    driver_rows = [json.loads(x) for x in (both_run.path / "logs" / "inproc.jsonl").read_text().splitlines()]
    assert sorted(r["L"] for r in driver_rows if r.get("kind") == "saved") == [300, 700]
    assert sorted(r["L"] for r in driver_rows if r.get("kind") == "loaded") == [300, 700]
    points = points_at(both_run, "inproc")
    for p in points.values():
        assert p.reps == 3 and all(getattr(p, a).n_ok == 3 for a in ("baseline", "fake", "genuine", "plain"))
        assert p.baseline_fill.n_ok == 2 and p.baseline_source == "direct reps"
        for iv in (
            p.fake_vs_genuine_ci,
            p.genuine_vs_plain_ci,
            p.restore_step_vs_genuine_ci,
            p.cache_read_share_ci,
            p.restore_vs_memcpy_ci,
            p.restore_prep_ci,
            p.memcpy_ci,
            p.rep_s,
        ):
            assert iv is not None and iv.n == 3 and iv.lo <= iv.value <= iv.hi
        assert p.fake_vs_baseline_ci is not None and p.fake_vs_baseline_ci.hi < 1  # the prefix is not recomputed
        assert p.restore_step_vs_genuine_ci is not None and p.restore_step_vs_genuine_ci.lo > 1  # read + step
        # the blob is what the GGUF says it holds (headers aside)
        assert p.blob_bytes and p.predicted_blob_bytes and abs(p.blob_bytes - p.predicted_blob_bytes) < 1024
    assert points[300].blob_bytes and points[700].blob_bytes and points[300].blob_bytes < points[700].blob_bytes


def test_the_server_side_gives_its_share_per_arm(both_run: RunFolder) -> None:
    server = [s for s in both_run.read(SWEEP_SAMPLES) if s.where == "server"]
    assert len(server) == 2 * 3 * 4 and all(s.ok for s in server), [s for s in server if not s.ok]
    assert {s.arm for s in server} == {"baseline", "fake", "genuine", "plain"}
    assert {s.warm for s in server if s.arm == "genuine"} == {"restore"}
    points = points_at(both_run, "server")
    assert sorted(points) == [300, 700]
    for p in points.values():
        assert all(getattr(p, a).n_ok == 3 for a in ("baseline", "fake", "genuine", "plain"))
        assert set(p.vs_inproc) == {"baseline", "fake", "genuine", "plain"}
        assert all(iv.value > 0 and iv.lo <= iv.value <= iv.hi for iv in p.vs_inproc.values())
        assert p.fake_vs_genuine_ci is not None and p.restore_prep_ci is None  # the cache read: in one process
    m = both_run.manifest()
    assert m.server_config and m.results["driver_meta"]["n_ctx"] == m.params["server"]["ctx_size"]


def test_the_restore_cost_is_explained(both_run: RunFolder) -> None:
    (s,) = both_run.read(ARMS_SUMMARY)
    assert (s.attention_layers, s.recurrent_layers) == (2, 6)  # the tiny qwen35moe: every 4th layer attends
    assert s.bytes_per_cell == pytest.approx(s.predicted_bytes_per_cell, rel=1e-3)
    assert s.fixed_bytes == pytest.approx(s.predicted_fixed_bytes, rel=0.01)
    assert s.restore_ms_per_1k_cells is not None and s.restore_ms_per_1k_cells > 0
    for iv in (
        s.restore_gbps_ci,
        s.memcpy_gbps_ci,
        s.restore_vs_memcpy_ci,
        s.fake_vs_genuine_ci,
        s.genuine_vs_plain_ci,
    ):
        assert iv is not None and iv.n == 6 and iv.value > 0
    assert s.fill_passes == 2 and s.fill_s > 0 and s.rep_s_ci is not None
    assert (both_run.path / "raw" / "driver.cpp").exists()  # the driver's source is kept with its numbers


def test_catalog_compare_and_chart(both_run: RunFolder, tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    result = ingest(both_run.path.parent, catalog)
    assert result.rows["sweep_points"] == 4 and result.rows["sweep_samples"] == 48
    assert result.rows["arms_summary"] == 1 and result.rows["sweep_fills"] == 8
    points = load_table(catalog, "sweep_points")
    assert sorted(points["where"]) == ["inproc", "inproc", "server", "server"]
    server = points[points["where"] == "server"]
    assert json.loads(server["vs_inproc"].iloc[0])["fake"]["n"] == 3
    c = compare_runs(both_run.path, both_run.path)  # a run against itself: every ratio is 1
    assert {r.key[0] for r in c.rows} == {"server", "inproc"}
    assert {r.metric for r in c.rows if r.key[0] == "inproc"} == {
        "fake_median_ms",
        "genuine_median_ms",
        "plain_median_ms",
        "baseline_median_ms",  # no estimate: the sweep does not measure it (--arms), and no fill pass stands in
        "restore_prep_ci_value",
        "fake_vs_genuine_ci_value",  # paired by rep, within each process
    }
    assert all(r.ratio == 1 and r.ci is not None and r.ci.lo <= 1 <= r.ci.hi for r in c.rows), c.rows
    assert compare_catalog(catalog, both_run.path.name, both_run.path.name).rows == c.rows
    spec = arms_chart(catalog, catalog_runs(catalog), ReportSettings()).to_dict()
    text = json.dumps(spec)
    assert "plain genuine hit" in text and "memcpy of the same bytes" in text and both_run.path.name in text


def test_a_sliding_window_model_sweeps_in_both_places(tmp_path: Path, iswa_model: Path) -> None:
    """The tiny gemma3 (a window of 128, --swa-full as the user's own flag): every sample of every arm honours the
    contract in both places, and in one process the fake prefix holds the genuine hit's window."""
    runs = tmp_path / "runs"
    r = lab("sweep", "--model", str(iswa_model), "--Ls", "100,300", "--news", "16", "--reps", "2",
            "--where", "both", "--fill-passes", "2", "--runs-dir", str(runs),
            env={"LAB_SERVER__EXTRA_ARGS": '["--swa-full"]'})  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(r.stdout.strip().splitlines()[-1]))
    samples = run.read(SWEEP_SAMPLES)
    assert {s.where for s in samples} == {"server", "inproc"} and all(s.ok for s in samples), samples
    for s in samples:
        if s.where == "inproc" and s.arm in ("fake", "genuine"):
            assert (s.pos_min, s.pos_max) == (max(0, s.L - 128), s.L - 1), s
    notes = [d for p in run.read(SWEEP_POINTS) for d in p.diagnostics]
    assert not [d for d in notes if "first held position" in d or "GGUF predicts" in d], notes  # window, blob


def test_in_one_process_the_estimate_stands_beside_every_rep(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = lab("arms", "--Ls", "300,700", "--news", "16", "--reps", "3", "--runs-dir", str(runs), "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(Path(json.loads(r.stdout)["run"]))
    est = [t for t in run.read(PREFILL_TPS) if t.rep is not None]
    # a chunk of the new tokens from the restored depth-L state, first in every rep, in the rep's process
    assert sorted((t.where, t.depth, t.chunk, t.rep, t.process) for t in est) == sorted(
        ("inproc", L, 16, rep, rep) for L in (300, 700) for rep in range(3)
    )
    for p in run.read(SWEEP_POINTS):
        iv = p.fake_vs_estimate_ci  # paired by rep, over the reps' processes, as fake / genuine is
        assert iv is not None and iv.n == 3 and iv.processes == 3
        assert p.estimate_ci is not None and p.estimate_ci.n == 3 and p.opt_prefill_ms == p.estimate_ci.value
        assert p.batch_effect_ci is not None and p.batch_effect_ci.n == 3  # a 512-token chunk in each fill pass
    assert {(f.L, f.new) for f in run.read(SWEEP_FILLS) if f.kind == "chunk"} == {
        (300, 16),
        (300, 512),
        (700, 16),
        (700, 512),
    }
    # the catalog keeps the in-process samples apart from the server's, and lab compare resamples them
    c = compare_runs(run.path, run.path)
    row = next(x for x in c.rows if x.metric == "opt_prefill_ms")
    assert row.ci is not None and row.ci.processes == 3 and row.ci.n == 3
    paired = [x for x in c.rows if x.metric == "fake_vs_estimate_ci_value"]  # fake / estimate, paired by rep too
    assert len(paired) == 2 and all(x.ci is not None and x.ci.processes == 3 and x.ratio == 1 for x in paired)


def test_bad_inputs_create_no_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = lab("arms", "--Ls", "20000", "--news", "64", "--runs-dir", str(runs))
    assert r.returncode == 2 and "invalid settings" in r.stderr and "ctx_size" in r.stderr, r.stderr
    r = lab("sweep", "--where", "elsewhere", "--runs-dir", str(runs))
    assert r.returncode == 2 and "where" in r.stderr and "invalid settings" in r.stderr, r.stderr
    r = lab("arms", "--images", "320x200", "--runs-dir", str(runs))
    assert r.returncode == 2 and "text steps" in r.stderr.splitlines()[0], r.stderr
    assert not runs.exists()


def test_sigterm_leaves_it_incomplete_and_resume_finishes_it(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    # the later points take seconds (the plain genuine hit decodes L per rep): the SIGTERM lands while they run
    cmd = [
        LAB,
        "arms",
        "--Ls",
        "300,2500,4000",
        "--news",
        "16",
        "--reps",
        "3",
        "--arms",
        "fake,genuine,plain",
        "--runs-dir",
        str(runs),
    ]
    interrupt_after_first_row(cmd, f"*/raw/{SWEEP_POINTS.file}", runs, REPO)
    (run_dir,) = (p for p in runs.iterdir() if p.is_dir())
    run = RunFolder.open(run_dir)
    assert run.manifest().status == "incomplete"
    before = run.read(SWEEP_POINTS, tolerate_torn_tail=True)
    assert 1 <= len(before) < 3
    r = lab("arms", "--resume", run_dir.name, "--runs-dir", str(runs))
    assert r.returncode == 0, r.stderr + r.stdout
    run = RunFolder.open(run_dir)
    assert run.ready and len(run.manifest().resumed_utc) == 1
    points = run.read(SWEEP_POINTS)
    assert sorted(p.L for p in points) == [300, 2500, 4000]  # none lost, none measured twice
    assert points[0] == before[0] and {p.where for p in points} == {"inproc"}  # what was done is kept as it was
    samples = run.read(SWEEP_SAMPLES)
    assert sorted((s.L, s.arm, s.rep) for s in samples) == sorted(
        (L, a, rep) for L in (300, 2500, 4000) for a in ("fake", "genuine", "plain") for rep in range(3)
    )
    passes = {f.fill_pass for f in run.read(SWEEP_FILLS)}
    assert passes == set(range(len(passes))) and len(passes) >= 3  # two, and one more to get the states back
