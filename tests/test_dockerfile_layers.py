"""The Dockerfile builds the engine, the tiny model and the instrument in early layers that copy only part of
lab/ (so a change elsewhere in the lab does not rebuild the engine): each such layer must copy every lab
module its step imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent


def module_file(name: str) -> Path:
    path = REPO / Path(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def closure(names: set[str]) -> set[str]:
    """Files of the lab modules `names` import at module level, transitively (and their packages)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        file = module_file(name)
        rel = str(file.relative_to(REPO))
        if rel in seen:
            continue
        seen.add(rel)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run first
        for node in ast.parse(file.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "lab":
                todo.append(node.module)
                todo += [
                    f"{node.module}.{a.name}" for a in node.names if module_file(f"{node.module}.{a.name}").exists()
                ]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.split(".")[0] == "lab"]
    return seen


def test_early_layers_copy_what_their_steps_import() -> None:
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    copied: set[str] = set()
    checked = 0
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("COPY lab/ lab/"):
            break  # from here on the whole package is there
        if line.startswith("COPY lab/"):
            srcs = line.split()[1:-1]
            for src in srcs:
                path = REPO / src
                copied |= {str(f.relative_to(REPO)) for f in path.rglob("*.py")} if path.is_dir() else {src}
        if line.startswith("RUN") and "python -c" in line:
            imported = set(re.findall(r"from (lab[\w.]*) import", line))
            missing = sorted(closure(imported) - copied)
            assert not missing, f"a Dockerfile step imports {sorted(imported)} but its layers lack {missing}"
            checked += 1
    assert checked >= 3, "the engine, model and instrument steps were not found"


def test_the_tools_layer_copies_their_sources_and_the_header_they_share() -> None:
    """The step that compiles the C++ tools (lab.instrument, lab.inproc) needs their .cpp files and every lab
    header they include (lab/native, on their -I path) in the layers before it."""
    from lab.instrument import NATIVE

    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    copied: set[Path] = set()
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("COPY lab/ lab/"):
            break
        if line.startswith("COPY lab/"):
            for src in line.split()[1:-1]:
                path = REPO / src
                copied |= {f for f in path.rglob("*") if f.is_file()} if path.is_dir() else {path}
        if line.startswith("RUN") and "build_instrument" in line and "build_driver" in line:
            sources = {REPO / "lab/instrument/profile_prefill.cpp", REPO / "lab/inproc/driver.cpp"}
            assert sources <= copied, f"the tools' step lacks {sorted(map(str, sources - copied))}"
            for source in sources:
                for name in re.findall(r'^#include "([^"]+)"', source.read_text(), flags=re.M):
                    header = NATIVE.resolve() / name
                    if header.exists():  # else an engine header (llama.h, ggml.h)
                        assert header in copied, f"{source.name} includes {name}, not copied before its build"
            return
    raise AssertionError("the step that compiles the C++ tools was not found")
