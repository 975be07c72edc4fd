"""docs/cli.md is generated from the argument parsers (``hookbus.cli_docs``) and must stay in step with them."""

from __future__ import annotations

import argparse

import pytest

from hookbus.cli import build_parser
from hookbus.cli_docs import COMMAND, render
from tests.conftest import REPO

CLI_MD = REPO / "docs" / "cli.md"


def _names(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
    names: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                names.append(f"{prefix} {name}")
                names += _names(child, f"{prefix} {name}")
    return names


def test_docs_cli_md_is_the_generators_output() -> None:
    assert CLI_MD.read_text() == render(), f"docs/cli.md is out of date with hookbus/cli.py: run `{COMMAND}`"


def test_every_sub_command_has_a_section() -> None:
    text = CLI_MD.read_text()
    names = _names(build_parser(), "hookbus")
    assert {"hookbus up", "hookbus policy check", "hookbus dlq purge", "hookbus install"} <= set(names)
    missing = [name for name in names if f"`{name}`" not in text]
    assert not missing, f"docs/cli.md lacks {missing}: run `{COMMAND}`"


def test_the_output_does_not_depend_on_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    narrow = render()
    monkeypatch.setenv("COLUMNS", "300")
    assert render() == narrow
