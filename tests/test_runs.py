"""Write-once run folders: never overwritten, bad rows named by file and line, interruptions recorded."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from lab.core.jsonl import read_jsonl
from lab.core.runs import RunError, RunFolder, RunInterrupted, resolve_run
from lab.core.schemas import PrefillTps
from lab.core.schemas.raw import PREFILL_TPS

pytestmark = pytest.mark.fast


def tps(depth: int) -> PrefillTps:
    return PrefillTps(depth=depth, chunk=64, tps=1000.0, avg_ms=64.0, stddev_ms=1.0, reps=3)


def test_create_layout_and_never_overwrite(tmp_path: Path) -> None:
    a = RunFolder.create(tmp_path, "sweep", "nuc16", {"x": 1})
    b = RunFolder.create(tmp_path, "sweep", "nuc16", {"x": 1})
    assert a.path != b.path
    assert "_nuc16_sweep_" in a.path.name
    for sub in ("host", "git", "logs", "raw"):
        assert (a.path / sub).is_dir()
    m = a.manifest()
    assert (m.status, m.experiment, m.host, m.params) == ("running", "sweep", "nuc16", {"x": 1})
    with pytest.raises(FileExistsError):
        a.path.mkdir()  # the exclusive mkdir is what protects a folder


def test_complete_writes_ready_last_and_is_final(tmp_path: Path) -> None:
    run = RunFolder.create(tmp_path, "sweep", "h", {})
    run.append(PREFILL_TPS, [tps(0), tps(512)])
    assert not run.ready
    run.complete()
    assert run.ready and run.manifest().status == "complete" and run.manifest().finished_utc
    with pytest.raises(RunError, match="complete"):
        run.begin_resume("sweep")


def test_bad_row_is_rejected_with_file_and_line(tmp_path: Path) -> None:
    run = RunFolder.create(tmp_path, "sweep", "h", {})
    run.append(PREFILL_TPS, [tps(0)])
    with run.table_path(PREFILL_TPS).open("a") as fh:
        fh.write('{"depth": "deep", "chunk": 64}\n')
    with pytest.raises(RunError, match=r"prefill_tps\.jsonl:2: bad PrefillTps row: depth"):
        run.read(PREFILL_TPS)


def test_torn_last_line_only_tolerated_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(tps(0).model_dump_json() + "\n" + '{"depth": 5')
    with pytest.raises(RunError, match=r"t\.jsonl:2"):
        read_jsonl(path, PrefillTps)
    assert [r.depth for r in read_jsonl(path, PrefillTps, tolerate_torn_tail=True)] == [0]


def test_guard_marks_incomplete_with_reason(tmp_path: Path) -> None:
    run = RunFolder.create(tmp_path, "sweep", "h", {})
    with pytest.raises(ZeroDivisionError), run.guard():
        _ = 1 / 0
    m = run.manifest()
    assert m.status == "incomplete" and "ZeroDivisionError" in m.reason
    with pytest.raises(RunError, match="is a sweep run, not profile"):
        run.begin_resume("profile")
    assert run.begin_resume("sweep").status == "running"
    assert len(run.manifest().resumed_utc) == 1


def test_resume_keeps_whole_units_only(tmp_path: Path) -> None:
    """The one resume path: units whose rows are whole are kept, the rest (and a torn last line) go."""
    run = RunFolder.create(tmp_path, "sweep", "h", {})
    run.append(PREFILL_TPS, [tps(0), tps(0), tps(512)])
    with run.table_path(PREFILL_TPS).open("a") as fh:
        fh.write('{"depth": 10')  # killed mid-line
    kept = run.keep_whole(PREFILL_TPS, lambda r: r.depth, lambda _d, rows: len(rows) == 2)
    assert list(kept) == [0] and [r.depth for r in run.read(PREFILL_TPS)] == [0, 0]
    raw = run.keep_whole("prefill_tps", lambda r: r["depth"])  # plain JSON rows, every unit whole
    assert list(raw) == [0] and len(raw[0]) == 2


def test_guard_turns_sigterm_into_incomplete(tmp_path: Path) -> None:
    run = RunFolder.create(tmp_path, "sweep", "h", {})
    with pytest.raises(RunInterrupted), run.guard():
        os.kill(os.getpid(), signal.SIGTERM)
    assert run.manifest().reason == "interrupted by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored


def test_a_signal_whose_exception_was_swallowed_still_interrupts(tmp_path: Path) -> None:
    """Python ignores an exception raised in an at-fork hook (logging's, after a server process starts): the
    signal still stops the run, at its next write or at its end, never letting it finish as complete."""
    run = RunFolder.create(tmp_path, "sweep", "h", {})
    with pytest.raises(RunInterrupted), run.guard():
        with contextlib.suppress(RunInterrupted):  # swallowed where it landed
            os.kill(os.getpid(), signal.SIGINT)
        run.append(PREFILL_TPS, [PrefillTps(depth=0, chunk=1, tps=1.0, avg_ms=1.0, stddev_ms=0.0, reps=1)])
    assert run.manifest().status == "incomplete" and run.manifest().reason == "interrupted by SIGINT"
    assert not run.table_path(PREFILL_TPS).exists()  # the write after the signal did not happen
    ended = RunFolder.create(tmp_path, "sweep", "h", {})
    with pytest.raises(RunInterrupted), ended.guard(), contextlib.suppress(RunInterrupted):
        os.kill(os.getpid(), signal.SIGTERM)
    assert ended.manifest().status == "incomplete"


def test_resolve_run_by_prefix(tmp_path: Path) -> None:
    run = RunFolder.create(tmp_path, "replay", "h", {})
    assert resolve_run(run.path.name[:-2], tmp_path).path == run.path
    assert resolve_run(str(run.path), tmp_path).path == run.path
    with pytest.raises(RunError, match="no unique run"):
        resolve_run("nope", tmp_path)


def test_resolve_run_beside_its_dvc_file(tmp_path: Path) -> None:
    """A DVC-tracked run has `<id>.dvc` beside its folder: the id (or a prefix, or the .dvc name) still names
    one run; a tracked run that was not pulled says how to get it."""
    run = RunFolder.create(tmp_path, "sweep", "h", {})
    (tmp_path / f"{run.path.name}.dvc").write_text("outs:\n- path: x\n")
    for ref in (run.path.name, run.path.name[:-3], f"{run.path.name}.dvc"):
        assert resolve_run(ref, tmp_path).path == run.path, ref
    (tmp_path / "2026-01-01_h_sweep_abcdef.dvc").write_text("outs:\n- path: x\n")
    with pytest.raises(RunError, match="tracked by DVC but not here yet: dvc pull"):
        resolve_run("2026-01-01_h_sweep_ab", tmp_path)


def test_params_are_inputs_and_never_change(tmp_path: Path) -> None:
    run = RunFolder.create(tmp_path, "profile", "h", {"chunk": 128})
    run.add_results(instrument_meta={"n_nodes": 661})
    run.add_results(clean_room={"stop_rc": 0})
    m = run.manifest()
    assert m.params == {"chunk": 128} and m.results == {
        "instrument_meta": {"n_nodes": 661},
        "clean_room": {"stop_rc": 0},
    }
    with pytest.raises(RunError, match="never change"):
        run.update(params={"chunk": 256})


def test_resume_of_a_run_whose_params_no_longer_validate_is_one_clear_error(tmp_path: Path) -> None:
    from lab.core.settings import load_settings
    from lab.experiments.protocol import run_experiment
    from lab.experiments.sweep.run import Sweep

    run = RunFolder.create(tmp_path, "sweep", "h", {"sweep": {"Ls": [-5]}, "server": {}})
    run.fail("interrupted")
    with pytest.raises(RunError, match="recorded params do not fit"):
        run_experiment(Sweep(), load_settings(runs_dir=tmp_path), resume=run)


def test_a_row_of_another_schema_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    from lab.core.schemas import SweepRound
    from lab.core.schemas.raw import SWEEP_ROUNDS

    run = RunFolder.create(tmp_path, "sweep", "h", {})
    with pytest.raises(TypeError, match=r"rounds\.jsonl takes SweepRound rows, not PrefillTps"):
        run.append(SWEEP_ROUNDS, [SweepRound(point="p", process=0, reps=1), tps(0)])  # type: ignore[list-item]
    assert not run.table_path(SWEEP_ROUNDS).exists()


# lines a hostile or damaged raw file may hold; each is one RunError naming the file and the line, never a traceback
GOOD = tps(0).model_dump_json().encode()
HOSTILE = {
    "a 5000-digit integer": b'{"depth": ' + b"9" * 5000 + b', "chunk": 64}',
    "nesting deeper than the parser goes": b'{"depth": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "a byte that is not UTF-8": b'{"depth": 0, "note": "\xff"}',
    "a line cut inside a UTF-8 character": '{"depth": 0, "task": "caf\u00e9"}'.encode()[:-3],
    "a NUL-filled tail of a crashed write": b"\0" * 64,
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_line_is_one_error_naming_file_and_line(case: str, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD + b"\n" + HOSTILE[case] + b"\n" + GOOD + b"\n")
    for schema, what in ((PrefillTps, "PrefillTps"), (None, "JSON")):
        with pytest.raises(RunError, match=rf"^{path}:2: bad {what} row: ") as e:
            read_jsonl(path, schema)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_document_is_one_error_naming_the_file(case: str, tmp_path: Path) -> None:
    from lab.core.jsonl import read_document

    path = tmp_path / "t.json"
    path.write_bytes(HOSTILE[case])
    with pytest.raises(RunError, match=rf"^{path}:1: bad PrefillTps: ") as e:
        read_document(path, PrefillTps)
    assert "\n" not in str(e.value)


def test_a_last_line_cut_inside_a_utf8_character_is_a_torn_tail(tmp_path: Path) -> None:
    """A resumed conversation with non-ASCII task ids can be killed mid-character."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD + b"\n" + HOSTILE["a line cut inside a UTF-8 character"])
    assert [r.depth for r in read_jsonl(path, PrefillTps, tolerate_torn_tail=True)] == [0]
    with pytest.raises(RunError, match=rf"{path}:2: bad PrefillTps row"):
        read_jsonl(path, PrefillTps)


def test_a_raw_file_over_the_size_limit_is_refused_by_name_unread(tmp_path: Path) -> None:
    from lab.core.jsonl import MAX_RAW_BYTES, read_document

    path = tmp_path / "huge.jsonl"
    with path.open("wb") as fh:  # sparse: its size without its bytes
        fh.truncate(MAX_RAW_BYTES + 1)
    with pytest.raises(RunError, match=rf"^{path}: .* over the limit of 512 MiB .*: not read$"):
        read_jsonl(path, PrefillTps)
    with pytest.raises(RunError, match=rf"^{path}: .* over the limit of 512 MiB"):
        read_document(path, PrefillTps)


def test_a_raw_file_over_the_row_limit_is_refused_by_name(tmp_path: Path) -> None:
    from lab.core.jsonl import MAX_RAW_ROWS

    path = tmp_path / "many.jsonl"
    path.write_bytes(b"{}\n" * (MAX_RAW_ROWS + 1))
    with pytest.raises(RunError, match=rf"^{path}: over the limit of 10,000,000 rows a raw file may hold: not read$"):
        read_jsonl(path, None)


def test_a_raw_file_over_a_callers_limit_is_refused_by_name(tmp_path: Path) -> None:
    from lab.core.jsonl import RawLimit

    path = tmp_path / "t.jsonl"
    path.write_bytes(b"{}\n{}\n")
    assert read_jsonl(path, None, limit=RawLimit(max_bytes=6, max_rows=2)) == [{}, {}]
    with pytest.raises(RunError, match=rf"^{path}: 6 bytes, over the limit of 5 bytes a raw file may hold"):
        read_jsonl(path, None, limit=RawLimit(max_bytes=5, max_rows=2))
    with pytest.raises(RunError, match=rf"^{path}: over the limit of 1 rows a raw file may hold: not read$"):
        read_jsonl(path, None, limit=RawLimit(max_bytes=6, max_rows=1))


def test_the_profiles_dump_is_read_within_its_own_larger_limit(tmp_path: Path) -> None:
    """A deep profile of a large model (80 layers, 50 processes) may dump more than a raw table may hold, after
    hours of measuring: its dump is read, and cut back on resume, within a bound of its own; every other table
    within the default."""
    from lab.core.jsonl import MAX_RAW_BYTES, MAX_RAW_ROWS
    from lab.experiments.profile.dump import DUMP, DUMP_LIMIT, keep_complete_processes, parse_dump

    assert DUMP_LIMIT.max_bytes >= 8 * 2**30 > MAX_RAW_BYTES and DUMP_LIMIT.max_rows > MAX_RAW_ROWS
    run = RunFolder.create(tmp_path, "profile", "vm", {})
    dump = run.table_path(DUMP)
    with dump.open("wb") as fh:  # a bad first line, then sparse: over the default limit without its bytes
        fh.write(b"not json\n")
        fh.truncate(MAX_RAW_BYTES + 1)
    with pytest.raises(RunError, match=rf"^{dump}: .* over the limit of 512 MiB"):
        read_jsonl(dump, None)
    for read in (lambda: parse_dump(dump), lambda: keep_complete_processes(run, 1)):  # read past the default limit
        with pytest.raises(RunError, match=rf"^{dump}:1: bad JSON row"):
            read()
    assert dump.stat().st_size == MAX_RAW_BYTES + 1


def test_a_side_of_an_interleaved_run_is_named_by_its_place(tmp_path: Path) -> None:
    from lab.core.run_ids import side_name

    run = RunFolder.create(tmp_path, "sweep", "vm", {})
    (run.path / "a").mkdir()
    assert side_name(run.path / "a") == f"{run.path.name}/a"
    assert side_name(run.path) is None and side_name(run.path / "raw") is None
    (tmp_path / "b").mkdir()  # beside no run's manifest
    assert side_name(tmp_path / "b") is None


def test_a_raw_file_that_is_not_a_regular_file_is_refused_unread(tmp_path: Path) -> None:
    """A FIFO (or a device) in a run folder would block the reader, or never end."""
    fifo = tmp_path / "sweep_points.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(RunError, match=rf"^{fifo}: not a regular file: not read$"):
        read_jsonl(fifo, PrefillTps)
    d = tmp_path / "points.json"
    d.mkdir()
    with pytest.raises(RunError, match=rf"^{d}: not a regular file"):
        read_jsonl(d, None)


def test_a_torn_tail_is_set_aside_before_the_next_append(tmp_path: Path) -> None:
    """A crash mid-line used to leave the fragment in place: the next row was glued to it and the table refused
    every later read."""
    run = RunFolder.create(tmp_path, "profile", "h", {})
    run.append(PREFILL_TPS, [tps(0)])
    path = run.table_path(PREFILL_TPS)
    with path.open("a") as fh:
        fh.write('{"depth": 512, "chu')  # killed mid-line
    run.append(PREFILL_TPS, [tps(512)])
    assert [r.depth for r in run.read(PREFILL_TPS)] == [0, 512]
    (aside,) = path.parent.glob("prefill_tps.jsonl.torn-*")
    assert aside.read_text() == '{"depth": 512, "chu'


def test_a_resumed_run_sets_its_torn_tails_aside(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A profile whose prefill_tps.jsonl had a torn line refused every later resume (it reads the table whole
    before it appends)."""
    run = RunFolder.create(tmp_path, "profile", "h", {})
    run.append(PREFILL_TPS, [tps(0)])
    with run.table_path(PREFILL_TPS).open("a") as fh:
        fh.write('{"depth": 512, "chu')
    run.fail("interrupted by SIGKILL")
    run.begin_resume("profile")
    assert [r.depth for r in run.read(PREFILL_TPS)] == [0]
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"warning: {run.table_path(PREFILL_TPS)}: its last line was cut mid-write")
    assert ".torn-" in line


def test_set_aside_torn_tail(tmp_path: Path) -> None:
    from lab.core.jsonl import set_aside_torn_tail

    path = tmp_path / "t.jsonl"
    assert set_aside_torn_tail(path) is None  # no file: nothing to do
    path.write_bytes(b"")
    assert set_aside_torn_tail(path) is None
    path.write_bytes(GOOD + b"\n")
    assert set_aside_torn_tail(path) is None and path.read_bytes() == GOOD + b"\n"
    path.write_bytes(GOOD + b"\n" + GOOD[:7])
    aside = set_aside_torn_tail(path)
    assert aside is not None and aside.read_bytes() == GOOD[:7] and path.read_bytes() == GOOD + b"\n"
    path.write_bytes(b"x" * 100_000)  # one torn line, longer than a read back from the end
    aside = set_aside_torn_tail(path)
    assert aside is not None and aside.read_bytes() == b"x" * 100_000 and path.read_bytes() == b""
