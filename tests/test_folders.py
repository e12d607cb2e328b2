"""One bad run folder stops nothing: a folder from a host, a colleague's push or a hand edit whose manifest has the
wrong shape, whose name or files are not what a run folder holds, or whose strings hold markup, is skipped by every
reader (ingest, ls, the newest-run lookup a sweep's plan makes) in one line naming it and what is wrong, or shown as
text; and the newest run is the one the lab had last, not the one claiming the latest start."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from labcli import lab, one_line_error

from lab.catalog.arrivals import arrived_utc
from lab.catalog.ingest import ingest
from lab.catalog.newest import newest, newest_of, newest_run, newest_runs
from lab.catalog.tables import RUNS, RunRecord, load_table, unflatten
from lab.core.runs import RunFolder, utc_now
from lab.core.schemas import ArmStats, Interval, SweepPoint
from lab.core.schemas.raw import SWEEP_POINTS, SWEEP_SAMPLES
from lab.experiments.sweep.planning import measured_before

pytestmark = pytest.mark.fast

SHA, HOST = "m1", "vm"


def sweep(root: Path, started: str, host: str = HOST, sha: str = SHA) -> Path:
    """A complete sweep run of model `sha` on `host` that says it started at `started`, with one server point
    (components and an interval: what a sweep's plan takes the spread of)."""
    run = RunFolder.create(root, "sweep", host, {})
    run.update(started_utc=started, model={"sha256": sha, "path": "/models/m1.gguf"})
    iv = Interval(value=20.0, lo=19.0, hi=21.0, n=5, processes=5)
    stats = ArmStats(median_ms=20.0, median_lo_ms=19.0, median_hi_ms=21.0, n_ok=5)
    run.rewrite(SWEEP_POINTS, [
        SweepPoint(point="L512-n64", L=512, new=64, n_kv_padded=768, measurable=True, baseline=stats, fake=stats,
                   genuine=stats, fake_vs_genuine_ci=iv.model_copy(update={"value": 1.0, "lo": 0.98, "hi": 1.02}))
    ])  # fmt: skip
    run.rewrite(SWEEP_SAMPLES, [])
    run.complete()
    return run.path


def edit_manifest(run: Path, **fields: Any) -> None:
    m = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**m, **fields}))


def renamed(run: Path, name: str) -> Path:
    run.rename(run.with_name(name))
    return run.with_name(name)


def linked(run: Path) -> Path:
    """The run moved out of the runs folder and a link to it left in its place."""
    elsewhere = run.parent.parent / "elsewhere" / run.name
    elsewhere.parent.mkdir()
    run.rename(elsewhere)
    run.symlink_to(elsewhere, target_is_directory=True)
    return run


def manifest_dir(run: Path) -> Path:
    (run / "manifest.json").unlink()
    (run / "manifest.json").mkdir()
    return run


def ready_dir(run: Path) -> Path:
    (run / ".ready").unlink()
    (run / ".ready").mkdir()
    return run


def written(data: bytes) -> Callable[[Path], Path]:
    def write(run: Path) -> Path:
        (run / "manifest.json").write_bytes(data)
        return run

    return write


def edited(**fields: Any) -> Callable[[Path], Path]:
    def edit(run: Path) -> Path:
        edit_manifest(run, **fields)
        return run

    return edit


# each: how a complete sweep folder is damaged (returning its path now), and what the one line names
CRAFTED: dict[str, tuple[Callable[[Path], Path], str]] = {
    "engine.source is a string": (edited(engine={"source": "main"}), "engine.source"),
    "engine is a list": (edited(engine=["x"]), "engine"),
    "model.sha256 is a number": (edited(model={"sha256": 5}), "model.sha256"),
    "lab.dirty says maybe": (edited(lab={"commit": "abc", "dirty": "maybe"}), "lab.dirty"),
    "a warning list is a string": (edited(results={"host_state": {"warnings": "hot"}}), "results.host_state.warnings"),
    "params is a list": (edited(params=["a"]), "params"),
    "params.server is a string": (edited(params={"server": "fast"}), "params.server"),
    "host_summary holds a number": (edited(host_summary={"CPU(s)": 2}), "host_summary.CPU(s)"),
    "started_utc is not a time": (edited(started_utc="soon"), "started_utc"),
    "manifest.json is not JSON": (written(b"{not json"), "manifest"),
    "manifest.json is a JSON list": (written(b"[]"), "manifest"),
    "manifest.json is empty": (written(b""), "manifest"),
    "manifest.json is not UTF-8": (written(b'{"run_id": "\xff\xfe"}'), "manifest"),
    "manifest.json is a directory": (manifest_dir, "manifest.json"),
    "run_id is another run's": (edited(run_id="2026-12-01_vm_sweep_0f0f0f"), "run_id"),
    "run_id is no run id": (edited(run_id="../../etc"), "run_id"),
    "the folder's name is no run id": (lambda run: renamed(run, "my notes"), "not a run id"),
    ".ready is a directory": (ready_dir, ".ready"),
    "the run folder is a link": (linked, "a link"),
}


def crafted(case: str, runs: Path) -> tuple[Path, Path]:
    """A good complete sweep, and a later one damaged as `case` says (it would be the newest if it were read)."""
    good = sweep(runs, "2026-12-01T00:00:00Z")
    bad = sweep(runs, "2026-12-02T00:00:00Z")
    damage, _ = CRAFTED[case]
    return good, damage(bad)


def one_warning(err: str, folder: Path, needle: str) -> None:
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1, err
    assert lines[0].startswith("warning: ") and folder.name in lines[0] and needle in lines[0], lines[0]


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_bad_folder_is_skipped_by_ingest_in_one_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    good, bad = crafted(case, runs)
    capsys.readouterr()
    r = ingest(runs, tmp_path / "catalog")
    assert (r.runs, r.in_figures, r.rows["sweep_points"]) == (1, 1, 1)
    one_warning(capsys.readouterr().err, bad, CRAFTED[case][1])
    assert list(load_table(tmp_path / "catalog", RUNS)["run_id"]) == [good.name]


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_bad_folder_is_listed_as_unreadable_by_catalog_ls(case: str, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    good, bad = crafted(case, runs)
    r = lab("catalog", "ls", "--runs-dir", str(runs))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert good.name in r.stdout and "unreadable" in r.stdout, r.stdout
    listed = json.loads(lab("catalog", "ls", "--runs-dir", str(runs), "--json").stdout)
    assert [x["run_id"] for x in listed if "error" not in x] == [good.name]
    (why,) = [x["error"] for x in listed if "error" in x]
    assert CRAFTED[case][1] in why and bad.name in why, why


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_bad_folder_is_skipped_by_the_newest_run_a_sweep_plans_from(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lookup every default `lab sweep` makes once its first process started (a traceback there used to mark
    the sweep failed)."""
    runs = tmp_path / "runs"
    good, bad = crafted(case, runs)
    capsys.readouterr()
    assert newest_runs(runs, "sweep", SHA, HOST, "") == [good]
    one_warning(capsys.readouterr().err, bad, CRAFTED[case][1])
    before = measured_before(runs, SHA, HOST, "server")
    assert before.source == f"the spread of {good.name}" and len(before.points) == 1


@pytest.mark.parametrize("case", ["engine.source is a string", "manifest.json is a JSON list", ".ready is a directory"])
def test_a_bad_folder_named_by_show_or_compare_is_one_line(case: str, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    good, bad = crafted(case, runs)
    one_line_error(lab("catalog", "show", bad.name, "--runs-dir", str(runs)), 1, bad.name)
    one_line_error(lab("compare", good.name, bad.name, "--runs-dir", str(runs)), 1, CRAFTED[case][1])


def test_a_bad_raw_table_of_the_newest_sweep_leaves_the_plan_the_one_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    good, bad = sweep(runs, "2026-12-01T00:00:00Z"), sweep(runs, "2026-12-02T00:00:00Z")
    (bad / "raw" / SWEEP_POINTS.file).write_text('{"point": 5}\n')
    capsys.readouterr()
    before = measured_before(runs, SHA, HOST, "server")
    assert before.source == f"the spread of {good.name}" and len(before.points) == 1
    one_warning(capsys.readouterr().err, bad, f"{SWEEP_POINTS.file}:1: bad SweepPoint row")


def test_a_complete_run_whose_raw_file_is_over_the_size_limit_is_skipped_by_ingest_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A raw file too large to read stops no other folder: its run is left out of the catalog, named."""
    from lab.core.jsonl import MAX_RAW_BYTES

    runs = tmp_path / "runs"
    good, bad = sweep(runs, "2026-12-01T00:00:00Z"), sweep(runs, "2026-12-02T00:00:00Z")
    with (bad / "raw" / SWEEP_POINTS.file).open("wb") as fh:  # sparse: its size without its bytes
        fh.truncate(MAX_RAW_BYTES + 1)
    capsys.readouterr()
    r = ingest(runs, tmp_path / "catalog")
    assert (r.runs, r.in_figures, r.rows["sweep_points"]) == (1, 1, 1)
    one_warning(capsys.readouterr().err, bad, f"{SWEEP_POINTS.file}: {MAX_RAW_BYTES + 1:,} bytes, over the limit")
    assert list(load_table(tmp_path / "catalog", RUNS)["run_id"]) == [good.name]


MARKUP = "[/x][bold]"
CONTROL = "\x1b]0;owned\x07\x1b[2J"


def test_markup_and_control_characters_from_a_folder_are_shown_as_text(tmp_path: Path) -> None:
    """A host name holding markup used to raise MarkupError in `lab catalog ls`; one holding an escape sequence
    would drive the terminal."""
    runs = tmp_path / "runs"
    nuc = sweep(runs, "2026-12-01T00:00:00Z", host=f"nuc{MARKUP}{CONTROL}")
    old = RunFolder.create(runs, "sweep", "vm", {})
    edit_manifest(old.path, experiment=f"arms{MARKUP}")  # an unreadable folder: its reason names the experiment
    r = lab("catalog", "ls", "--runs-dir", str(runs))
    assert r.returncode == 0, r.stderr
    assert f"nuc{MARKUP}" in r.stdout and f"arms{MARKUP}" in r.stdout, r.stdout
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout and "\\x1b" in r.stdout, r.stdout
    cat = tmp_path / "catalog"
    assert lab("catalog", "ingest", "--runs-dir", str(runs), "--catalog-dir", str(cat)).returncode == 0
    r = lab("catalog", "headline", "--catalog-dir", str(cat), "--reports-dir", str(tmp_path / "reports"))
    assert r.returncode == 0, r.stderr
    assert f"nuc{MARKUP}" in r.stdout and "\x1b" not in r.stdout, r.stdout
    r = lab("catalog", "show", nuc.name, "--runs-dir", str(runs))
    assert r.returncode == 0 and "\x1b" not in r.stdout and "\\x1b" in r.stdout, r.stdout


def test_a_run_claiming_a_future_start_is_not_the_newest(tmp_path: Path) -> None:
    """A folder with this host's name and this model's sha256 that says it started in 2099 used to be the newest
    for the plan, the headline and the charts forever: it is as new as when it arrived here, and a run made after
    that is newer."""
    runs = tmp_path / "runs"
    before = sweep(runs, "2026-11-01T00:00:00Z")
    hostile = sweep(runs, "2099-01-01T00:00:00Z")  # arrives now, whatever it claims
    assert newest_run(runs, "sweep", SHA, HOST, "") == hostile  # it did arrive after `before`
    time.sleep(1.1)  # a start is stored to the second
    after = sweep(runs, utc_now())  # made here after it arrived
    assert newest_runs(runs, "sweep", SHA, HOST, "") == [after, hostile, before]
    ingest(runs, tmp_path / "catalog")  # the catalog's choice (the headline, the charts): the same rule
    records = [unflatten(x, RunRecord) for x in load_table(tmp_path / "catalog", RUNS).to_dict("records")]
    assert [r.run_id for r in newest(records, "sweep")] == [after.name]
    chosen = newest_of(records, "sweep")
    assert chosen is not None and chosen.run_id == after.name
    by_id = {r.run_id: r for r in records}  # its age: when it arrived; the others', when they started
    assert by_id[hostile.name].age_utc == arrived_utc(hostile) < by_id[after.name].age_utc.replace("Z", ".999Z")
    assert by_id[before.name].age_utc == "2026-11-01T00:00:00Z"


def test_a_copy_arrives_when_it_is_written_here_whatever_its_times_say(tmp_path: Path) -> None:
    """A folder `dvc pull`, a fetch or a copy brought, its files' times kept (`cp -p`, a tar's mtimes): its
    arrival is when its manifest was written here, and reading it writes nothing."""
    runs = tmp_path / "runs"
    made = sweep(tmp_path / "elsewhere", "2099-01-01T00:00:00Z")
    os.utime(made / "manifest.json", (4102444800, 4102444800))  # mtime in 2100
    runs.mkdir()
    copied = runs / made.name
    subprocess.run(["cp", "-pr", str(made), str(copied)], check=True)
    arrived = arrived_utc(copied)
    assert "2026" <= arrived < "2099" and arrived.endswith("Z")
    listing = sorted(p.name for p in runs.iterdir())
    assert newest_runs(runs, "sweep", SHA, HOST, "") == [copied]
    assert sorted(p.name for p in runs.iterdir()) == listing  # nothing written beside the runs


@pytest.mark.parametrize(
    "profile, needle",
    [({}, "records no profile chunk (params.profile.chunk)"), ({"chunk": "big"}, "params.profile.chunk")],
)
def test_a_profile_run_named_for_its_rates_without_a_chunk_is_one_line(
    profile: dict[str, Any], needle: str, tmp_path: Path
) -> None:
    """`--rates RUN` reads the profile's chunk from its manifest: a KeyError or a ValueError there used to be a
    traceback."""
    from lab.core.errors import LabError
    from lab.experiments.profile.rates import profile_fit

    run = RunFolder.create(tmp_path, "profile", HOST, {"profile": {"chunk": 512}})
    run.complete()
    edit_manifest(run.path, params={"profile": profile})
    with pytest.raises(LabError) as e:
        profile_fit(run.path.name, tmp_path)
    assert run.path.name in str(e.value) and needle in str(e.value) and "\n" not in str(e.value)
