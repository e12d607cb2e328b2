"""No function over 60 lines in lab/ or benchmarks/: a long one is split into helpers that say what each part does.

A Typer command is counted by its body (its signature is its options, one declaration each: a declarative list,
not logic). A chart spec (an Altair chart built as one declaration in lab/reports/) may be longer only where it is
listed below with why it is one spec."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent
LIMIT = 60
TREES = ("lab", "benchmarks")

# (module, function) -> why it is one chart spec. None is over the limit today: a chart that grows past it gets
# split into panels, or listed here with its reason.
CHART_SPECS: dict[tuple[str, str], str] = {}

Functions = ast.FunctionDef | ast.AsyncFunctionDef


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def parsed() -> Iterator[tuple[str, ast.Module]]:
    for tree in TREES:
        for path in sorted((REPO / tree).rglob("*.py")):
            yield module_name(path), ast.parse(path.read_text(), str(path))


def typer_commands(module: str, tree: ast.Module) -> set[tuple[str, str]]:
    """The (module, function) pairs a module registers as Typer commands: a function decorated `@app.command(...)`,
    or the one `app.command(...)(f)` registers (`f` a function of its own, or `module.function` of a module it
    imports, as lab.cli registers the top-level commands)."""
    imported = {
        alias.asname or alias.name: f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    out: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, Functions) and any(_is_command(d) for d in node.decorator_list):
            out.add((module, node.name))
        if isinstance(node, ast.Call) and _is_command(node.func) and node.args:
            target = node.args[0]
            if isinstance(target, ast.Name):
                out.add((module, target.id))
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                out.add((imported.get(target.value.id, target.value.id), target.attr))
    return out


def _is_command(node: ast.expr) -> bool:
    """`<app>.command(...)`: a Typer app's command registration."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "command"


def length(node: Functions, command: bool) -> int:
    """Lines from `def` to the end (decorators not counted); a Typer command's from its body's first line."""
    start = node.body[0].lineno if command else node.lineno
    assert node.end_lineno is not None
    return node.end_lineno - start + 1


def too_long(modules: list[tuple[str, ast.Module]]) -> list[str]:
    commands = set().union(*(typer_commands(name, tree) for name, tree in modules))
    out = []
    for name, tree in modules:
        for node in ast.walk(tree):
            if not isinstance(node, Functions) or (name, node.name) in CHART_SPECS:
                continue
            n = length(node, (name, node.name) in commands)
            if n > LIMIT:
                out.append(f"{name}:{node.lineno} {node.name}: {n} lines (at most {LIMIT}: split it into helpers)")
    return out


def test_no_function_is_over_sixty_lines() -> None:
    long = too_long(list(parsed()))
    assert not long, "\n".join(long)


def test_the_chart_specs_allowed_past_the_limit_are_charts_that_need_it() -> None:
    """Each listed spec exists in lab/reports/, is over the limit (else it needs no place here) and says why."""
    functions = {(name, n.name): n for name, tree in parsed() for n in ast.walk(tree) if isinstance(n, Functions)}
    for (module, function), why in CHART_SPECS.items():
        assert module.startswith("lab.reports.") and why, (module, function)
        assert (module, function) in functions, f"{module}.{function} is gone: drop it from CHART_SPECS"
        assert length(functions[(module, function)], False) > LIMIT, f"{module}.{function} fits: drop it"


def test_the_count_is_the_body_for_a_typer_command_and_the_whole_def_otherwise() -> None:
    options = "".join(f"    o{i}: int = typer.Option(0),\n" for i in range(LIMIT))
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT - 2))
    source = (
        "from lab.cli import tools\n"
        f"@app.command('a')\ndef a(\n{options}) -> None:\n    '''doc'''\n{body}\n"
        f"def b(\n{options}) -> None:\n{body}\n"
        f"def c() -> None:\n{body}    y = 1\n    z = 2\n"
        "app.command('t')(tools.t)\n"
    )
    tree = ast.parse(source)
    assert typer_commands("lab.cli", tree) == {("lab.cli", "a"), ("lab.cli.tools", "t")}
    found = too_long([("lab.cli", tree)])
    assert [line.split()[1] for line in found] == ["b:", "c:"], found
