"""The layout holds: imports flow one way, no cycles, no module too long.

The import graph is read from the source with :mod:`ast`, so an import inside a function
counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hookbus", "gateway", "workers", "bus")
#: Which packages each package may import (besides itself).
ALLOWED = {
    "hookbus": {"gateway", "workers", "bus"},
    "gateway": {"bus"},
    "workers": {"bus"},
    "bus": set(),
}
MAX_MODULE_LINES = 450


def modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def imports_of(name: str, path: Path) -> set[str]:
    """Every project module that ``name`` imports, wherever the import statement stands."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return {module for module in found if module.split(".")[0] in PACKAGES}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = dict(modules())
    return {name: {m for m in imports_of(name, path) if m in known and m != name} for name, path in known.items()}


def test_imports_flow_one_way(graph: dict[str, set[str]]) -> None:
    wrong = sorted(
        f"{name} imports {target}"
        for name, targets in graph.items()
        for target in targets
        if (top := target.split(".")[0]) != name.split(".")[0] and top not in ALLOWED[name.split(".")[0]]
    )
    assert wrong == []


def test_no_import_cycles(graph: dict[str, set[str]]) -> None:
    # A package's __init__ importing its own submodules is not a cycle worth reporting.
    edges = {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in graph.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    assert cycles == []


def test_the_graph_is_read(graph: dict[str, set[str]]) -> None:
    # Guards the two tests above against passing on an empty graph.
    assert "gateway.server" in graph["hookbus.commands"]
    assert "workers.queue" in graph["workers.dispatcher"]


def test_no_module_is_too_long() -> None:
    long = sorted(
        f"{name}: {n} lines" for name, path in modules() if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    )
    assert long == []
