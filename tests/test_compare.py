"""`lab compare` with its calls: a real sweep against itself is never called faster or slower at any point; a
copy of it whose every sample is 1.5x slower (constructed, so the outcome cannot depend on this machine's speed)
is significantly slower, and --fail-above says so with its exit code."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from labcli import lab

from lab.catalog.compare import compare_runs
from lab.core.runs import RunFolder

pytestmark = pytest.mark.engine

LAB = str(Path(sys.executable).parent / "lab")
REPO = Path(__file__).resolve().parent.parent


def sweep(runs: Path) -> Path:
    """One thread and eight processes: a 2-core host's one busy moment stays one process of eight."""
    r = lab("sweep", "--Ls", "1024,2048", "--news", "256", "--reps", "8", "--arms", "fake,genuine", "-t", "1",
            "--runs-dir", str(runs))  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    return Path(r.stdout.strip().splitlines()[-1])


def scaled(v: object, factor: float) -> object:
    """Every `*_ms` number in a row (nested too) times `factor`."""
    if isinstance(v, dict):
        return {
            k: x * factor
            if k.endswith("_ms") and isinstance(x, float | int) and not isinstance(x, bool)
            else scaled(x, factor)
            for k, x in v.items()
        }
    return [scaled(x, factor) for x in v] if isinstance(v, list) else v


def slowed_copy(run: Path, factor: float) -> Path:
    """A copy of a complete run under a new run id whose every timing is `factor` times the original's."""
    dst = run.with_name(run.name[:-6] + ("ffffff" if run.name[-6:] != "ffffff" else "eeeeee"))
    shutil.copytree(run, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    (dst / "manifest.json").write_text(json.dumps({**manifest, "run_id": dst.name}))
    for table in (dst / "raw").glob("*.jsonl"):
        rows = [json.loads(line) for line in table.read_text().splitlines() if line.strip()]
        table.write_text("".join(json.dumps(scaled(r, factor)) + "\n" for r in rows))
    return dst


def test_self_is_within_noise_and_a_slowed_copy_is_a_significant_slowdown(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    fast = sweep(runs)
    slow = slowed_copy(fast, 1.5)
    assert RunFolder.open(slow).manifest().status == "complete"
    same = compare_runs(fast, fast)
    timed = [r for r in same.rows if r.ci is not None]
    # fake, genuine and fake/genuine (paired within a process) x 2 points
    assert len(timed) == 6 and all(r.significant is False for r in timed), timed
    assert same.summary and not same.slowdowns(0.0)
    r = lab("compare", fast.name, fast.name, "--runs-dir", str(runs), "--fail-above", "5")
    assert r.returncode == 0, r.stderr + r.stdout
    # one vocabulary: each row called at 1 +- 3% (same or undecided against itself), never faster or slower
    assert "called" in r.stdout and "faster" not in r.stdout and "slower" not in r.stdout, r.stdout
    assert {row.called(0.03) for row in [*timed, *same.summary]} <= {"same", "undecided"}

    c = compare_runs(fast, slow)
    (g,) = (r for r in c.summary if r.metric == "fake_median_ms")  # every sample 1.5x: B/A is 1.5, far from 1
    assert g.ci is not None and g.ci.value == pytest.approx(1.5) and g.ci.lo > 1.1 and g.significant, (g, c.rows)
    r = lab("compare", fast.name, slow.name, "--runs-dir", str(runs), "--fail-above", "10")
    assert r.returncode == 1 and "significant slowdown: fake_median_ms" in r.stderr, r.stderr + r.stdout
    assert "fake_vs_genuine" not in r.stderr  # a ratio of two arms is not a time that slowed
    # both arms slowed alike: their paired ratio is unchanged, and within noise
    (p,) = (r for r in c.summary if r.metric == "fake_vs_genuine_ci_value")
    assert p.ci is not None and p.ci.value == pytest.approx(1.0) and p.significant is False, p
    assert "slower" in r.stdout and "geomean" in r.stdout
    # the host's run-to-run drift widens every interval, all rows by one shared draw: a 1.5x slowdown is still
    # one at a drift of 5%, and within noise at a drift of 40%
    drifted = compare_runs(fast, slow, drift=0.05)
    (d,) = (r for r in drifted.summary if r.metric == "fake_median_ms")
    assert d.ci is not None and g.ci is not None and d.ci.lo < g.ci.lo and d.ci.hi > g.ci.hi and d.significant
    (w,) = (r for r in compare_runs(fast, slow, drift=0.4).summary if r.metric == "fake_median_ms")
    assert w.ci is not None and w.significant is False
    # a run's drift moves both arms of a process alike, so it does not widen their paired ratio
    (pd,) = (r for r in drifted.summary if r.metric == "fake_vs_genuine_ci_value")
    assert pd.ci is not None and p.ci is not None and (pd.ci.lo, pd.ci.hi) == (p.ci.lo, p.ci.hi)
    r = lab("compare", fast.name, slow.name, "--runs-dir", str(runs), "--run-drift", "0.05")
    assert r.returncode == 0 and "a run-to-run drift of 5.0%" in r.stdout, r.stderr + r.stdout


def test_profiles_compare_band_by_band_with_intervals(tmp_path: Path) -> None:
    """Each band's ms/token per process is stored (raw/profile_band_processes.jsonl), so B/A of every (depth, band)
    carries an interval too; a profile against itself is within noise everywhere."""
    r = lab(
        "profile",
        "--chunk",
        "128",
        "--depths",
        "0,128,256",
        "--processes",
        "3",
        "--reps",
        "1",
        "--runs-dir",
        str(tmp_path),
        "--json",
    )
    assert r.returncode == 0, r.stderr + r.stdout
    out = json.loads(r.stdout)  # --json: the records the tables are printed from, and nothing else
    assert len(out["bands"]) == 3 * 5 and out["summary"]["processes"] == 3, out["summary"]
    run = Path(out["run"])
    c = compare_runs(run, run)
    bands = [row for row in c.rows if row.metric == "ms_per_token"]
    assert len(bands) == 3 * 5 and all(row.ci is not None and row.ci.n == 3 for row in bands), bands
    assert all(row.significant is False for row in c.rows if row.ci is not None)
