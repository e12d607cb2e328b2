"""The README and the docs as a newcomer reads them: the first screen, short table cells, a Layout that names
only what exists and every package that does, and links that land (file and heading)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
FIRST_SCREEN = 60
MAX_CELL = 200
LINK = re.compile(r"\]\(([^)\s]+)\)")


def section(text: str, title: str) -> str:
    """The text under `## title`, up to the next `## ` heading."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def layout_paths(text: str) -> list[str]:
    """The first word of each line of the Layout's code block that names a path."""
    block = section(text, "Layout").split("```")[1]
    words = [line.split()[0] for line in block.splitlines()[1:] if line.strip() and not line.startswith(" ")]
    return [w for w in words if "/" in w or "." in w]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in page.read_text().splitlines():
        in_code ^= line.startswith("```")
        if in_code or not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def pages() -> list[Path]:
    return [README, *sorted((REPO / "docs").rglob("*.md"))]


def test_the_first_screen_holds_the_question_the_commands_an_excerpt_and_the_command_list() -> None:
    first = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    assert "make demo" in first and "make test" in first
    assert "cache hit" in first and "where does the time go" in first
    assert "## What the demo prints at its end" in first and "[95% interval]" in first
    # right after the demo: from the user's own host and model to their answer, then the command list
    assert "## Your host, your model, your answer" in first and "lab show " in first and "--vs " in first
    assert "## Commands" in "\n".join(README.read_text().splitlines()[: FIRST_SCREEN + 30])


def test_no_readme_table_cell_is_a_paragraph() -> None:
    for n, line in enumerate(README.read_text().splitlines(), 1):
        if line.startswith("|"):
            for cell in re.split(r"(?<!\\)\|", line)[1:-1]:
                assert len(cell.strip()) <= MAX_CELL, f"README.md:{n}: a cell of {len(cell.strip())} characters"


def test_the_layout_names_what_exists_and_every_package() -> None:
    text = README.read_text()
    named = layout_paths(text)
    missing = [p for p in named if not (REPO / p.rstrip("/")).exists()]
    assert not missing, f"the Layout names paths that do not exist: {missing}"
    packages = sorted(
        str(d.relative_to(REPO)) + "/" for d in (REPO / "lab").rglob("*") if (d / "__init__.py").is_file()
    )
    unnamed = [p for p in packages if p not in named]
    assert not unnamed, f"packages the Layout does not name: {unnamed}"


def test_every_relative_link_lands_on_a_file_and_heading() -> None:
    broken = []
    for page in pages():
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_docs_read_as_a_manual() -> None:
    notebook = re.compile(r"this round|earlier round|until this round|last stop", re.I)
    found = [
        f"{p.relative_to(REPO)}:{n}"
        for p in pages()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if notebook.search(line)
    ]
    assert not found, f"development-notebook words in the manual: {found}"
