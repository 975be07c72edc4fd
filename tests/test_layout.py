"""The layout holds: imports flow one way, no cycles, no module too long.

The import graph is read from the source with :mod:`ast`, so an import inside a function
counts as much as one at the top of a module. Between the top-level packages the rule is
:data:`ALLOWED`; inside them, each room (a subpackage such as ``bus.policy``) says in the
``Imports:`` line of its docstring which other rooms and modules it may import, and no two
rooms or top-level modules import each other, directly or around a loop.
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


def rooms() -> dict[str, set[str]]:
    """Each subpackage's declared imports, from the ``Imports:`` line of its docstring."""
    declared: dict[str, set[str]] = {}
    for package in PACKAGES:
        for init in sorted((ROOT / package).glob("*/__init__.py")):
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            lines = [line for line in doc.splitlines() if line.startswith("Imports: ")]
            assert len(lines) == 1, f"{init.relative_to(ROOT)} needs one 'Imports: ...' line in its docstring"
            names = lines[0].removeprefix("Imports: ").rstrip(".")
            declared[f"{package}.{init.parent.name}"] = (
                set() if names.startswith("nothing") else {n.strip() for n in names.split(",")}
            )
    return declared


def room_of(module: str, declared: dict[str, set[str]]) -> str:
    room = ".".join(module.split(".")[:2])
    return room if room in declared else module


def test_every_room_imports_only_what_it_declares(graph: dict[str, set[str]]) -> None:
    declared = rooms()
    wrong = sorted(
        f"{name} imports {target} ({room} declares: {', '.join(sorted(declared[room])) or 'nothing'})"
        for name, targets in graph.items()
        if (room := room_of(name, declared)) in declared
        for target in targets
        if (other := room_of(target, declared)) != room
        and other not in declared[room]
        and target.split(".")[0] not in declared[room]
    )
    assert wrong == []


def test_no_cycles_between_rooms(graph: dict[str, set[str]]) -> None:
    declared = rooms()
    edges: dict[str, set[str]] = {}
    for name, targets in graph.items():
        here = room_of(name, declared)
        edges.setdefault(here, set()).update(t for t in map(lambda t: room_of(t, declared), targets) if t != here)
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

    for start in sorted(edges):
        if start not in state:
            visit(start, [])
    assert cycles == []


def test_the_rooms_are_read() -> None:
    # Guards the two tests above against passing on no rooms.
    declared = rooms()
    assert declared["bus.hooks"] == {"bus.errors"} and declared["bus.redaction"] == set()
    assert {"bus.policy", "bus.stream", "workers.engine", "gateway.replies", "hookbus.install"} <= set(declared)


def test_the_graph_is_read(graph: dict[str, set[str]]) -> None:
    # Guards the two tests above against passing on an empty graph.
    assert "gateway.server" in graph["hookbus.commands"]
    assert "workers.jobs.enqueue" in graph["workers.dispatcher.answering"]


def test_only_the_boundary_knows_redis_py_errors() -> None:
    # bus.redis.connection maps them to BusUnavailable and RedisCommandError; nothing else
    # catches (or raises) redis-py's own classes.
    importing = sorted(
        name
        for name, path in modules()
        if name != "bus.redis.connection"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if (isinstance(node, ast.Import) and any(a.name.startswith("redis.exceptions") for a in node.names))
        or (
            isinstance(node, ast.ImportFrom)
            and (
                (node.module or "").startswith("redis.exceptions")
                or (node.module == "redis" and any(a.name == "exceptions" for a in node.names))
            )
        )
    )
    assert importing == []


def test_no_module_is_too_long() -> None:
    long = sorted(
        f"{name}: {n} lines" for name, path in modules() if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    )
    assert long == []


def test_every_hookbus_error_is_declared_in_bus_errors() -> None:
    # A class deriving from one of bus.errors' classes anywhere else is a new error outside the hierarchy.
    errors_path = ROOT / "bus" / "errors.py"
    ours = {node.name for node in ast.walk(ast.parse(errors_path.read_text())) if isinstance(node, ast.ClassDef)}
    assert {"HookBusError", "HookTimeout", "LlmError"} <= ours
    elsewhere = sorted(
        f"{name}.{node.name}"
        for name, path in modules()
        if path != errors_path
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ClassDef)
        and any((base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")) in ours for base in node.bases)
    )
    assert elsewhere == []
