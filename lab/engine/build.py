"""CPU build of the patched llama.cpp, cached under a key of (source, patch bytes, flags).

Each key has a build directory of its own beside its patched tree (`p-<patch sha>/build-<flavor>-<flags>`):
a repeated build is a stamp check (no cmake at all), a changed patch or flag builds a new directory (ccache
makes the unchanged files hits) and a stamped build is never built again, so a binary a running experiment
uses never changes under it. A run holds its build `in_use` (a shared lock) to its end; `prune_engines`
removes the other keys' trees only when nothing holds them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, TextIO, cast, get_args

from pydantic import BaseModel

from lab.core.errors import LabError, UsageError
from lab.core.settings import EngineSettings
from lab.engine.source import (
    PreparedSource,
    SourceInfo,
    applied_diff,
    locked,
    patched_root,
    patches_for,
    patches_sha256,
    prepare_source,
    release_label,
    source_id,
)

Flavor = Literal["release", "assert"]
TARGETS = ["llama-server", "llama", "llama-bench"]
STAMP = "lab-build.json"


class EngineInfo(BaseModel):
    """What `lab engine info --json` prints and every run's manifest records."""

    flavor: Flavor
    server: Path
    bench: Path
    lib_dir: Path
    include_dir: Path
    ggml_include_dir: Path
    source_dir: Path
    build_dir: Path
    source: SourceInfo
    patch_sha256: str
    patches: list[str]
    flags: list[str]
    series: str = ""  # the patch series applied (lab.engine.series)
    release: str | None = None  # pin, latest or an sdist version; None: a checkout of the user's


class BuildError(LabError):
    pass


def check_flavor(flavor: str) -> Flavor:
    """`--flavor` as a Flavor; anything else is a UsageError."""
    if flavor not in get_args(Flavor):
        raise UsageError(f"--flavor must be release or assert, got {flavor!r}")
    return cast(Flavor, flavor)


def cmake_flags(settings: EngineSettings, flavor: Flavor, commit: str) -> list[str]:
    flags = [
        f"-DCMAKE_BUILD_TYPE={settings.build_type}",
        "-DBUILD_SHARED_LIBS=ON",
        # without these two the build runs npm for the web UI and reaches for the network
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_CURL=OFF",
        "-DGGML_CUDA=OFF",
        "-DGGML_METAL=OFF",
        "-DGGML_VULKAN=OFF",
        f"-DGGML_NATIVE={'ON' if settings.native else 'OFF'}",
        f"-DGGML_CCACHE={'ON' if shutil.which('ccache') else 'OFF'}",
        f"-DLLAMA_BUILD_COMMIT={commit[:9]}",
    ]
    if flavor == "assert":
        # every optimised build type defines NDEBUG (RelWithDebInfo too); asserts need it gone
        opt = "-O2 -g" if settings.build_type == "RelWithDebInfo" else "-O2"
        for lang in ("C", "CXX"):
            flags.append(f"-DCMAKE_{lang}_FLAGS_{settings.build_type.upper()}={opt}")
    return flags + list(settings.extra_cmake_flags)


def flags_key(flags: list[str]) -> str:
    return hashlib.sha256("\n".join(flags).encode()).hexdigest()[:10]


def _paths(src: PreparedSource, build_dir: Path) -> dict[str, Path]:
    return {
        "server": build_dir / "bin" / "llama-server",
        "bench": build_dir / "bin" / "llama-bench",
        "lib_dir": build_dir / "bin",
        "include_dir": src.path / "include",
        "ggml_include_dir": src.path / "ggml" / "include",
    }


_PERCENT = re.compile(r"^\[\s*(\d+)%\]\s*(.*)$")


class BuildProgress:
    """One progress line for a build, from CMake's own `[ 45%] ...` lines: rewritten in place on a terminal,
    one line per 10% step otherwise (a log file or CI); the full output goes to the log."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label, self.stream = label, stream or sys.stderr
        self.tty = self.stream.isatty()
        self.shown = -10

    def feed(self, line: str) -> None:
        m = _PERCENT.match(line.strip())
        if m is None:
            return
        pct, what = int(m.group(1)), m.group(2).rsplit("/", 1)[-1].rsplit(" ", 1)[-1]
        text = f"{self.label}: {pct:3d}% {what}"
        if self.tty:
            self.stream.write("\r" + text[:100].ljust(100))
        elif pct >= self.shown + 10 or (pct == 100 and self.shown < 100):
            self.stream.write(text + "\n")
            self.shown = pct
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


def _run_logged(cmd: list[str], log: Path, env: dict[str, str], progress: BuildProgress | None) -> None:
    """Run a build step, its output to `log` (and the progress line). Parallel compilers interleave their output
    on one pipe, so a UTF-8 character can arrive cut in two: undecodable bytes are replaced, never fatal."""
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, encoding="utf-8", errors="replace", env=env
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            if progress is not None:
                progress.feed(line)
        rc = proc.wait()
    if progress is not None:
        progress.close()
    if rc != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-30:])
        raise BuildError(f"{cmd[0]} failed ({rc}); the last lines of {log}:\n{tail}")


def build_engine(
    settings: EngineSettings, cache_dir: Path, flavor: Flavor = "release", quiet: bool = True
) -> EngineInfo:
    if settings.prebuilt is not None:
        info = prebuilt_engine(settings.prebuilt)
        asked = release_label(settings)
        if asked is not None and info.release is not None and info.release != asked:
            raise BuildError(
                f"engine.prebuilt {settings.prebuilt} is the {info.release} release's build; this run asks for "
                f"{asked} (--engine / engine.sdist_version): push that release's bundle"
            )
        return info
    patch_sha256 = patches_sha256(patches_for(settings, cache_dir)[1])
    patched = patched_root(cache_dir / "engine" / source_id(settings), patch_sha256)
    patched.parent.mkdir(parents=True, exist_ok=True)
    with _in_use_lock(patched).open("a") as held:  # no prune while this key is prepared and built
        fcntl.flock(held, fcntl.LOCK_SH)
        return _build_key(settings, cache_dir, flavor, quiet)


def _build_key(settings: EngineSettings, cache_dir: Path, flavor: Flavor, quiet: bool) -> EngineInfo:
    src = prepare_source(settings, cache_dir)
    flags = cmake_flags(settings, flavor, src.info.commit)
    build_dir = src.path.parent / f"build-{flavor}-{flags_key(flags)}"
    stamp = build_dir / STAMP
    paths = _paths(src, build_dir)
    info = EngineInfo(
        flavor=flavor,
        source_dir=src.path,
        build_dir=build_dir,
        source=src.info,
        patch_sha256=src.patch_sha256,
        patches=src.patches,
        flags=flags,
        series=src.series,
        release=src.release,
        **paths,
    )
    with locked(build_dir.with_suffix(".lock")):
        done = _finished(stamp, info)
        if done is not None:
            return done
        _build(settings, cache_dir, build_dir, flags, quiet, f"engine {flavor}")
        for p in (info.server, info.bench):
            if not p.exists():
                raise BuildError(f"build finished but {p} is missing; log: {build_dir / 'lab-build.log'}")
        stamp.write_text(info.model_dump_json(indent=2))
    return info


def prebuilt_engine(bundle: Path) -> EngineInfo:
    """An engine bundle (`lab.remote.bundle`): the build's bin/ and its stamp, paths rebased onto the bundle.
    Provenance (source, patch sha256, flags) is the stamp's: the bundle is that build, copied."""
    stamp = bundle / STAMP
    if not stamp.exists():
        raise BuildError(f"{bundle} is not an engine bundle (no {STAMP})")
    info = EngineInfo.model_validate_json(stamp.read_text())
    bin_dir = bundle / "bin"
    rebased = info.model_copy(
        update={
            "server": bin_dir / info.server.name,
            "bench": bin_dir / info.bench.name,
            "lib_dir": bin_dir,
            "build_dir": bundle,
            "source_dir": bundle,
            "include_dir": bundle / "include",
            "ggml_include_dir": bundle / "include",
        }
    )
    for p in (rebased.server, rebased.bench):
        if not p.exists():
            raise BuildError(f"engine bundle {bundle} lacks {p.name}")
    return rebased


def engine_patch_text(engine: EngineInfo) -> str:
    """What the lab changed in llama.cpp: the tree's diff, or the diff a bundle carries (no tree there)."""
    bundled = engine.source_dir / "engine.patch"
    return bundled.read_text() if bundled.exists() else applied_diff(engine.source_dir)


def _finished(stamp: Path, want: EngineInfo) -> EngineInfo | None:
    """The stamped build if it matches the wanted key (patch bytes + flags) and its binaries exist."""
    if not stamp.exists() or not (want.server.exists() and want.bench.exists()):
        return None
    done = EngineInfo.model_validate_json(stamp.read_text())
    if done.patch_sha256 == want.patch_sha256 and done.flags == want.flags:
        return done.model_copy(update={"series": want.series, "release": want.release})
    return None


def _build(
    settings: EngineSettings, cache_dir: Path, build_dir: Path, flags: list[str], quiet: bool, label: str
) -> None:
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / STAMP).unlink(missing_ok=True)
    log = build_dir / "lab-build.log"
    env = dict(os.environ)
    # relative paths in ccache's hash: hits survive a moved cache dir
    env.setdefault("CCACHE_BASEDIR", str(cache_dir))
    env.setdefault("CCACHE_NOHASHDIR", "1")
    if not quiet:
        sys.stderr.write(f"{label}: configuring (full log: {log})\n")
    _run_logged(["cmake", "-S", str(build_dir.parent / "src"), "-B", str(build_dir), *flags], log, env, None)
    progress = None if quiet else BuildProgress(label)
    _run_logged(
        ["cmake", "--build", str(build_dir), "-j", str(settings.jobs), "--target", *TARGETS], log, env, progress
    )


def engine_info_json(info: EngineInfo) -> str:
    return json.dumps(json.loads(info.model_dump_json()), indent=2)


@contextlib.contextmanager
def in_use(engine: EngineInfo) -> Iterator[None]:
    """Hold a build for the length of a run (a shared lock: any number of runs, no prune meanwhile)."""
    if engine.build_dir == engine.source_dir:  # an engine bundle on a target host: never pruned
        yield
        return
    with _in_use_lock(engine.build_dir.parent).open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_SH)
        if not (engine.build_dir / STAMP).exists():
            raise BuildError(f"the engine build {engine.build_dir} was pruned meanwhile; run again to rebuild it")
        yield


def _in_use_lock(patched: Path) -> Path:
    return patched.with_suffix(".in-use")


def prune_engines(settings: EngineSettings, cache_dir: Path) -> tuple[list[Path], list[Path]]:
    """Remove the patched trees and builds of every patch set but the current one (and a cache layout older
    than per-patch trees). Returns (removed, kept because a run holds them)."""
    root = cache_dir / "engine" / source_id(settings)
    keep = patched_root(root, patches_sha256(patches_for(settings, cache_dir)[1])).name
    removed: list[Path] = []
    held: list[Path] = []
    if not root.is_dir():
        return removed, held
    for path in sorted(root.iterdir()):
        old_layout = path.name == "src" or path.name.startswith("build-")
        if not path.is_dir() or not (old_layout or (path.name.startswith("p-") and path.name != keep)):
            continue
        with _in_use_lock(path).open("a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(path)
                continue
            shutil.rmtree(path)  # the lock file stays: a builder waiting on it must lock what the next prune locks
            removed.append(path)
    return removed, held
