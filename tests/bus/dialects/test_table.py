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


def test_the_page_holds_the_generated_table() -> None:
    text = PAGE.read_text()
    assert replace_in(text) == text, "regenerate it: python -m bus.dialects.table --write docs/agents.md"


def test_the_table_has_a_column_per_agent_and_a_row_per_capability() -> None:
    table = render()
    header = table.splitlines()[0]
    for name, dialect in DIALECTS.items():
        assert (f"(`{name}`)" in header) == (name != "sdk"), name
        for capability in CAPABILITIES:
            note = dialect.capabilities[capability].note
            assert name == "sdk" or note in table
    assert len([line for line in table.splitlines() if line.startswith("| ")]) == 1 + len(CAPABILITIES) + 1


def test_replacing_needs_both_markers() -> None:
    with pytest.raises(ValueError, match="markers"):
        replace_in(f"{BEGIN}\nno end")
    assert replace_in(f"a\n{BEGIN}\nold\n{END}\nb") == f"a\n{BEGIN}\n{render()}{END}\nb"
