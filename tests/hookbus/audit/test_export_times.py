"""``hookbus audit export`` with a time out of range: one line on stderr, exit 1, no traceback."""

from __future__ import annotations

import pytest

from tests.conftest import run_hookbus


@pytest.mark.parametrize("since", ["0001-01-01", "99999999999999999999"])
def test_a_time_out_of_range_is_one_line(redis_url: str, since: str) -> None:
    result = run_hookbus("audit", "export", "--redis-url", redis_url, "--since", since)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"hookbus: the time {since!r} is out of range: give one from 1970 to the year 9999"
    )
