"""The llama.cpp releases the lab supports: each one a sha256-pinned sdist of llama-cpp-python (which vendors
llama.cpp) and the patch series ported to it (`patches/llama.cpp/<series>/`).

Two are named: `pin`, the default every figure of the lab was measured with, and `latest`, the newest release in
the package index. A setting or flag takes either name or an sdist version (`engine.sdist_version`,
`--engine latest`). Adding a release is a row here and a series folder (patches/llama.cpp/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    sdist_version: str  # llama-cpp-python==VERSION
    sha256: str  # of its sdist
    commit: str  # the llama.cpp commit it vendors under vendor/llama.cpp
    series: str  # the patch series (a folder of patches/llama.cpp) that applies to it
    relation: str  # where it sits, in words


RELEASES: tuple[Release, ...] = (
    Release(
        sdist_version="0.3.26",
        sha256="71b004d52a274273ae03ec954d62771d26c86f32193fd30be57601508bec0064",
        commit="7c158fbb4",
        series="465b1f0e7",
        relation="17 commits before da87e9b",
    ),
    Release(
        sdist_version="0.3.27",
        sha256="b9eb9957de3776c2b1ae2beeccb52d5603e4e84afd94ae0d46bf96e04cbead6a",
        commit="465b1f0e7",
        series="465b1f0e7",
        relation="12 commits after da87e9b",
    ),
    Release(
        sdist_version="0.3.36",
        sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
        commit="0c1e57098",
        series="0c1e57098",
        relation="the newest release in the package index (October 2026)",
    ),
)

# the names a user can give instead of a version
NAMED: dict[str, str] = {"pin": "0.3.27", "latest": "0.3.36"}
DEFAULT = NAMED["pin"]


def release(version: str) -> Release | None:
    return next((r for r in RELEASES if r.sdist_version == version), None)


def named_by(version_line: str) -> Release | None:
    """The supported release whose llama.cpp commit a server's `--version` line names (the first listed, for a
    commit two sdists vendor), None for a build of another commit."""
    return next((r for r in RELEASES if r.commit in version_line), None)


def server_label(version_line: str) -> str:
    """A server's `--version` line as the llama.cpp it is: `llama.cpp 0c1e57098 (latest: llama-cpp-python 0.3.36)`
    for a supported release's commit, else the line itself."""
    r = named_by(version_line)
    if r is None:
        return f"llama-server {version_line or 'of an unknown version'}"
    name = name_of(r.sdist_version)
    return f"llama.cpp {r.commit} ({name + ': ' if name else ''}llama-cpp-python {r.sdist_version})"


def engine_label(commit: str) -> str:
    """A run's engine as every line of the answer names it: `llama.cpp 465b1f0e7 (pin)`, the release's name where
    the commit is a named one's."""
    if not commit:
        return "llama.cpp of an unrecorded commit"
    r = next((r for r in RELEASES if commit.startswith(r.commit) or r.commit.startswith(commit)), None)
    name = name_of(r.sdist_version) if r is not None else None
    return f"llama.cpp {commit[:9]}" + (f" ({name})" if name else "")


def name_of(version: str) -> str | None:
    """`pin` or `latest` for their versions, None for the others."""
    return next((n for n, v in NAMED.items() if v == version), None)


def resolve_version(given: str) -> str:
    """An sdist version from a name or a version; ValueError naming the supported ones otherwise."""
    version = NAMED.get(given, given)
    if release(version) is None:
        others = [r.sdist_version for r in RELEASES if r.sdist_version not in NAMED.values()]
        known = ", ".join([*(f"{n} ({v})" for n, v in NAMED.items()), *others])
        raise ValueError(f"{given!r} is not a supported llama.cpp release; known: {known}")
    return version


def newest_first() -> list[Release]:
    """One release per series, the newest first (the order a user's checkout is tried in)."""
    seen: dict[str, Release] = {}
    for r in RELEASES:  # listed oldest first: a later release of a series replaces an earlier one
        seen[r.series] = r
    return list(reversed(seen.values()))
