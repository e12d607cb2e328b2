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
