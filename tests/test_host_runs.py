"""A host's run stays the host's, checked without a host: a resumed run fetched back only grows here (a file of the
host's replaces the local one only where the local one is a byte prefix of it, or where the host's resume cut a
table back to a prefix of the local rows and appended its own; what only this machine wrote is never taken from the
host's copy nor removed), and a local `--resume` of a run measured elsewhere is refused in one
line unless asked for (`--host-ok`), its recorded settings then checked as a user's own are.

The fetch's merge is run on two local folders here (the copy a host sent, and the local one); the same merge over
a real SSH server is in tests/test_faults_remote.py."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from labcli import lab, one_line_error

from lab.core.runs import RunError, RunFolder, utc_now
from lab.core.settings import load_settings
from lab.experiments.profile.dump import DUMP, keep_complete_processes
from lab.experiments.protocol import record_params, restore
from lab.experiments.sweep.run import Sweep
from lab.remote.connect import RemoteError
from lab.remote.fetch import files_in, merge_resumed

pytestmark = pytest.mark.fast

WHERE = "nuc16:~/prefill-lab/runs/x"


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def interrupted_run(runs: Path, host: str = "nuc16") -> RunFolder:
    """An interrupted sweep as a first fetch left it here: two rows, a log, the bundle's git state added here."""
    run = RunFolder.create(runs, "sweep", host, {"sweep": {"Ls": [256]}})
    (run.path / "raw" / "samples.jsonl").write_text('{"rep":0}\n{"rep":1}\n')
    (run.path / "logs" / "server.log").write_text("started\n")
    (run.path / "host" / "lscpu.txt").write_text("x86_64\n")
    run.fail("interrupted by SIGHUP")
    (run.path / "git" / "bundle").mkdir()
    (run.path / "git" / "bundle" / "commit.txt").write_text("abc\n")  # Deployment.record: this machine's own
    run.add_results(model_push={"sent_bytes": 7})  # a result only this machine writes
    return run


def hosts_copy(run: RunFolder, tmp_path: Path, resumed: bool = True) -> Path:
    """The host's copy of `run`: the same folder as the host has it (without what was added here), resumed."""
    there = tmp_path / "there"
    shutil.copytree(run.path, there)
    shutil.rmtree(there / "git" / "bundle")
    host = RunFolder(there)
    host.update(results={})
    if resumed:
        host.update(resumed_utc=[utc_now()], status="running")
    return there


def test_a_file_the_host_continued_replaces_the_local_one_and_what_only_here_has_stays(tmp_path: Path) -> None:
    run = interrupted_run(tmp_path / "runs")
    there = hosts_copy(run, tmp_path)
    with (there / "raw" / "samples.jsonl").open("a") as fh:
        fh.write('{"rep":2}\n')
    with (there / "logs" / "server.log").open("a") as fh:
        fh.write("resumed\n")
    (there / "raw" / "points.jsonl").write_text('{"L":256}\n')  # new there
    merge_resumed(there, run.path, WHERE)
    assert (run.path / "raw" / "samples.jsonl").read_text() == '{"rep":0}\n{"rep":1}\n{"rep":2}\n'
    assert (run.path / "logs" / "server.log").read_text() == "started\nresumed\n"
    assert (run.path / "raw" / "points.jsonl").read_text() == '{"L":256}\n'
    assert (run.path / "git" / "bundle" / "commit.txt").read_text() == "abc\n"  # only here: kept
    m = run.manifest()
    assert len(m.resumed_utc) == 1 and m.results["model_push"] == {"sent_bytes": 7}


def test_a_torn_last_line_here_that_the_hosts_resume_set_aside_is_no_difference(tmp_path: Path) -> None:
    """A writer killed mid-line left a fragment here; the host's lab set it aside when it resumed and appended."""
    run = interrupted_run(tmp_path / "runs")
    (run.path / "raw" / "samples.jsonl").write_text('{"rep":0}\n{"rep":1}\n{"re')
    there = hosts_copy(run, tmp_path)
    (there / "raw" / "samples.jsonl").write_text('{"rep":0}\n{"rep":1}\n{"rep":2}\n')
    merge_resumed(there, run.path, WHERE)
    assert (run.path / "raw" / "samples.jsonl").read_text() == '{"rep":0}\n{"rep":1}\n{"rep":2}\n'


def refused(there: Path, run: RunFolder, needle: str) -> None:
    """The merge is refused in one line saying `needle`, and nothing changed here."""
    before = tree(run.path)
    with pytest.raises(RemoteError) as e:
        merge_resumed(there, run.path, WHERE)
    line = str(e.value)
    assert "\n" not in line and needle in line and "nothing changed here" in line, line
    assert tree(run.path) == before


def test_the_same_number_of_other_rows_changes_nothing(tmp_path: Path) -> None:
    """Not resumed there since: only a resume drops rows (its resume's, below)."""
    run = interrupted_run(tmp_path / "runs")
    there = hosts_copy(run, tmp_path, resumed=False)
    (there / "raw" / "samples.jsonl").write_text('{"rep":0}\n{"rep":9}\n')
    refused(there, run, "raw/samples.jsonl differs there")


def test_more_rows_that_rewrite_the_local_ones_change_nothing(tmp_path: Path) -> None:
    """Even resumed there: a resume drops a tail of rows, it never changes the first and keeps the second."""
    run = interrupted_run(tmp_path / "runs")
    there = hosts_copy(run, tmp_path)
    (there / "raw" / "samples.jsonl").write_text('{"rep":9}\n{"rep":1}\n{"rep":2}\n')
    refused(there, run, "raw/samples.jsonl differs there")


def test_a_newer_file_that_does_not_continue_the_local_one_changes_nothing(tmp_path: Path) -> None:
    """A future mtime used to win: a file of other bytes replaced the local one."""
    run = interrupted_run(tmp_path / "runs")
    there = hosts_copy(run, tmp_path)
    log = there / "logs" / "server.log"
    log.write_text("something else\n")
    future = time.time() + 10 * 365 * 86400
    os.utime(log, (future, future))
    refused(there, run, "logs/server.log differs there")


def test_a_shorter_file_there_changes_nothing(tmp_path: Path) -> None:
    """Not resumed there since: only a resume drops rows (its resume's, below)."""
    run = interrupted_run(tmp_path / "runs")
    there = hosts_copy(run, tmp_path, resumed=False)
    (there / "raw" / "samples.jsonl").write_text('{"rep":0}\n')
    refused(there, run, "raw/samples.jsonl is shorter there")


@pytest.mark.parametrize(
    ("rel", "named"),
    [("git/bundle/commit.txt", "git/bundle"), ("git/image.json", "git/image.json"),
     ("git/pushed-from/commit.txt", "git/pushed-from")],
)  # fmt: skip
def test_what_only_this_machine_writes_is_never_taken_from_the_host(tmp_path: Path, rel: str, named: str) -> None:
    """The bundle's git state, the image record and the checkout it was pushed from are written here after the
    fetch (lab.remote.session.Deployment.record): a host's copy holding one is refused, whether the local copy has
    that file (a newer one there used to replace it) or not (it would stand for this machine's record)."""
    run = interrupted_run(tmp_path / "runs")
    there = hosts_copy(run, tmp_path)
    (there / rel).parent.mkdir(parents=True, exist_ok=True)
    (there / rel).write_text("abc\nforged by the host\n")
    refused(there, run, f"{named} is this machine's own record")
    with pytest.raises(RemoteError, match=f"{named} is this machine's own record"):
        files_in(there, WHERE)  # a new run's copy is checked the same way before it lands


def test_a_side_of_an_interleaved_run_resumed_there_is_merged_as_a_run(tmp_path: Path) -> None:
    """A side's manifest is rewritten by its resume (status, resumes): the same run, taken like the top one."""
    run = interrupted_run(tmp_path / "runs")
    side = RunFolder.create_side(run, "a", "sweep", {"sweep": {"Ls": [256]}})
    side.fail("interrupted")
    there = hosts_copy(run, tmp_path)
    RunFolder(there / "a").update(resumed_utc=[utc_now()], status="complete")
    (there / "a" / ".ready").write_text(utc_now() + "\n")
    merge_resumed(there, run.path, WHERE)
    assert RunFolder(run.path / "a").manifest().status == "complete" and (run.path / "a" / ".ready").exists()


def test_a_side_that_is_another_run_there_changes_nothing(tmp_path: Path) -> None:
    run = interrupted_run(tmp_path / "runs")
    RunFolder.create_side(run, "a", "sweep", {"sweep": {"Ls": [256]}}).fail("interrupted")
    there = hosts_copy(run, tmp_path)
    RunFolder(there / "a").update(started_utc="2020-01-01T00:00:00Z")
    refused(there, run, "a/manifest.json is not the same run there (its started_utc differ)")


# --- a host's resume that cut back a table to its whole units of work ---------------------------------------------

DEPTHS = (0, 128)


def process_rows(process: int, ms: float, upto: int | None = None) -> str:
    """An instrument process's lines as it writes them (`%.6f`): FUSED and TIMED at every depth, a node row after
    each TIMED wall; the first `upto` lines only (a process interrupted there)."""
    lines = []
    for v, d in enumerate(DEPTHS):
        at = f'"process":{process},"fill":"fake","check":false,"depth":{d},"rep":0'
        lines.append(f'{{"kind":"fused",{at},"visit":{v},"ms":{ms + d:.6f}}}\n')
        lines.append(f'{{"kind":"timed",{at},"visit":{v},"ms":{ms + d + 1:.6f}}}\n')
        lines.append(f'{{"kind":"node",{at},"name":"mul_mat","ms":{ms / 3:.6f},"calls":2}}\n')
    return "".join(lines[:upto])


def profile_interrupted_twice(tmp_path: Path, resumed: bool = True, again: int = 2) -> tuple[RunFolder, Path]:
    """A profile interrupted in process 1, as a first fetch left it here (its partial process's rows in the dump),
    and the host's copy after its resume cut the dump back to process 0 (the lab's own resume, which rewrites the
    rows it keeps) and was interrupted in process 1 again, `again` of its rows in the dump this time."""
    run = interrupted_run(tmp_path / "runs")
    meta = '{"kind":"meta","n_layer":2,"chunk":128,"process":0}\n'
    (run.path / "raw" / f"{DUMP}.jsonl").write_text(meta + process_rows(0, 10.5) + process_rows(1, 11.25, upto=4))
    there = hosts_copy(run, tmp_path, resumed=resumed)
    assert keep_complete_processes(RunFolder(there), 2 * len(DEPTHS)) == 1
    with (there / "raw" / f"{DUMP}.jsonl").open("a") as fh:
        fh.write(process_rows(1, 12.75, upto=again))
    return run, there


@pytest.mark.parametrize("again", [2, 0])
def test_a_table_the_hosts_resume_cut_back_to_whole_units_and_grew_again_is_taken_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], again: int
) -> None:
    """The local rows of process 1 (unfinished) were dropped by the host's resume, which measured it again: a byte
    prefix rule refused every later fetch of the run, the local copy stuck at what the first fetch brought. None
    of its new rows in the dump yet (killed before its part was merged) is the same."""
    run, there = profile_interrupted_twice(tmp_path, again=again)
    hosts = (there / "raw" / f"{DUMP}.jsonl").read_bytes()
    capsys.readouterr()
    merge_resumed(there, run.path, WHERE)
    assert (run.path / "raw" / f"{DUMP}.jsonl").read_bytes() == hosts
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("warning: ") and f"raw/{DUMP}.jsonl" in line and "4 local rows" in line, line
    assert len(run.manifest().resumed_utc) == 1


def test_a_table_cut_back_there_without_a_new_resume_there_changes_nothing(tmp_path: Path) -> None:
    """Only a resume rewrites a table: a host that did not resume the run since cannot have dropped rows."""
    run, there = profile_interrupted_twice(tmp_path, resumed=False)
    refused(there, run, f"raw/{DUMP}.jsonl differs there")


def test_a_table_whose_kept_rows_were_changed_there_changes_nothing_even_after_a_resume(tmp_path: Path) -> None:
    """A resume drops a tail of whole rows; a row changed in the middle of what it kept is no resume's."""
    run, there = profile_interrupted_twice(tmp_path)
    dump = there / "raw" / f"{DUMP}.jsonl"
    lines = dump.read_text().splitlines(keepends=True)
    assert '"kind":"fused","process":0,"fill":"fake","check":false,"depth":128' in lines[4]
    lines[4] = lines[4].replace('"ms":138.5', '"ms":1.5')
    dump.write_text("".join(lines))
    refused(there, run, f"raw/{DUMP}.jsonl differs there")


# --- a local --resume of a host's run ------------------------------------------------------------------------------


@pytest.fixture
def here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This machine named `here-box`, an engine that cannot be built (nothing in these tests may get that far)."""
    monkeypatch.setenv("LAB_HOST_NAME", "here-box")
    monkeypatch.setenv("LAB_ENGINE__SOURCE_MODE", "path")
    monkeypatch.setenv("LAB_ENGINE__PATH", str(tmp_path / "no-llama.cpp"))
    return tmp_path / "runs"


def sweep_run(runs: Path, host: str, **server: object) -> RunFolder:
    """An incomplete sweep measured on `host`, its params as the lab records them (server settings set as given)."""
    s = load_settings(sweep={"Ls": [256], "news": [16]})
    params = record_params(Sweep(), s)
    params["server"].update(server)
    run = RunFolder.create(runs, "sweep", host, params)
    run.fail("interrupted by SIGINT")
    return run


def test_a_local_resume_of_a_run_measured_on_another_host_is_refused(here: Path) -> None:
    run = sweep_run(here, "nuc16")
    r = lab("sweep", "--resume", run.path.name, "--runs-dir", str(here))
    one_line_error(r, 2, f"{run.path.name} was measured on nuc16, not on this machine (here-box)")
    assert "--host-ok" in r.stderr
    assert run.manifest().status == "incomplete" and not run.manifest().resumed_utc


def test_a_local_resume_of_a_fetched_run_is_refused_whatever_host_it_names(here: Path) -> None:
    run = sweep_run(here, "here-box")
    (run.path / "git" / "image.json").write_text("{}\n")  # what a fetch from a host adds here
    before = tree(run.path)
    r = lab("sweep", "--resume", run.path.name, "--runs-dir", str(here))
    one_line_error(r, 2, f"{run.path.name} was fetched from a host")
    assert tree(run.path) == before  # refused before anything is written: the run folder as it was


def test_host_ok_resumes_it_here_and_its_extra_args_are_checked_as_the_users_own(here: Path, tmp_path: Path) -> None:
    """`--log-file PATH` from a host's manifest would open any path here for writing."""
    target = tmp_path / "written-by-the-server.txt"
    run = sweep_run(here, "nuc16", extra_args=["--log-file", str(target)])
    r = lab("sweep", "--resume", run.path.name, "--host-ok", "--runs-dir", str(here))
    one_line_error(r, 1, f"{run.path.name}: its recorded params do not fit this lab's settings")
    assert "--log-file" in r.stderr.splitlines()[0] and not target.exists()
    assert not run.manifest().resumed_utc


@pytest.mark.parametrize(
    "flag",
    [
        ["--log-file", "/tmp/lab-log"],
        ["--log-file=/tmp/lab-log"],
        ["-lcd", "/tmp/lab-cache"],
        ["-hf", "some/repo"],
        ["--slot-save-path", "/tmp/lab-slots"],
    ],
)
def test_a_flag_that_writes_a_path_the_lab_does_not_control_is_refused_in_extra_args(
    here: Path, tmp_path: Path, flag: list[str]
) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(f"server:\n  extra_args: {json.dumps(flag)}\n")
    r = lab("sweep", "--runs-dir", str(here), env={"LAB_PARAMS_FILE": str(params)})
    one_line_error(r, 2, f"{flag[0].split('=')[0]} writes")
    assert not here.exists()


def test_a_resumed_runs_settings_are_checked_as_a_whole_like_the_users_own(here: Path) -> None:
    """Each section of a manifest's params was validated on its own: a context too small for the recorded grid
    (refused from params.yaml or a flag) passed when it came from a manifest."""
    run = sweep_run(here, "here-box", ctx_size=256)
    with pytest.raises(RunError, match=r"its recorded params do not fit this lab's settings.*ctx_size is 256"):
        restore(Sweep(), load_settings(), run)
