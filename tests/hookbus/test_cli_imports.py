"""Building the ``hookbus`` parser, ``--help`` included, loads no sub-command's module.

Each test imports ``hookbus.cli`` afresh in this process, with every module of hookbus and of
the heavy libraries out of ``sys.modules`` and an import finder in front that refuses (and
notes) them; ``sys.modules`` is put back afterwards.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
from collections.abc import Iterator, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

import pytest

#: What only running a sub-command may import: the libraries and the rooms behind the commands.
HEAVY = (
    "pydantic",
    "pydantic_core",
    "redis",
    "httpx",
    "yaml",
    "orjson",
    "uvloop",
    "starlette",
    "gateway",
    "workers",
    "bus.policy",
    "bus.runtime",
    "bus.redis",
    "hookbus.commands",
    "hookbus.tenancy",
    "hookbus.platform",
    "hookbus.client",
)
OURS = ("hookbus", "bus", "gateway", "workers")


def _is_heavy(name: str) -> bool:
    return any(name == heavy or name.startswith(f"{heavy}.") for heavy in HEAVY)


class _Refuser:
    """A meta path finder that refuses every heavy module, and notes which were asked for."""

    def __init__(self) -> None:
        self.refused: list[str] = []

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if _is_heavy(name):
            self.refused.append(name)
            raise ImportError(f"{name} is not for building the parser")
        return None


@contextlib.contextmanager
def fresh_cli() -> Iterator[tuple[_Refuser, ModuleType]]:
    saved = dict(sys.modules)
    for name in list(sys.modules):
        if name.partition(".")[0] in OURS or _is_heavy(name):
            del sys.modules[name]
    refuser = _Refuser()
    sys.meta_path.insert(0, refuser)
    try:
        yield refuser, importlib.import_module("hookbus.cli")
    finally:
        sys.meta_path.remove(refuser)
        for name in [name for name in sys.modules if name not in saved]:
            del sys.modules[name]
        sys.modules.update(saved)


def test_building_the_parser_and_every_help_imports_nothing_heavy() -> None:
    with fresh_cli() as (refuser, cli):
        with contextlib.suppress(ImportError):  # what was refused is in refuser.refused
            parsers = [cli.build_parser()]
            while parsers:  # every (sub-)command's --help text, as argparse prints it
                parser = parsers.pop()
                assert parser.format_help().startswith("usage: hookbus")
                for action in parser._actions:
                    if isinstance(action.choices, dict):
                        parsers.extend(action.choices.values())
    assert refuser.refused == []


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["tail", "--help"], ["policy", "push", "--help"], ["tokens", "create", "--help"], ["tial"]],
)
def test_the_command_line_parses_without_importing_a_command(argv: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    with fresh_cli() as (refuser, cli), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
    assert refuser.refused == []
    assert exited.value.code == (2 if argv == ["tial"] else 0)
    assert (out.getvalue() or err.getvalue()).startswith("usage: hookbus")
