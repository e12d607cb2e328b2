"""Which patch series a llama.cpp source takes.

`patches/llama.cpp/` holds one folder per series, named by the llama.cpp commit it was ported to; a supported
release (lab.core.releases) names its series. A user's own checkout (source_mode path, or git at another commit)
gets the first series, newest release first, that `git apply --check` accepts; when none does, one line names
the file and hunk of the nearest release's series that does not apply, and that release. Checking reads the
checkout only: nothing is cached or built before a series fits.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from lab.core import releases
from lab.core.errors import LabError
from lab.core.settings import PIN_COMMIT, EngineSettings


class SeriesError(LabError):
    pass


def patch_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.patch"))


def series_dirs(patches_dir: Path) -> dict[str, Path]:
    """The series under patches_dir by name: its subfolders that hold patches, or patches_dir itself when it
    holds them (one series)."""
    if patch_files(patches_dir):
        return {patches_dir.name: patches_dir}
    if not patches_dir.is_dir():
        return {}
    return {d.name: d for d in sorted(patches_dir.iterdir()) if d.is_dir() and patch_files(d)}


def declared_series(settings: EngineSettings) -> Path | None:
    """The series this source is known to take without trying (None: a checkout of the user's, to be tried)."""
    dirs = series_dirs(settings.patches_dir)
    if not dirs:
        raise SeriesError(f"no *.patch in {settings.patches_dir} or its folders")
    if len(dirs) == 1 and settings.patches_dir in dirs.values():
        return settings.patches_dir  # a patch set of one's own: applied as it is, to any source
    if settings.source_mode == "sdist":
        rel = releases.release(settings.sdist_version)
        assert rel is not None  # the setting admits supported releases only
        return _named(dirs, rel.series, settings.patches_dir)
    if settings.source_mode == "git" and settings.git_commit == PIN_COMMIT:
        pin = releases.release(releases.DEFAULT)
        assert pin is not None
        return _named(dirs, pin.series, settings.patches_dir)
    return None


def _named(dirs: dict[str, Path], name: str, patches_dir: Path) -> Path:
    if name not in dirs:
        raise SeriesError(f"no patch series {name} under {patches_dir} (have: {', '.join(dirs) or 'none'})")
    return dirs[name]


def fitting_series(tree: Path, patches_dir: Path) -> Path:
    """The first series, newest release first, that applies to the checkout `tree` (read only)."""
    dirs = series_dirs(patches_dir)
    failed = {r: _failures(tree, dirs[r.series]) for r in releases.newest_first() if r.series in dirs}
    for rel, failures in failed.items():
        if not failures:
            return dirs[rel.series]
    if not failed:
        raise SeriesError(f"no patch series of a supported release under {patches_dir}")
    nearest = nearest_release(tree, failed)
    raise SeriesError(
        f"{tree}: no patch series fits this llama.cpp checkout (at {_head(tree)}): {nearest.series}/"
        f"{failed[nearest][0]}; nearest supported release: {_release_words(nearest)}"
    )


def _release_words(rel: releases.Release) -> str:
    name = releases.name_of(rel.sdist_version)
    label = f"{name}, " if name else ""
    setting = name or rel.sdist_version
    return f"{label}llama-cpp-python {rel.sdist_version} (llama.cpp {rel.commit}; engine.sdist_version: {setting})"


def _git(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)


def _head(tree: Path) -> str:
    r = _git(tree, "rev-parse", "--short=9", "HEAD")
    return r.stdout.strip() if r.returncode == 0 else "an unknown commit"


_FAILED = re.compile(r"^error: patch failed: (?P<file>.+):(?P<line>\d+)$", re.MULTILINE)
_OTHER = re.compile(r"^error: (?P<what>.+)$", re.MULTILINE)


def _failures(tree: Path, folder: Path) -> list[str]:
    """Every hunk of the series that does not apply to tree, as `PATCH: FILE hunk @@ ... @@ (line N)`; none when
    the whole series applies (in order). With `--reject` git reports each failing hunk (and exits 0: the plain
    check decides); `--check` writes nothing either way."""
    patches = patch_files(folder)
    if _git(tree, "apply", "--check", "--whitespace=nowarn", *map(str, patches)).returncode == 0:
        return []
    r = _git(tree, "apply", "--check", "--reject", "--whitespace=nowarn", *map(str, patches))
    out = []
    for m in _FAILED.finditer(r.stderr):
        file, line = m["file"], int(m["line"])
        patch, hunk = _hunk_at(patches, file, line)
        out.append(f"{patch}: {file} hunk {hunk} (line {line})")
    if not out:  # a file that is missing, say
        m2 = _OTHER.search(r.stderr)
        out.append(f"{patches[0].name}: {m2['what'] if m2 else r.stderr.strip().splitlines()[-1]}")
    return out


def _hunk_at(patches: list[Path], file: str, line: int) -> tuple[str, str]:
    """The patch and hunk header (`@@ -N,M +N,M @@ context`) of `file` whose old start is `line`."""
    for p in patches:
        current = None
        for text in p.read_text(errors="replace").splitlines():
            if text.startswith("+++ b/"):
                current = text[len("+++ b/") :]
            elif current == file and text.startswith(f"@@ -{line},"):
                return p.name, text.strip()
    return patches[0].name, "@@ ? @@"


def nearest_release(tree: Path, failed: dict[releases.Release, list[str]]) -> releases.Release:
    """The supported release whose commit is fewest commits away in the checkout's history; when the history
    holds none of them (a shallow clone, a copy without .git), the one whose series fails at fewest hunks."""
    best: tuple[int, releases.Release] | None = None
    for rel in failed:
        if _git(tree, "cat-file", "-e", f"{rel.commit}^{{commit}}").returncode != 0:
            continue
        r = _git(tree, "rev-list", "--count", f"{rel.commit}...HEAD")
        if r.returncode == 0 and (best is None or int(r.stdout) < best[0]):
            best = (int(r.stdout), rel)
    return best[1] if best else min(failed, key=lambda r: len(failed[r]))
