"""The committed lock drives every install: `make setup` (requirements-dev.lock), the Dockerfile and the remote
bundle's wheelhouse (requirements.lock); the locks cover pyproject's dependencies with a hash for every pin."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from lab.core.lockfile import DEV_LOCK, LOCK, pins
from lab.remote.bundle import runtime_requirements

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent


def locked_names(lock: Path) -> set[str]:
    return {canonicalize_name(p.split("==")[0]) for p in pins(lock)}


def test_the_locks_cover_pyproject_and_pin_every_package_with_hashes() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    dev = {canonicalize_name(Requirement(r).name) for r in project["optional-dependencies"]["dev"]}
    assert runtime <= locked_names(LOCK) and runtime | dev <= locked_names(DEV_LOCK)
    assert not dev - runtime & locked_names(LOCK)  # the runtime lock carries no test tool
    for lock in (LOCK, DEV_LOCK):
        blocks = re.split(r"\n(?=\S)", lock.read_text().strip())
        for block in blocks:
            head = block.splitlines()[0]
            assert "==" in head and "--hash=sha256:" in block, f"{lock.name}: {head} has no pinned hash"


def test_this_environment_is_the_locked_one() -> None:
    """`make setup` installed requirements-dev.lock: every pin is the version installed here."""
    for pin in pins(DEV_LOCK):
        name, wanted = pin.split("==")
        assert version(name) == wanted, f"{name}: {version(name)} installed, the lock says {wanted}"


def test_the_dockerfile_the_makefile_and_the_wheelhouse_install_from_the_lock() -> None:
    docker = (REPO / "Dockerfile").read_text()
    assert "COPY pyproject.toml requirements.lock ./" in docker
    assert "pip install --require-hashes -r requirements.lock" in docker
    assert "!requirements.lock" in (REPO / ".dockerignore").read_text()  # it is in the build context
    make = (REPO / "Makefile").read_text()
    assert "pip install -q --require-hashes -r requirements-dev.lock" in make
    assert "pip install -q --no-deps -e ." in make  # the lab itself resolves nothing
    assert runtime_requirements() == pins(LOCK)  # the wheelhouse holds exactly the lock's pins
