"""`lab show RUN`: a run's closing tables again, from the rows and results its folder stored (run folders built
here as a sweep writes them; the engine tiers check it against each experiment's own closing output)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from labcli import lab

from lab.core.runs import RunFolder
from lab.core.schemas import ArmStats, SweepPoint
from lab.core.schemas.raw import SWEEP_POINTS

pytestmark = pytest.mark.fast

PARAMS = {"sweep": {"Ls": [512, 2048], "news": [64], "images": ["none"], "where": "server"}}
PLAN = {  # results.plan as a sweep stores it (lab.experiments.sweep.planning.plan_results)
    "predicted_s": 10.0,
    "after_s": 40.0,
    "after_reps_each": [4, 4],
    "bound_s": 60.0,
    "actual_s": 20.0,
    "reps": 6,
    "reps_each": [2, 2],
    "spread_source": "the lab's default",
    "took": [0.5, 2.5],
    "took_source": "three runs",
    "rates": {"flat_ms_per_token": 0.5, "attn_ms_per_token_per_1k": 0.01, "source": "a test"},
    "arms": {"fake": 4.0, "genuine": 6.0},
}


def point(L: int, fake_ms: float) -> SweepPoint:
    base = ArmStats(median_ms=9 * fake_ms, n_ok=1)
    return SweepPoint(point=f"L{L}-n64", L=L, new=64, n_kv_padded=L + 256, measurable=True, baseline=base,
                      fake=ArmStats(median_ms=fake_ms, n_ok=1), genuine=base, opt_prefill_ms=20.0)  # fmt: skip


def sweep_folder(root: Path, complete: bool = True) -> RunFolder:
    run = RunFolder.create(root, "sweep", "vm", PARAMS)
    run.update(model={"path": "/models/tiny.gguf", "sha256": "ab" * 32, "size": 1})
    run.rewrite(SWEEP_POINTS, [point(2048, 31.5), point(512, 12.25)])  # the order they finished in
    run.add_results(plan=PLAN, process_start_s=[1.0, 2.0])
    if complete:
        run.complete()
    return run


def test_lab_show_prints_a_sweeps_stored_tables_in_its_grids_order_with_its_plan(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run = sweep_folder(runs)
    r = lab("show", run.path.name[:-2], "--runs-dir", str(runs))  # a unique prefix of its id
    assert r.returncode == 0 and not r.stderr, r.stderr
    out = r.stdout
    assert "through llama-server" in out and out.index("12.2") < out.index("31.5")  # L 512 first, as the grid
    # the plan, said as a range, against what it took, from results.plan: 10 s predicted, 40 s after the first
    # processes, 20 s taken
    assert "predicted 10 s (5 s to 25 s: three runs) for 2 points at 2 reps each (from the lab's default)" in out
    assert (
        "at most 60 s at 6 reps; took 20 s (2.00x the prediction, 0.50x the one after its first processes, 40 s)" in out
    )
    assert "vm / tiny.gguf" in out  # the headline (lab.catalog.headline), of the stored points
    by_path = lab("show", str(run.path), "--runs-dir", str(tmp_path / "elsewhere"))  # a folder fetched anywhere
    assert by_path.returncode == 0 and by_path.stdout == out
    record = json.loads(lab("show", run.path.name, "--runs-dir", str(runs), "--json").stdout)
    assert record["run"] == str(run.path) and [p["L"] for p in record["points"]] == [512, 2048]


def test_an_incomplete_run_prints_what_it_stored_then_says_so_in_one_line(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run = sweep_folder(runs, complete=False)
    run.fail("interrupted by SIGTERM")
    r = lab("show", run.path.name, "--runs-dir", str(runs))
    assert r.returncode == 1 and "31.5" in r.stdout, r.stdout
    assert r.stderr.strip().splitlines() == [
        f"{run.path.name} is incomplete (interrupted by SIGTERM): the tables hold what it stored so far; finish it "
        f"with --resume {run.path.name}"
    ]


def test_what_has_no_answer_is_one_line(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    sweep_folder(runs)
    assert lab("rebuild", "exact", "--runs-dir", str(runs)).returncode == 0
    rebuild = next(p for p in runs.iterdir() if "rebuild_exact" in p.name)
    not_a_run = tmp_path / "photos"
    not_a_run.mkdir()
    for ref, says in [
        ("2031-01-01_nohost_sweep_000000", "no unique run"),
        (str(not_a_run), "is not a run folder (no manifest.json)"),
        (rebuild.name, "is a rebuild_exact run: it closes with no tables to print again"),
    ]:
        r = lab("show", ref, "--runs-dir", str(runs))
        assert r.returncode == 1 and not r.stdout, (ref, r.stdout)
        (line,) = r.stderr.strip().splitlines()
        assert says in line and "Traceback" not in r.stderr, (ref, line)
