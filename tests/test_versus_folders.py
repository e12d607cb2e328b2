"""Interleaved run folders built by hand, without an engine: a side is never resumed alone, a resumed run holds
every folder's writer lock, B/A pairs the processes the pair table says ran next to each other, a torn pair table
is set aside before anything is appended to it, and the odd folder (a bad pair row, a side without its manifest,
an empty pair table, a complete run) gets one line or the right answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from labcli import lab, one_line_error

from lab.catalog.compare import compare_sides
from lab.core.jsonl import set_aside_torn_tail
from lab.core.run_ids import SIDES
from lab.core.runs import RunError, RunFolder
from lab.core.schemas import DecodeDepth, Interval, VersusPair
from lab.core.schemas.raw import DECODE_DEPTHS, VERSUS_PAIRS, VERSUS_ROWS
from lab.core.settings import Settings, load_settings
from lab.core.shell import LocalShell
from lab.experiments.decode import DecodeCheck
from lab.experiments.protocol import run_experiment
from lab.experiments.sweep.run import Sweep
from lab.experiments.versus import run_versus

pytestmark = pytest.mark.fast

LEVEL = [1.0, 3.0, 2.0, 5.0, 4.0]  # the host's level in process pairs 0..4: far apart, and not in order


def nowhere(tmp_path: Path) -> dict[str, str]:
    """An engine checkout that does not exist: a resume that got as far as building the engine fails at once (it
    never builds the shared one), so a refusal that must come first is told apart from it."""
    return {"LAB_ENGINE__SOURCE_MODE": "path", "LAB_ENGINE__PATH": str(tmp_path / "no-checkout")}


def settings_of(tmp_path: Path) -> Settings:
    return load_settings(runs_dir=tmp_path / "runs", engine={"source_mode": "path", "path": tmp_path / "no-checkout"})


def interleaved(tmp_path: Path, experiment: str = "decode", ready: tuple[str, ...] = ()) -> RunFolder:
    """An interrupted interleaved run with both sides (those in `ready` complete), as the lab leaves one."""
    params = {"experiment": experiment, "vs": {}, "seed": 7, "tolerance": 0.03}
    run = RunFolder.create(tmp_path / "runs", f"{experiment}_vs", LocalShell().name, params)  # measured here
    for side in SIDES:
        s = RunFolder.create_side(run, side, experiment, {})
        if side in ready:
            s.complete()
        else:
            s.fail("interrupted by SIGTERM")
    run.fail("interrupted by SIGTERM")
    return run


def pair_row(pair: int, side: str, process: int | None, order: int = 0) -> VersusPair:
    return VersusPair(
        pair=pair, side=side, order=order, started_utc="2026-12-06T10:00:00Z", seconds=1.0, process=process
    )


def depth_row(samples: dict[int, float]) -> DecodeDepth:
    """One depth of a decode check whose server samples came from these processes (one each)."""
    values = list(samples.values())
    mid = sorted(values)[len(values) // 2]
    return DecodeDepth(
        depth=300,
        L=284,
        new=16,
        n_out=8,
        tolerance=0.05,
        server_ms=Interval(value=mid, lo=min(values), hi=max(values), n=len(values), processes=len(values)),
        server_samples_ms=values,
        server_processes=list(samples),
    )


def interrupted_inside_a_pair(tmp_path: Path) -> RunFolder:
    """A's process 0 ran in process pair 0; B's process 0 was interrupted there and ran again, as its process 0,
    in pair 1 after the resume: B's process k ran in pair k + 1, next to A's process k + 1. B is 1.1 times A in
    every pair, while the host's level moves by up to 5x from one pair to the next."""
    run = interleaved(tmp_path, ready=SIDES)
    together = [pair_row(k, "a", k, order=0) for k in (1, 2, 3)], [pair_row(k, "b", k - 1, order=1) for k in (1, 2, 3)]
    rows = [pair_row(0, "a", 0), *(r for both in zip(*together, strict=True) for r in both), pair_row(4, "b", 3)]
    run.rewrite(VERSUS_PAIRS, rows)
    a = {k: 100 * LEVEL[k] for k in range(4)}
    b = {k: 110 * LEVEL[k + 1] for k in range(4)}
    RunFolder.open(run.path / "a").rewrite(DECODE_DEPTHS, [depth_row(a)])
    RunFolder.open(run.path / "b").rewrite(DECODE_DEPTHS, [depth_row(b)])
    return run


def folder_state(path: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under a folder: its bytes and mtime (what "nothing was written" compares)."""
    return {str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns) for p in path.rglob("*") if p.is_file()}


# --- a side is never resumed alone ----------------------------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_a_side_is_never_resumed_alone(tmp_path: Path, side: str) -> None:
    run = interleaved(tmp_path, "sweep")
    before = folder_state(run.path)
    for ref in (f"{run.path.name}/{side}", str(run.path / side)):  # by id and side, or by its path
        r = lab("sweep", "--resume", ref, "--runs-dir", str(tmp_path / "runs"), env=nowhere(tmp_path))
        one_line_error(r, 1, f"--resume {run.path.name}")
        assert f"side {side} of the interleaved run {run.path.name}" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    with pytest.raises(RunError, match=f"--resume {run.path.name}"):  # a library caller too
        run_experiment(Sweep(), settings_of(tmp_path), resume=RunFolder.open(run.path / side))
    assert folder_state(run.path) == before


# --- every folder of a resumed run is locked ------------------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_a_resumed_interleaved_run_holds_the_writer_lock_of_each_side(tmp_path: Path, side: str) -> None:
    run = interleaved(tmp_path, "sweep")
    before = folder_state(run.path)
    with RunFolder.open(run.path / side).writer(), pytest.raises(RunError, match="is being written by process"):
        run_versus(Sweep(), settings_of(tmp_path), resume=run)
    assert folder_state(run.path) == before  # refused before anything was read back or written
    with run.writer(), pytest.raises(RunError, match="is being written by process"):  # and the run's own
        run_versus(Sweep(), settings_of(tmp_path), resume=run)


# --- B/A pairs by the process pair the table records ----------------------------------------------------------


def test_b_over_a_pairs_the_processes_the_pair_table_says_ran_together(tmp_path: Path) -> None:
    run = interrupted_inside_a_pair(tmp_path)
    c = compare_sides(run.path)
    (row,) = (r for r in c.rows if r.metric == "server_ms_value")
    assert row.ci is not None
    # pairs 1 to 3 hold both sides: B/A is 1.1 in each, whatever the host's level, so the interval is 1.1 too
    assert (row.ci.n, row.ci.processes) == (3, 3)
    assert row.ci.value == pytest.approx(1.1) and row.ci.lo == pytest.approx(1.1) and row.ci.hi == pytest.approx(1.1)
    r = lab("compare", run.path.name, "--runs-dir", str(tmp_path / "runs"), "--json")
    assert r.returncode == 0, r.stderr
    (shown,) = (x for x in json.loads(r.stdout)["rows"] if x["metric"] == "server_ms_value")
    assert shown["ratio_ci"]["value"] == pytest.approx(1.1) and shown["ratio_ci"]["processes"] == 3


def test_a_pair_table_from_before_processes_were_recorded_pairs_by_process_number(tmp_path: Path) -> None:
    run = interleaved(tmp_path, ready=SIDES)
    run.rewrite(VERSUS_PAIRS, [pair_row(k, side, None, order=i) for k in range(3) for i, side in enumerate(SIDES)])
    for side, factor in (("a", 100), ("b", 120)):
        RunFolder.open(run.path / side).rewrite(DECODE_DEPTHS, [depth_row({k: factor * LEVEL[k] for k in range(3)})])
    (row,) = (r for r in compare_sides(run.path).rows if r.metric == "server_ms_value")
    assert row.ci is not None and row.ci.processes == 3 and row.ci.lo == pytest.approx(1.2) == row.ci.hi


def test_an_empty_pair_table_gives_b_over_a_without_an_interval_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = interrupted_inside_a_pair(tmp_path)
    run.rewrite(VERSUS_PAIRS, [])
    (row,) = (r for r in compare_sides(run.path).rows if r.metric == "server_ms_value")
    assert row.ci is None and row.ratio is not None and row.called(0.03) == "undecided"  # no process pair
    err = capsys.readouterr().err
    assert f"{run.path.name}: no process pair holds a process of each side" in err
    assert len(err.strip().splitlines()) == 1


# --- the pair table: torn, bad, read before the sides finish --------------------------------------------------


def test_a_torn_pair_row_is_set_aside_and_a_whole_one_kept(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    whole = pair_row(0, "a", 0).model_dump_json() + "\n"
    path.write_text(whole)
    assert set_aside_torn_tail(path) is None and path.read_text() == whole
    path.write_bytes(whole.encode() + b'{"pair": 1, "side": "b", "ord\xff')  # cut mid-write, mid-character too
    aside = set_aside_torn_tail(path)
    assert aside is not None and aside.parent == path.parent and aside.name.startswith("pairs.jsonl.torn-")
    assert aside.read_bytes() == b'{"pair": 1, "side": "b", "ord\xff' and path.read_text() == whole
    path.write_text(whole + whole.strip())  # a whole row whose newline never made it: kept, and ended
    assert set_aside_torn_tail(path) is None and path.read_text() == whole + whole
    path.write_text(whole + '{"pair": 2')
    second = set_aside_torn_tail(path)  # a second tear in the same second gets a file of its own
    assert second is not None and second != aside and aside.exists() and path.read_text() == whole


def test_a_resume_sets_a_torn_pair_table_aside_and_completes(tmp_path: Path) -> None:
    run = interrupted_inside_a_pair(tmp_path)  # both sides finished; the run was stopped before its own end
    table = run.table_path(VERSUS_PAIRS)
    with table.open("a") as fh:
        fh.write('{"pair": 5, "side": "a", "or')
    returned, comparison = run_versus(DecodeCheck(), settings_of(tmp_path), resume=run)
    assert returned.path == run.path and run.ready and run.manifest().status == "complete"
    (aside,) = table.parent.glob("pairs.jsonl.torn-*")
    assert aside.read_text() == '{"pair": 5, "side": "a", "or'
    assert len(run.read(VERSUS_PAIRS)) == 8  # every whole row kept, read strictly
    results = run.manifest().results
    assert (results["pairs_started"], results["pairs"]) == (5, 3) and comparison.paired  # 0 and 4: one side each
    assert run.read(VERSUS_ROWS)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"pair": 1, "side": "c", "order": 0, "started_utc": "x", "seconds": 1}', ":2: bad VersusPair row: side"),
        ('{"pair": -1, "side": "a", "order": 0, "started_utc": "x", "seconds": 1}', ":2: bad VersusPair row: pair"),
        ('{"pair": 0, "side": "a", "order": 1, "started_utc": "x", "seconds": 1}', ":2: pair 0 holds side a twice"),
    ],
)
def test_a_bad_pair_row_refuses_the_resume_and_compare_in_one_line(tmp_path: Path, line: str, says: str) -> None:
    run = interleaved(tmp_path, "sweep")
    run.rewrite(VERSUS_PAIRS, [pair_row(0, "a", 0), pair_row(1, "b", 0)])
    table = run.table_path(VERSUS_PAIRS)
    lines = table.read_text().splitlines(keepends=True)
    table.write_text(lines[0] + line + "\n" + lines[1])
    before = folder_state(run.path)
    r = lab("sweep", "--resume", run.path.name, "--runs-dir", str(tmp_path / "runs"), env=nowhere(tmp_path))
    one_line_error(r, 1, f"pairs.jsonl{says}")
    assert len(r.stderr.strip().splitlines()) == 1 and folder_state(run.path) == before
    r = lab("compare", run.path.name, "--runs-dir", str(tmp_path / "runs"))
    one_line_error(r, 1, f"pairs.jsonl{says}")


# --- odd folders ------------------------------------------------------------------------------------------------


def test_a_side_folder_without_its_manifest_is_refused_before_any_side_is_touched(tmp_path: Path) -> None:
    run = interleaved(tmp_path, "sweep")
    (run.path / "b" / "manifest.json").unlink()
    before = folder_state(run.path)
    r = lab("sweep", "--resume", run.path.name, "--runs-dir", str(tmp_path / "runs"), env=nowhere(tmp_path))
    one_line_error(r, 1, "a side folder without its manifest")
    assert folder_state(run.path) == before  # side a not marked running, no engine built first


def test_a_complete_interleaved_run_is_never_resumed(tmp_path: Path) -> None:
    run = interleaved(tmp_path, "sweep", ready=SIDES)
    run.complete()
    before = folder_state(run.path)
    for ref in (run.path.name, f"{run.path.name}/a"):
        r = lab("sweep", "--resume", ref, "--runs-dir", str(tmp_path / "runs"), env=nowhere(tmp_path))
        one_line_error(r, 1, run.path.name)
        assert "complete" in r.stderr or "--resume" in r.stderr
    assert folder_state(run.path) == before
