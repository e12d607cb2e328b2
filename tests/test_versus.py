"""`--vs`: two configurations measured interleaved in one run, on the real patched server and tiny model: the
run's folder with both sides, the process pairs in balanced alternation, B/A paired by process pair in one table
and as JSON, `lab compare` on it and on its sides, an interrupted run resumed, and the profile and the decode check
likewise."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from labcli import lab

from lab.core.runs import RunFolder
from lab.core.schemas.raw import PROFILE_BAND_PROCESSES, SWEEP_POINTS, SWEEP_SAMPLES, VERSUS_PAIRS, VERSUS_ROWS
from lab.core.settings import ReportSettings
from lab.reports.data import catalog_runs
from lab.reports.versus import versus_chart

pytestmark = pytest.mark.engine

LAB = str(Path(sys.executable).parent / "lab")
REPO = Path(__file__).resolve().parent.parent
SWEEP = ["sweep", "--Ls", "256,512", "--news", "16", "--reps", "2", "--processes", "2", "--fill-passes", "2"]


def only_run(runs: Path) -> RunFolder:
    found = [p for p in runs.iterdir() if p.is_dir()]
    assert len(found) == 1, found
    return RunFolder.open(found[0])


def check_pairs(run: RunFolder, pairs: int) -> None:
    """Every process pair holds one process of each side; pairs in twos run AB then BA or BA then AB; each row
    names the side's process, in an uninterrupted run the pair's own number."""
    rows = run.read(VERSUS_PAIRS)
    by_pair: dict[int, list[str]] = {}
    for r in sorted(rows, key=lambda r: (r.pair, r.order)):
        by_pair.setdefault(r.pair, []).append(r.side)
    assert sorted(by_pair) == list(range(pairs)) and all(sorted(v) == ["a", "b"] for v in by_pair.values())
    for k in range(0, pairs - 1, 2):
        assert by_pair[k] == by_pair[k + 1][::-1]
    assert all(r.process == r.pair for r in rows)


def test_an_interleaved_sweep_pairs_its_sides_by_process_pair(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = lab(*SWEEP, "--vs", "server.threads=2", "--runs-dir", str(runs), "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    out = json.loads(r.stdout)
    run = only_run(runs)
    assert out["run"] == str(run.path) and run.ready and run.manifest().experiment == "sweep_vs"
    assert run.manifest().params["vs"] == {"server.threads": "2"}
    check_pairs(run, 2)
    for side, threads in (("a", 1), ("b", 2)):
        s = RunFolder.open(run.path / side)
        m = s.manifest()
        assert s.ready and m.run_id == f"{run.path.name}/{side}" and m.params["server"]["threads"] == threads
        assert m.engine["patch_sha256"] and m.model["sha256"]  # each side's provenance, as a run's
        assert sorted(p.L for p in s.read(SWEEP_POINTS)) == [256, 512]
        samples = s.read(SWEEP_SAMPLES)
        assert Counter((x.process, x.arm) for x in samples) == {(p, a): 2 for p in (0, 1) for a in ("fake", "genuine")}
    assert out["paired"] is True and out["tolerance"] == 0.03
    times = [x for x in out["rows"] if x["metric"] == "fake_median_ms"]
    assert [(x["L"], x["new"]) for x in times] == [(256, 16), (512, 16)]
    for x in times:
        assert x["ratio_ci"]["processes"] == 2 and x["ratio_ci"]["n"] == 2
        assert x["called"] in ("faster", "slower", "same", "undecided")
    assert {g["metric"] for g in out["geomean"]} >= {"fake_median_ms", "genuine_median_ms"}
    stored = run.read(VERSUS_ROWS)  # what was stored: every row, then the geomeans (no point)
    assert len(stored) == len(out["rows"]) + len(out["geomean"])
    assert stored[0].point == "where=server L=256 new=16 image=-" and stored[-1].point == ""

    shown = lab("compare", run.path.name, "--runs-dir", str(runs), "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["rows"] == out["rows"]  # one record, recomputed
    sides = lab("compare", f"{run.path.name}/a", f"{run.path.name}/b", "--runs-dir", str(runs), "--json")
    assert sides.returncode == 0, sides.stderr
    assert json.loads(sides.stdout)["paired"] is False  # two runs' worth of samples, unpaired
    both = lab("compare", run.path.name, run.path.name, "--runs-dir", str(runs))
    assert both.returncode == 1 and "name a side" in both.stderr and len(both.stderr.strip().splitlines()) == 1
    table = lab("compare", run.path.name, "--runs-dir", str(runs))
    assert "called" in table.stdout and "2 process pairs" in " ".join(table.stdout.split())  # the caption wraps
    # `lab show RUN`: the B/A table the run closed with (what `lab compare RUN` computes again), from its stored rows
    again = lab("show", run.path.name, "--runs-dir", str(runs))
    assert again.returncode == 0 and again.stdout == table.stdout, again.stderr

    # the catalog keeps B/A per point, and the report draws it with its intervals
    catalog = tmp_path / "catalog"
    assert lab("catalog", "ingest", "--runs-dir", str(runs), "--catalog-dir", str(catalog)).returncode == 0
    spec = versus_chart(catalog, catalog_runs(catalog), ReportSettings()).to_dict()
    drawn = next(iter(spec["datasets"].values()))
    assert len(drawn) == len([x for x in out["rows"] + out["geomean"] if x["ratio_ci"]])
    assert {d["run_id"] for d in drawn} == {run.path.name} and all(d["ratio_lo"] <= d["ratio_hi"] for d in drawn)
    assert all(d["rests_on"].startswith("fewer than 5 process pairs") for d in drawn)  # two: marked, dashed


def running_until_a_pair(args: list[str], runs: Path) -> subprocess.Popen[str]:
    """`lab ARGS` started in the background, once the first row of its pair table is on disk."""
    proc = subprocess.Popen(
        [LAB, *args, "--runs-dir", str(runs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    deadline = time.monotonic() + 240
    while not any(p.stat().st_size for p in runs.glob(f"*/raw/{VERSUS_PAIRS.file}")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc


def test_an_interrupted_interleaved_run_resumes_and_completes_both_sides(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    args = [*SWEEP[:-4], "--processes", "3", "--fill-passes", "2"]
    proc = running_until_a_pair([*args, "--vs", "same"], runs)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    run = only_run(runs)
    assert run.manifest().status == "incomplete" and not run.ready
    for side in ("a", "b"):
        assert RunFolder.open(run.path / side).manifest().status in ("incomplete", "running")
    r = lab("sweep", "--resume", run.path.name, "--runs-dir", str(runs))
    assert r.returncode == 0, r.stderr + r.stdout
    assert r.stdout.strip().splitlines()[-1] == str(run.path)
    assert run.ready and len(run.manifest().resumed_utc) == 1
    for side in ("a", "b"):
        s = RunFolder.open(run.path / side)
        assert s.ready and sorted(p.L for p in s.read(SWEEP_POINTS)) == [256, 512]
        reps = Counter((x.point, x.arm, x.rep) for x in s.read(SWEEP_SAMPLES))
        assert set(reps.values()) == {1} and len(reps) == 2 * 2 * 2  # none lost, none doubled
    rows = run.read(VERSUS_PAIRS)
    assert Counter(r.side for r in rows) == {"a": 2, "b": 2}
    assert len({r.pair for r in rows}) >= 2


def test_a_pair_table_that_goes_bad_leaves_both_sides_unfinished_and_the_run_resumable(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    decode = ["engine", "decode", "--depths", "300", "--reps", "3", "--n-out", "8", "--new", "16"]
    proc = running_until_a_pair([*decode, "--vs", "same"], runs)
    run = only_run(runs)
    table = run.table_path(VERSUS_PAIRS)
    bad = '{"pair": 0, "side": "c", "order": 0, "started_utc": "x", "seconds": 1}'  # a hand edit mid-run
    with table.open("a") as fh:
        fh.write(bad + "\n")
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 1 and "bad VersusPair row: side" in err.strip().splitlines()[-1], err
    assert "Traceback" not in err and run.manifest().status == "incomplete" and not run.ready
    for side in ("a", "b"):  # read before either side was finished: both resume
        s = RunFolder.open(run.path / side)
        assert not s.ready and s.manifest().status == "incomplete"
    line = next(i for i, x in enumerate(table.read_text().splitlines(), start=1) if '"side": "c"' in x)
    r = lab("engine", "decode", "--resume", run.path.name, "--runs-dir", str(runs))
    assert r.returncode == 1 and f"pairs.jsonl:{line}: bad VersusPair row" in r.stderr.strip().splitlines()[0]
    # the line taken out, and the last one cut mid-write as a kill leaves it: set aside, and the resume completes
    kept = [x for x in table.read_text().splitlines(keepends=True) if '"side": "c"' not in x]
    table.write_text("".join(kept) + '{"pair": 9, "si')
    r = lab("engine", "decode", "--resume", run.path.name, "--runs-dir", str(runs), "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    assert run.ready and all(RunFolder.open(run.path / side).ready for side in ("a", "b"))
    (aside,) = table.parent.glob(f"{VERSUS_PAIRS.file}.torn-*")
    assert aside.read_text() == '{"pair": 9, "si' and "moved to" in r.stderr
    (server,) = [x for x in json.loads(r.stdout)["rows"] if x["metric"] == "server_ms_value"]
    assert server["ratio_ci"]["processes"] == 3  # the check's reps measured again, paired by their new process pairs


def test_the_profile_and_the_decode_check_interleave_too(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    profile = ["profile", "--chunk", "128", "--depths", "0,128,256", "--processes", "2", "--reps", "1", "--no-peaks"]
    r = lab(*profile, "--vs", "profile.threads=2", "--runs-dir", str(runs), "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    out = json.loads(r.stdout)
    run = RunFolder.open(Path(out["run"]))
    check_pairs(run, 2)
    assert Counter(c.process for c in RunFolder.open(run.path / "b").read(PROFILE_BAND_PROCESSES))[1] > 0
    bands = [x for x in out["rows"] if x["metric"] == "ms_per_token"]
    assert bands and all(x["ratio_ci"]["processes"] == 2 for x in bands if x["ratio_ci"])
    again = lab("show", run.path.name, "--runs-dir", str(runs))  # its closing B/A table, from its stored rows
    assert again.returncode == 0 and again.stdout == lab("compare", run.path.name, "--runs-dir", str(runs)).stdout
    r = lab(
        "engine", "decode", "--depths", "300,600", "--reps", "2", "--n-out", "8", "--new", "16",
        "--vs", "same", "--runs-dir", str(runs), "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    out = json.loads(r.stdout)
    check_pairs(RunFolder.open(Path(out["run"])), 2)
    server = [x for x in out["rows"] if x["metric"] == "server_ms_value"]
    assert [x["depth"] for x in server] == [300, 600] and all(x["ratio_ci"]["processes"] == 2 for x in server)
    again = lab("show", out["run"], "--runs-dir", str(runs))  # its closing B/A table, from its stored rows
    assert again.returncode == 0 and again.stdout == lab("compare", out["run"], "--runs-dir", str(runs)).stdout


def test_the_kv_cache_type_reaches_the_server_the_driver_the_instrument_and_llama_bench(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    q8 = ["--vs", "server.cache_type_k=q8_0", "--vs", "server.cache_type_v=q8_0"]
    r = lab(*SWEEP, "--where", "both", *q8, "--runs-dir", str(runs), "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    run = Path(json.loads(r.stdout)["run"])
    for side, kv in (("a", "f16"), ("b", "q8_0")):
        m = RunFolder.open(run / side).manifest()
        assert (m.params["server"]["cache_type_k"], m.params["server"]["cache_type_v"]) == (kv, kv)
        assert (m.results["driver_meta"]["cache_type_k"], m.results["driver_meta"]["cache_type_v"]) == (kv, kv)
        assert f"K ({kv})" in (run / side / "logs" / "server.log").read_text()
    profile = ["profile", "--chunk", "128", "--depths", "0,128,256", "--processes", "2", "--reps", "1", "--no-peaks"]
    r = lab(*profile, *q8, "--runs-dir", str(runs), "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    run = Path(json.loads(r.stdout)["run"])
    meta = RunFolder.open(run / "b").manifest().results["instrument_meta"]
    assert (meta["cache_type_k"], meta["cache_type_v"]) == ("q8_0", "q8_0")
    assert "-ctk q8_0 -ctv q8_0" in (run / "b" / "logs" / "llama-bench.log").read_text()
