"""docs/agents.md's capability table is generated from the dialects' declarations and must match them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.dialects import DIALECTS
from bus.dialects.base import CAPABILITIES, Support
from bus.dialects.table import BEGIN, END, render, replace_in

PAGE = Path(__file__).resolve().parents[3] / "docs" / "agents.md"


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_every_dialect_declares_every_capability(name: str) -> None:
    declared = DIALECTS[name].capabilities
    assert set(declared) == set(CAPABILITIES), f"{name}: declare exactly {CAPABILITIES}"
    for capability, value in declared.items():
        assert isinstance(value.support, Support)
        if value.support is not Support.YES:
            assert value.note, f"{name}.{capability} is {value.support}: its note must say what hookbus sends instead"


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_every_dialect_says_how_it_was_verified(name: str) -> None:
    verified = DIALECTS[name].verified
    if not verified:
        pytest.skip(f"{name}: not verified yet")  # a dialect being written; the table says **not yet**
    assert verified.startswith(("real CLI: ", "documentation only", "hookbus's own", "Peri's")), verified


def test_the_page_holds_the_generated_table() -> None:
    text = PAGE.read_text()
    assert replace_in(text) == text, "regenerate it: python -m bus.dialects.table --write docs/agents.md"


def test_the_table_has_a_row_per_agent_and_a_column_per_capability() -> None:
    table = render()
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(DIALECTS) - 1  # the header, then every agent but the SDK
    assert rows[0].count("|") == 1 + 1 + len(CAPABILITIES) + 2
    for name, dialect in DIALECTS.items():
        assert any(row.startswith(f"| {dialect.title} (`{name}`) |") for row in rows) == (name != "sdk"), name
        for capability in CAPABILITIES:
            assert name == "sdk" or dialect.capabilities[capability].note in table


def test_replacing_needs_both_markers() -> None:
    with pytest.raises(ValueError, match="markers"):
        replace_in(f"{BEGIN}\nno end")
    assert replace_in(f"a\n{BEGIN}\nold\n{END}\nb") == f"a\n{BEGIN}\n{render()}{END}\nb"
