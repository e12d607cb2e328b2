"""What a hostile archive, a hostile host's listing or a typo can do, checked without a host: a tar never writes
outside its destination (with tarfile's own filter, and on a real Python without it), and a run id matches its
grammar before any path is built from it."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest
from labcli import lab, one_line_error

from lab.core.locks import LockError
from lab.core.run_ids import check_run_id
from lab.core.runs import RunError, RunFolder
from lab.core.safetar import UnsafeArchive, check_members, read_members, safe_extract

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent
OLD_PYTHON = Path("/usr/bin/python3")  # Debian 12's 3.11.2: no PEP 706 filters


def archive(*members: tarfile.TarInfo) -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.addfile(_file("ok.txt"), io.BytesIO(b"fine"))
        for m in members:
            tar.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
    return data.getvalue()


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 4
    return info


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o777
    return info


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def _special(name: str, kind: bytes = tarfile.CHRTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    return info


def _pax(name: str, **headers: str) -> tarfile.TarInfo:
    """A file whose pax header says what its ustar header cannot (a NUL in `path`, a negative `size`)."""
    info = _file(name)
    info.pax_headers = headers
    return info


class OldGnuSparse(tarfile.TarInfo):
    """A sparse member as GNU tar writes one by default (type S): the data it stores ends a file of `realsize`
    bytes, the rest of which is a hole (one entry of the header's sparse map, then the real size)."""

    realsize = 0

    def tobuf(
        self, format: int | None = tarfile.GNU_FORMAT, encoding: str | None = None, errors: str = "surrogateescape"
    ) -> bytes:
        head = bytearray(super().tobuf(tarfile.GNU_FORMAT, tarfile.ENCODING, "surrogateescape"))
        for at, value in ((386, self.realsize - self.size), (398, self.size), (483, self.realsize)):
            head[at : at + 12] = tarfile.itn(value, 12, tarfile.GNU_FORMAT)
        head[148:156] = b"%06o\0 " % tarfile.calc_chksums(bytes(head))[0]
        return bytes(head)


def sparse(kind: str, realsize: int = 8 << 30, tail: bytes = b"x" * 10_000) -> bytes:
    """An archive of ok.txt and `big`, a file of `realsize` bytes that stores only its last bytes (`tail`), in
    one of the encodings GNU tar writes (`tar --sparse`, `--format=pax --sparse-version=0.1` or `1.0`); about
    10 KB that tarfile extracts into an 8 GiB file."""
    hole = realsize - len(tail)
    info, data = tarfile.TarInfo("big"), tail
    if kind == "gnu":
        info = OldGnuSparse("big")
        info.type, info.realsize = tarfile.GNUTYPE_SPARSE, realsize
    elif kind == "pax 0.1":
        info.pax_headers = {"GNU.sparse.size": str(realsize), "GNU.sparse.map": f"{hole},{len(tail)}"}
    else:  # pax 1.0 and later: the map leads the data, the real size in the header
        major, _, minor = kind.removeprefix("pax ").partition(".")
        info.pax_headers = {"GNU.sparse.major": major, "GNU.sparse.minor": minor, "GNU.sparse.name": "big"}
        info.pax_headers["GNU.sparse.realsize"] = str(realsize)
        data = f"1\n{hole}\n{len(tail)}\n".encode().ljust(tarfile.BLOCKSIZE, b"\0") + tail
    info.size = len(data)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_file("ok.txt"), io.BytesIO(b"fine"))
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def realpath_overflow(dest: Path) -> list[tarfile.TarInfo]:
    """CVE-2025-4517's shape: directories reached through a chain of links whose expansion passes PATH_MAX, so
    os.path.realpath stops resolving there and tarfile's `data` filter (before 3.11.13, 3.12.11, 3.13.4) takes
    a link back up for one inside; through it, a link out of dest, a hard link to a file there, and writes."""
    steps = "abcdefghijklmnop"
    width = (os.pathconf(dest.parent, "PC_PATH_MAX") - len(str(dest)) - 1) // (len(steps) + 1)
    members, path = [], ""
    for step in steps:
        members += [_dir(os.path.join(path, "d" * width)), _link(os.path.join(path, step), "d" * width)]
        path = os.path.join(path, "d" * width)
    last = os.path.join(*steps, "l" * 254)
    return [
        *members,
        _link(last, os.path.join(*[".."] * len(steps))),  # dest, never expanded by realpath
        _link("escape", os.path.join(last, "..")),  # dest's parent
        _link("flaglink", "escape/flag", tarfile.LNKTYPE),
        _file("flaglink"),  # overwrites ../flag through the hard link
        _file("escape/newfile"),
    ]


HOSTILE: dict[str, list[tarfile.TarInfo] | bytes] = {
    "parent": [_file("../escaped.txt")],
    "absolute": [_file("/tmp/lab-escaped-absolute.txt")],
    "symlink out": [_link("out", "../../..")],
    "symlink in": [_link("in", "ok.txt")],  # a run folder or a source tree never needs one
    "symlink chain": [_link("a", "."), _link("a/b", ".."), _file("a/b/evil")],
    "hard link out": [_link("hard", "/etc/passwd", tarfile.LNKTYPE)],
    "hard link in": [_link("hard", "ok.txt", tarfile.LNKTYPE)],
    "device": [_special("dev")],
    "block device": [_special("blk", tarfile.BLKTYPE)],
    "fifo": [_special("fifo", tarfile.FIFOTYPE)],
    "contiguous file": [_special("cont", tarfile.CONTTYPE)],  # no tar the lab reads writes type 7
    "realpath overflow": [],  # realpath_overflow(dest): its lengths depend on where it is extracted
    # sparse: a few KB that extract into 8 GiB of holes, which ingest would then read
    "sparse, GNU": sparse("gnu"),
    "sparse, pax 0.1": sparse("pax 0.1"),
    "sparse, pax 1.0": sparse("pax 1.0"),
    "sparse, pax of a version tarfile does not read": sparse("pax 2.0"),
    "sparse map that is not numbers": sparse("pax 1.0").replace(b"1\n8589924592\n", b"x\nyyyyyyyyyy\n"),
    # names that would fail halfway (after earlier members are written) or reach a terminal
    "pax path out": [_pax("fine", path="../escaped.txt")],
    "NUL in a name": [_pax("fine", path="a\0b")],
    "newline in a name": [_file("a\nb")],
    "terminal escape in a name": [_file("\x1b]0;owned\x07")],
    "name part over 255 bytes": [_file("x" * 256)],
    "path over PATH_MAX": [_file("/".join(["y" * 200] * 21))],
    # members that collide: tarfile overwrites the first, or fails after writing some
    "same file twice": [_file("a"), _file("./a")],
    "file inside a file": [_file("a"), _file("a/b")],
    "file where a directory is": [_dir("a"), _file("a")],
    "directory where a file is": [_file("a"), _dir("a")],
    "negative size": [_pax("a", size="-5"), _file("b")],
    "cut short": archive(_file("a"), _file("b"))[: 3 * tarfile.BLOCKSIZE + 2],
}


def hostile(case: str, dest: Path) -> bytes:
    blob = realpath_overflow(dest) if case == "realpath overflow" else HOSTILE[case]
    return blob if isinstance(blob, bytes) else archive(*blob)


def outside(root: Path, *dests: Path) -> dict[str, str]:
    """What every entry under root but outside the destinations is and holds."""
    seen = {}
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(top, d) not in dests]
        for p in (Path(top, name) for name in dirs + files):
            kind = f"-> {os.readlink(p)}" if p.is_symlink() else p.read_text(errors="replace") if p.is_file() else "/"
            seen[str(p.relative_to(root))] = kind
    return seen


@pytest.mark.faults
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_archive_writes_nothing_outside(case: str, tmp_path: Path) -> None:
    """Only regular files and directories with relative names, checked before anything is written (tarfile's own
    filter is bypassable before 3.11.13 by CVE-2025-4517); the refusal is one line naming the member."""
    dest = tmp_path / "dest"
    dest.mkdir()
    (tmp_path / "flag").write_text("a file of the user's\n")
    before = outside(tmp_path, dest)
    blob = hostile(case, dest)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar, pytest.raises(UnsafeArchive, match=r"^refusing") as e:
        safe_extract(tar, dest)
    assert len(str(e.value).splitlines()) == 1 and len(str(e.value)) < 400, str(e.value)
    assert list(dest.iterdir()) == []
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar, pytest.raises(UnsafeArchive, match=r"^refusing"):
        check_members(read_members(tar, dest), dest)  # the checks every Python gets
    assert outside(tmp_path, dest) == before and not Path("/tmp/lab-escaped-absolute.txt").exists()


@pytest.mark.faults
def test_an_archive_of_files_and_directories_extracts_as_the_user_s(tmp_path: Path) -> None:
    """A run folder as a host's `tar -C run -cf - .` packs it: `./` names, directories, files."""
    info = [_dir("."), _dir("./raw"), _file("./raw/rows.jsonl"), _file("./manifest.json")]
    info[2].mode, info[3].mode = 0o6777, 0o644  # setuid, setgid, world-writable: dropped
    with tarfile.open(fileobj=io.BytesIO(archive(*info))) as tar:
        safe_extract(tar, tmp_path)
    assert (tmp_path / "raw" / "rows.jsonl").read_text() == "xxxx" and (tmp_path / "ok.txt").read_text() == "fine"
    assert (tmp_path / "raw" / "rows.jsonl").stat().st_mode & 0o7777 == 0o755
    assert (tmp_path / "manifest.json").stat().st_uid == os.getuid()


@pytest.mark.faults
@pytest.mark.skipif(not OLD_PYTHON.exists(), reason="no system python3")
def test_on_a_python_without_tar_filters_the_same_archives_are_refused(tmp_path: Path) -> None:
    """The remote flow's fetch and the engine source's unpack on the oldest Python `requires-python` allows."""
    version = subprocess.run(
        [OLD_PYTHON, "-c", "import tarfile; print(hasattr(tarfile, 'data_filter'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for case in HOSTILE:
        (tmp_path / f"{case}.tar").write_bytes(hostile(case, tmp_path / case))
    (tmp_path / "good.tar").write_bytes(archive())
    (tmp_path / "flag").write_text("a file of the user's\n")
    before = outside(tmp_path)
    script = (
        "import sys, tarfile, pathlib; from lab.core.safetar import safe_extract, UnsafeArchive\n"
        "for f in sorted(pathlib.Path(sys.argv[1]).glob('*.tar')):\n"
        "    d = f.with_suffix(''); d.mkdir()\n"
        "    try:\n"
        "        with tarfile.open(f) as t: safe_extract(t, d)\n"
        "        print(f.stem, 'extracted', (d / 'ok.txt').read_text(), sep='\\t')\n"
        "    except UnsafeArchive as e: print(f.stem, 'refused', len(str(e).splitlines()), repr(str(e)), sep='\\t')\n"
    )
    r = subprocess.run(
        [OLD_PYTHON, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    got = {case: tuple(outcome[:2]) for case, *outcome in (line.split("\t") for line in r.stdout.splitlines())}
    refused = {case: ("refused", "1") for case in HOSTILE}  # in one line
    assert got == {"good": ("extracted", "fine"), **refused}, (version, r.stdout)
    dests = [tmp_path / case for case in (*HOSTILE, "good")]
    assert outside(tmp_path, *dests) == before
    assert all(not any((tmp_path / case).iterdir()) for case in HOSTILE)


@pytest.mark.faults
@pytest.mark.skipif(shutil.which("tar") is None, reason="no tar to make the archives with")
def test_gnu_tar_s_archives_of_a_sparse_8_gib_file_are_refused_in_every_encoding(tmp_path: Path) -> None:
    """The issue's case from the tool that makes it: `tar --sparse` packs an 8 GiB file of holes into 10 KB, which
    tarfile would extract into 8 GiB; each encoding GNU tar has for it is refused before anything is written."""
    src = tmp_path / "src"
    src.mkdir()
    with (src / "big").open("wb") as f:
        f.truncate(8 << 30)
        f.write(b"tail")
    encodings = {
        "gnu": ["--format=gnu"],
        **{v: ["--format=pax", f"--sparse-version={v}"] for v in ("0.0", "0.1", "1.0")},
    }
    for name, flags in encodings.items():
        packed = tmp_path / f"{name}.tar"
        subprocess.run(["tar", "--sparse", *flags, "-C", src, "-cf", packed, "big"], check=True)
        assert packed.stat().st_size <= 10240, name
        dest = tmp_path / f"{name}-dest"
        dest.mkdir()
        with tarfile.open(packed) as tar, pytest.raises(UnsafeArchive, match=r"^refusing .*'big' is a sparse file"):
            safe_extract(tar, dest)
        assert list(dest.iterdir()) == [], name


@pytest.mark.faults
def test_an_archive_past_the_lab_s_bounds_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """At most `max_members` members and `max_bytes` bytes in all (a compressed archive cannot unpack into more):
    one line names the member that crosses a bound, and nothing is written; within them, all of it extracts."""
    blob = archive(*[_file(f"f{i:02}") for i in range(20)])  # ok.txt and 20 files, 4 bytes each
    for bound, refused in (
        (dict(max_members=10), r"'f09' is past the first 10 members"),
        (dict(max_bytes=50), r"'f11' takes the archive past 50 bytes"),
    ):
        with (
            tarfile.open(fileobj=io.BytesIO(blob)) as tar,
            pytest.raises(UnsafeArchive, match=rf"^refusing .*: {refused}") as e,
        ):
            safe_extract(tar, tmp_path, **bound)
        assert len(str(e.value).splitlines()) == 1 and list(tmp_path.iterdir()) == []
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        safe_extract(tar, tmp_path, max_members=21, max_bytes=84)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"f{i:02}" for i in range(20)] + ["ok.txt"]


@pytest.mark.parametrize("bad", [".", "..", "../x", "/etc", "a b", "2026-12-02_h_sweep_1a2b3c/../x", ""])
def test_a_run_id_matches_its_grammar_before_it_becomes_a_path(bad: str) -> None:
    with pytest.raises(RunError, match="is not a run id"):
        check_run_id(bad, "--resume")
    assert check_run_id("2026-12-02_nuc16_trace_replay_1a2b3c", "--resume") == "2026-12-02_nuc16_trace_replay_1a2b3c"


def test_a_second_writer_of_a_run_is_refused_naming_the_holder(tmp_path: Path) -> None:
    """One writer per run folder: while this process holds a run, a real second `lab` process resuming it gets
    one line naming this pid, and the run's files are as they were; the lock goes with its holder."""
    import json
    import os
    import sys

    from lab.core.runs import RunFolder
    from lab.core.shell import LocalShell

    runs = tmp_path / "runs"
    run = RunFolder.create(runs, "sweep", LocalShell().name, {"sweep": {}})  # measured here: resumable here
    run.fail("interrupted by SIGTERM")
    before = {p.name: p.read_bytes() for p in run.path.rglob("*") if p.is_file()}
    lab = [str(Path(sys.executable).parent / "lab"), "sweep", "--resume", run.path.name, "--runs-dir", str(runs)]
    env = {**os.environ, "COLUMNS": "200"}
    with run.writer():
        r = subprocess.run(lab, capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr
        assert r.stderr.strip() == f"{run.path.name} is being written by process {os.getpid()}; wait for it or stop it"
    assert {p.name: p.read_bytes() for p in run.path.rglob("*") if p.is_file()} == before
    assert json.loads((run.path / "manifest.json").read_text())["status"] == "incomplete"
    with run.writer():  # released: this process (or the next writer) takes it again
        pass


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's temp directory in place of the machine's (where the writer locks live)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    assert tempfile.gettempdir() == str(tmp)
    return tmp


def _refused(run: RunFolder, needle: str) -> None:
    with pytest.raises(LockError, match=re.escape(needle)) as e, run.writer():
        pytest.fail("the writer lock was taken")
    assert len(str(e.value).splitlines()) == 1, str(e.value)


@pytest.mark.faults
def test_a_symlink_planted_at_a_writer_lock_truncates_nothing(own_tmp: Path, tmp_path: Path) -> None:
    """Another local user plants a link named like a run's lock file, to one of the user's files (a symbolic
    link, or a hard link where the kernel allows one)."""
    run = RunFolder.create(tmp_path / "runs", "sweep", "h", {})
    with run.writer():
        pass
    (lock,) = (own_tmp / f"prefill-lab-locks-{os.getuid()}").glob(f"{run.path.name}-*.lock")
    victim = tmp_path / "thesis.tex"
    victim.write_text("three years of work\n")
    lock.unlink()
    lock.symlink_to(victim)
    _refused(run, f"the lock file {lock} is a symbolic link")
    assert victim.read_text() == "three years of work\n"
    lock.unlink()
    lock.hardlink_to(victim)
    _refused(run, f"the lock file {lock} is not a file of yours alone")
    assert victim.read_text() == "three years of work\n"


@pytest.mark.faults
def test_the_writer_lock_directory_is_the_user_s_alone(own_tmp: Path, tmp_path: Path) -> None:
    """Created 0700; one of the user's own with looser modes is tightened; a link in its place is refused."""
    run = RunFolder.create(tmp_path / "runs", "sweep", "h", {})
    locks = own_tmp / f"prefill-lab-locks-{os.getuid()}"
    with run.writer():
        assert locks.stat().st_mode & 0o777 == 0o700
        assert all(p.stat().st_mode & 0o077 == 0 for p in locks.iterdir())
    locks.chmod(0o777)
    with run.writer():
        pass
    assert locks.stat().st_mode & 0o777 == 0o700
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for p in locks.iterdir():
        p.unlink()
    locks.rmdir()
    locks.symlink_to(elsewhere)
    _refused(run, f"the lock directory {locks} is a symbolic link or not a directory")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.faults
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the lock directory to another user")
def test_a_writer_lock_directory_or_file_of_another_user_is_refused(own_tmp: Path, tmp_path: Path) -> None:
    run = RunFolder.create(tmp_path / "runs", "sweep", "h", {})
    locks = own_tmp / f"prefill-lab-locks-{os.getuid()}"
    locks.mkdir(mode=0o700)
    os.chown(locks, 65534, 65534)
    _refused(run, f"the lock directory {locks} belongs to uid 65534")
    os.chown(locks, os.getuid(), os.getgid())
    with run.writer():
        pass
    (lock,) = locks.glob(f"{run.path.name}-*.lock")
    os.chown(lock, 65534, 65534)
    _refused(run, f"the lock file {lock} is not a file of yours")


def test_a_run_folder_records_no_credentials_and_no_secret_files(tmp_path: Path) -> None:
    """A git_url with credentials, a DVC remote password in a tracked config, a tracked .env: none of them
    reaches the run folder's git record or an error message."""
    from lab.core.redact import redact_text, redact_url
    from lab.core.shell import LocalShell
    from lab.core.snapshot import snapshot_git
    from lab.engine.source import SourceError, _run

    assert (
        redact_url("clone https://ann:hunter2@git.example/x.git failed") == "clone https://***@git.example/x.git failed"
    )
    assert redact_url("ssh://tok@host/x and http://host/y") == "ssh://***@host/x and http://host/y"
    assert (
        redact_text("  password = hunter2\n+token: abc\nurl = s3://bucket")
        == "  password = ***\n+token: ***\nurl = s3://bucket"
    )
    with pytest.raises(SourceError) as e:
        _run(["git", "clone", "--quiet", "https://ann:hunter2@127.0.0.1:9/x.git", str(tmp_path / "x")])
    assert "hunter2" not in str(e.value) and "ann" not in str(e.value) and "***@127.0.0.1" in str(e.value)

    repo = tmp_path / "repo"
    (repo / ".dvc").mkdir(parents=True)
    (repo / ".dvc" / "config").write_text("[core]\n    remote = r\n")
    (repo / ".env").write_text("A=1\n")
    (repo / "notes.txt").write_text("hello\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    (repo / ".dvc" / "config").write_text("[core]\n    remote = r\n['remote \"r\"']\n    password = hunter2\n")
    (repo / ".env").write_text("API_KEY=sk-live-123\n")
    (repo / "notes.txt").write_text("hello\nremote: https://ann:hunter2@dvc.example/store\n")
    got = snapshot_git(LocalShell(), repo, tmp_path / "git")
    diff = (tmp_path / "git" / "git_diff.patch").read_text()
    assert got["dirty"] and "notes.txt" in diff and ".dvc/config" in diff, diff
    assert "hunter2" not in diff and "sk-live-123" not in diff and ".env" not in diff, diff


def test_a_torn_profile_part_does_not_block_the_next_resume(tmp_path: Path) -> None:
    """A killed instrument leaves a part whose last line is cut; merged and resumed twice, the dump still reads."""
    from lab.core.runs import RunFolder
    from lab.experiments.profile.dump import keep_complete_processes, merge_part

    run = RunFolder.create(tmp_path, "profile", "host", {})
    dump, part = run.table_path("profile"), run.path / "raw" / "profile.part.jsonl"
    meta = '{"kind": "meta"}\n'

    def row(process: int, depth: int, mode: str) -> str:
        return f'{{"kind": "{mode}", "process": {process}, "depth": {depth}, "ms": 1.0}}\n'

    whole = "".join(row(0, d, m) for d in (0, 512) for m in ("timed", "fused"))
    part.write_text(meta + whole + row(1, 0, "timed")[:20])  # killed mid-line in process 1
    merge_part(dump, part)
    assert keep_complete_processes(run, 4) == 1
    part.write_text(meta + row(1, 0, "timed") + '{"kind": "wa')  # the resumed instrument, killed again
    merge_part(dump, part)
    assert keep_complete_processes(run, 4) == 1  # no "bad JSON row" in the middle
    assert all(line.endswith("}") for line in dump.read_text().splitlines())


def test_an_unknown_setting_is_refused_by_name_with_the_closest_one(tmp_path: Path) -> None:
    """A typo in params.yaml or a LAB_* variable used to change nothing and say nothing."""
    params = tmp_path / "params.yaml"
    params.write_text("sweep:\n  max_rep: 30\n")
    runs = str(tmp_path / "runs")
    r = lab("sweep", "--runs-dir", runs, env={"LAB_PARAMS_FILE": str(params)})
    one_line_error(r, 2, "unknown setting sweep.max_rep")
    assert "did you mean sweep.max_reps?" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = lab("sweep", "--runs-dir", runs, env={"LAB_SWEEP__MAXREPS": "30"})
    one_line_error(r, 2, "unknown setting sweep.maxreps")
    r = lab("sweep", "--runs-dir", runs, env={"LAB_SERVR__THREADS": "3"})
    one_line_error(r, 2, "unknown setting LAB_SERVR__THREADS")
    assert "did you mean LAB_SERVER__THREADS?" in r.stderr
    params.write_text("server:\n  extra_args: ['--port=9999']\n")
    r = lab("sweep", "--runs-dir", runs, env={"LAB_PARAMS_FILE": str(params)})
    one_line_error(r, 2, "--port is set by the lab")
    # today's server of a conversation takes its cache flags as settings, never as aliases in its extra_args
    params.write_text("conversation:\n  extra_args: ['-ctxcp', '4']\n")
    r = lab("sweep", "--runs-dir", runs, env={"LAB_PARAMS_FILE": str(params)})
    one_line_error(r, 2, "-ctxcp is set by the lab")
    r = lab("sweep", "--runs-dir", runs, env={"LAB_CONVERSATION__CHECKPOINT": "4"})
    one_line_error(r, 2, "unknown setting conversation.checkpoint")
    assert "did you mean conversation.checkpoints?" in r.stderr
    assert not (tmp_path / "runs").exists()
