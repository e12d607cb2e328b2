"""llama.cpp source, with the lab's patch series applied, in a tree the lab owns.

Three modes (chosen by settings, nothing probes the network):
  sdist  the PyPI sdist of llama-cpp-python, which vendors llama.cpp (sha256 pinned and verified): a supported
         release (lab.core.releases), with the series ported to it
  git    clone a URL and check out the pinned commit (what the container does on a connected host)
  path   copy of a checkout the user already has (their tree is never touched): the first series, newest
         release first, that applies to it; none that applies is one line naming the file and hunk, before
         anything is cached

The patches live in one folder per series (`patches/llama.cpp/<llama.cpp commit>/*.patch`); a folder that
holds *.patch itself is one series (a patch set of a user's or a test's own).

The cache holds, per source, one pristine tree and one patched tree per patch set, each created once and
never changed after (a second clone with other patches gets a tree of its own, so nothing a running
experiment uses is rebuilt under it):

    engine/<source id>/pristine/            git repository, one commit: the source as obtained
    engine/<source id>/source.json          where it came from (SourceInfo)
    engine/<source id>/p-<patch sha>/src/   a clone of pristine with the patches applied (`git diff` = them)
    engine/<source id>/p-<patch sha>/build-<flavor>-<flags>/   its builds (lab.engine.build)
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, Field

from lab.core import releases
from lab.core.errors import LabError
from lab.core.hashing import file_sha256
from lab.core.jsonl import atomic_write
from lab.core.redact import redact_url
from lab.core.safetar import safe_extract
from lab.core.settings import PIN_COMMIT, EngineSettings
from lab.engine.series import declared_series, fitting_series, patch_files

_GIT_ID = ["-c", "user.name=prefill-lab", "-c", "user.email=prefill-lab@localhost", "-c", "commit.gpgsign=false"]


class SourceInfo(BaseModel):
    """Which llama.cpp source a build used: recorded in every run's manifest."""

    mode: str
    origin: str
    commit: str
    sha256: str | None = None
    pinned: bool
    note: str = ""


class PreparedSource(BaseModel):
    path: Path
    info: SourceInfo
    patch_sha256: str
    patches: list[str]
    series: str = Field(description="the patch series applied (its folder under patches/llama.cpp)")
    release: str | None = Field(description="the supported release built: pin, latest or its version (sdist mode)")


class SourceError(LabError):
    pass


def patches_sha256(patches: list[Path]) -> str:
    h = hashlib.sha256()
    for p in patches:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        said = redact_url(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.strip()}")
        raise SourceError(said)
    return proc.stdout


def _git(tree: Path, *args: str) -> str:
    return _run(["git", *_GIT_ID, "-C", str(tree), *args])


@contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Exclusive inter-process lock (concurrent `lab` commands share one cache)."""
    import fcntl

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --- obtaining pristine sources -------------------------------------------------------------------


def fetch_sdist(version: str, downloads: Path) -> tuple[Path, releases.Release]:
    """The llama-cpp-python sdist from PyPI (pip's own client), verified against the pinned sha256."""
    pin = releases.release(version)
    if pin is None:
        known = sorted(r.sdist_version for r in releases.RELEASES)
        raise SourceError(f"no pinned sha256 for llama-cpp-python=={version}; known: {known}")
    archive = downloads / f"llama_cpp_python-{version}.tar.gz"
    if not archive.exists():
        downloads.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=downloads) as tmp:
            _run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--no-binary",
                    "llama-cpp-python",
                    f"llama-cpp-python=={version}",
                    "-d",
                    tmp,
                ]
            )
            # not `--no-binary :all:`: pip applies that to the build backend it installs to read the sdist's
            # metadata too, and builds scikit-build-core, cmake, ninja... from source (15+ min, or a failure)
            got = Path(tmp) / archive.name
            if not got.exists():
                raise SourceError(f"pip download did not produce {archive.name}")
            got.replace(archive)
    digest = file_sha256(archive)
    if digest != pin.sha256:
        raise SourceError(f"{archive}: sha256 {digest} != pinned {pin.sha256}; delete it and retry")
    return archive, pin


def extract_vendored(archive: Path, dest: Path) -> None:
    """Extract `*/vendor/llama.cpp/` of the sdist into dest (the gitlink `.git` file is dropped)."""
    with tarfile.open(archive) as tar:
        members = []
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if len(parts) > 3 and parts[1:3] == ("vendor", "llama.cpp"):
                if parts[3] == ".git" and len(parts) == 4:
                    continue
                m.name = str(Path(*parts[3:]))
                members.append(m)
        if not members:
            raise SourceError(f"{archive} has no vendor/llama.cpp")
        safe_extract(tar, dest, members)


def _copy_checkout(src: Path, dest: Path) -> None:
    """Copy the files git tracks in the user's checkout (as they are in the working tree)."""
    listed = subprocess.run(
        ["git", "-C", str(src), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
    )
    if listed.returncode != 0:
        raise SourceError(f"{src} is not a git checkout of llama.cpp")
    for rel in filter(None, listed.stdout.decode().split("\0")):
        s = src / rel
        if s.is_file() and not s.is_symlink():
            d = dest / rel
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, d)


def _pristine(settings: EngineSettings, cache_dir: Path, dest: Path) -> SourceInfo:
    mode = settings.source_mode
    if mode == "sdist":
        archive, pin = fetch_sdist(settings.sdist_version, cache_dir / "downloads")
        extract_vendored(archive, dest)
        return SourceInfo(
            mode=mode,
            origin=f"pypi:llama-cpp-python=={settings.sdist_version} vendor/llama.cpp",
            commit=pin.commit,
            sha256=pin.sha256,
            pinned=False,
            note=f"vendored llama.cpp {pin.commit}, {pin.relation} (pin {PIN_COMMIT[:9]})",
        )
    if mode == "git":
        _run(["git", "clone", "--quiet", settings.git_url, str(dest)])
        _run(["git", "-C", str(dest), "checkout", "--quiet", "--detach", settings.git_commit])
        commit = _run(["git", "-C", str(dest), "rev-parse", "HEAD"]).strip()
        shutil.rmtree(dest / ".git")
        return SourceInfo(
            mode=mode,
            origin=redact_url(settings.git_url),
            commit=commit,
            pinned=commit == PIN_COMMIT,
            note="" if commit == PIN_COMMIT else f"not the pin {PIN_COMMIT}",
        )
    if settings.path is None:
        raise SourceError("engine.source_mode=path needs engine.path (LAB_ENGINE__PATH)")
    user = settings.path.expanduser().resolve()
    commit = _run(["git", "-C", str(user), "rev-parse", "HEAD"]).strip()
    dirty = bool(_run(["git", "-C", str(user), "status", "--porcelain", "--untracked-files=no"]).strip())
    if commit != PIN_COMMIT:
        warnings.warn(f"{user} is at {commit[:12]}, not the pin {PIN_COMMIT[:12]}", stacklevel=2)
    _copy_checkout(user, dest)
    return SourceInfo(
        mode=mode,
        origin=str(user),
        commit=commit,
        pinned=commit == PIN_COMMIT and not dirty,
        note=("working tree has local changes; " if dirty else "")
        + ("" if commit == PIN_COMMIT else f"not the pin {PIN_COMMIT[:12]}"),
    )


def source_id(settings: EngineSettings) -> str:
    if settings.source_mode == "sdist":
        return f"sdist-{settings.sdist_version}"
    if settings.source_mode == "git":
        return f"git-{settings.git_commit[:12]}-{hashlib.sha256(settings.git_url.encode()).hexdigest()[:8]}"
    assert settings.path is not None
    return f"path-{hashlib.sha256(str(settings.path.expanduser().resolve()).encode()).hexdigest()[:12]}"


# --- the lab's tree ---------------------------------------------------------------------------------


def series_for(settings: EngineSettings, cache_dir: Path) -> Path:
    """The patch series this source takes: the one its release declares, else the first that fits the user's
    checkout (read there, before anything is cached), else (git at another commit) the first that fits the
    cloned pristine tree."""
    declared = declared_series(settings)
    if declared is not None:
        return declared
    if settings.source_mode == "path":
        if settings.path is None:
            raise SourceError("engine.source_mode=path needs engine.path (LAB_ENGINE__PATH)")
        if not settings.path.expanduser().is_dir():
            raise SourceError(f"engine.path {settings.path}: no such directory (a llama.cpp checkout)")
        return fitting_series(settings.path.expanduser().resolve(), settings.patches_dir)
    root = cache_dir / "engine" / source_id(settings)
    _pristine_tree(settings, cache_dir, root)
    return fitting_series(root / "pristine", settings.patches_dir)


def patches_for(settings: EngineSettings, cache_dir: Path) -> tuple[str, list[Path]]:
    """The series' name and its patches; `stock`: none (the release as shipped, for today's server)."""
    if settings.stock:
        return "stock", []
    series = series_for(settings, cache_dir)
    return series.name, patch_files(series)


def prepare_source(settings: EngineSettings, cache_dir: Path) -> PreparedSource:
    """The source with its patch series applied, in the tree of that patch set (created once, then reused)."""
    series, patches = patches_for(settings, cache_dir)
    root = cache_dir / "engine" / source_id(settings)
    want = patches_sha256(patches)
    info = _pristine_tree(settings, cache_dir, root)
    tree = patched_root(root, want) / "src"
    with locked(tree.parent.with_suffix(".lock")):
        if _patch_stamp(tree) != want:
            _create_patched(root / "pristine", tree, patches, want, info)
    return PreparedSource(
        path=tree,
        info=info,
        patch_sha256=want,
        patches=[p.name for p in patches],
        series=series,
        release=release_label(settings),
    )


def release_label(settings: EngineSettings) -> str | None:
    """`pin` or `latest` for those releases, the version for another supported one, None for a checkout."""
    if settings.source_mode != "sdist":
        return None
    return releases.name_of(settings.sdist_version) or settings.sdist_version


def patched_root(root: Path, patch_sha256: str) -> Path:
    return root / f"p-{patch_sha256[:12]}"


def _patch_stamp(tree: Path) -> str | None:
    stamp = tree / ".git" / "lab-patch-sha256"
    return stamp.read_text().strip() if stamp.exists() else None


def _pristine_tree(settings: EngineSettings, cache_dir: Path, root: Path) -> SourceInfo:
    """The pristine source as one git commit (obtained once per source id)."""
    tree, info_file = root / "pristine", root / "source.json"
    with locked(root.parent / f"{root.name}.lock"):
        if not (tree / ".git").exists() or not info_file.exists():
            root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=root, prefix="staging-"))
            try:
                info = _pristine(settings, cache_dir, staging)
                _git(staging, "init", "--quiet")
                _git(staging, "add", "-A")
                _git(staging, "commit", "--quiet", "--no-verify", "-m", f"pristine: {info.origin} {info.commit}")
                if tree.exists():
                    shutil.rmtree(tree)
                staging.replace(tree)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            atomic_write(info_file, info.model_dump_json(indent=2))
        return SourceInfo.model_validate_json(info_file.read_text())


def _create_patched(pristine: Path, tree: Path, patches: list[Path], want: str, info: SourceInfo) -> None:
    """A clone of the pristine tree with the patches applied, moved into place only once it is whole."""
    tree.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=tree.parent, prefix="staging-"))
    try:
        _run(["git", "clone", "--quiet", "--local", str(pristine), str(staging / "src")])
        for p in patches:
            try:
                _git(staging / "src", "apply", "--whitespace=nowarn", str(p))
            except SourceError as e:
                raise SourceError(f"patch {p.name} does not apply to {info.origin}: {e}") from e
        (staging / "src" / ".git" / "lab-patch-sha256").write_text(want + "\n")
        if tree.exists():  # an earlier attempt's leftover, never stamped: no build used it
            shutil.rmtree(tree)
        (staging / "src").replace(tree)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def applied_diff(tree: Path) -> str:
    """The engine tree's diff against its pristine commit: exactly what the lab changed."""
    return _git(tree, "diff", "--no-color", "--no-ext-diff")


def check_patch_applies(archive: Path, patches: list[Path]) -> None:
    """Raise SourceError unless every patch applies cleanly (in order) to the sdist's vendored llama.cpp."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        extract_vendored(archive, tree)
        _git(tree, "init", "--quiet")
        for p in patches:
            _git(tree, "apply", "--check", str(p))
            _git(tree, "apply", str(p))
