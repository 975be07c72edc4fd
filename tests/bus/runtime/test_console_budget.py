"""``HOOKBUS_CONSOLE_BUDGET_S``: the time a console replay or coverage report may take, read once and checked."""

from __future__ import annotations

import pytest

from bus.errors import ConfigError
from bus.runtime.settings import Settings


def test_the_budget_defaults_to_ten_seconds_and_is_read_from_the_environment() -> None:
    assert Settings.from_env({}).console_budget_s == 10.0
    assert Settings.from_env({"HOOKBUS_CONSOLE_BUDGET_S": "2.5"}).console_budget_s == 2.5


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_a_budget_that_cannot_work_is_one_clear_line(value: str) -> None:
    with pytest.raises(ConfigError, match="HOOKBUS_CONSOLE_BUDGET_S") as caught:
        Settings.from_env({"HOOKBUS_CONSOLE_BUDGET_S": value})
    assert "\n" not in str(caught.value)
