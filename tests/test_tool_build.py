"""How the lab builds its C++ tools (lab.instrument.build_tool), without a compiler: the build key covers the
header the tools share, its folder is on their -I path, and the package ships it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import lab.instrument as instrument
from lab.engine.build import EngineInfo
from lab.inproc import SOURCE as ARMS_SOURCE

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent


def fake_engine(tmp_path: Path) -> EngineInfo:
    build = tmp_path / "engine-build"
    return EngineInfo.model_construct(
        lib_dir=build / "bin",
        include_dir=tmp_path / "include",
        ggml_include_dir=tmp_path / "ggml-include",
        source_dir=tmp_path / "src",
        build_dir=build,
        patch_sha256="0" * 64,
        flags=["-DX=1"],
    )


def test_a_change_to_the_shared_header_builds_the_tool_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    native = tmp_path / "native"
    native.mkdir()
    header = native / "labtool.h"
    header.write_text("// v1\n")
    source = tmp_path / "tool.cpp"
    source.write_text('#include "labtool.h"\nint main() {}\n')
    monkeypatch.setattr(instrument, "NATIVE", native)
    monkeypatch.setattr(instrument, "HEADERS", (header,))
    compiled: list[list[str]] = []

    def fake_compile(cmd: list[str], **_: object) -> object:
        compiled.append(cmd)
        Path(cmd[cmd.index("-o") + 1]).write_text("binary")
        return type("Done", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(instrument.subprocess, "run", fake_compile)
    engine = fake_engine(tmp_path)
    first = instrument.build_tool(engine, tmp_path / "cache", source, "tool")
    assert f"-I{native}" in compiled[0] and first.headers_sha256 == instrument.headers_sha256()
    assert instrument.build_tool(engine, tmp_path / "cache", source, "tool") == first and len(compiled) == 1
    header.write_text("// v2\n")  # the source is unchanged: only the header's bytes move the key
    second = instrument.build_tool(engine, tmp_path / "cache", source, "tool")
    assert len(compiled) == 2 and second.binary != first.binary and second.headers_sha256 != first.headers_sha256
    assert second.source_sha256 == first.source_sha256


def test_both_tools_include_the_shared_header_and_the_package_ships_it() -> None:
    assert instrument.HEADERS == (instrument.NATIVE / "labtool.h", instrument.NATIVE / "kvlayout.h")
    assert all(h.exists() for h in instrument.HEADERS)
    for source in (instrument.SOURCE, ARMS_SOURCE):
        assert '#include "labtool.h"' in source.read_text(), source.name
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["lab"]
    lab_dir = REPO / "lab"
    for path in (instrument.SOURCE, ARMS_SOURCE, *instrument.HEADERS):
        rel = path.resolve().relative_to(lab_dir)
        assert any(rel.match(glob) for glob in package_data), f"pyproject's package-data does not ship lab/{rel}"
