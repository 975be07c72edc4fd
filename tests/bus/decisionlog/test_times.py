"""Times and entry ids out of range: a clear :class:`TimeError` (or a refused id), never an overflow."""

from __future__ import annotations

import pytest

from bus.decisionlog.audit import MAX_TIME_MS, Window, parse_time
from bus.decisionlog.reader import read_merged
from bus.errors import TimeError
from bus.redis.entries import MAX_PART, is_entry_id
from tests.conftest import BusProbe


@pytest.mark.parametrize(
    "text",
    ["99999999999999999999", "0001-01-01", "0001-01-01T00:00:00Z", "1969-12-31T00:00:00Z", "99999999999999999999d"],
)
def test_a_time_out_of_range_is_a_time_error(text: str) -> None:
    with pytest.raises(TimeError, match="out of range"):
        parse_time(text, now=1_700_000_000_000)
    with pytest.raises(TimeError):
        Window.parse(text, None)
    with pytest.raises(TimeError):
        Window.parse(None, text)


def test_the_ends_of_the_range_are_read() -> None:
    assert parse_time("0") == 0
    assert parse_time(str(MAX_TIME_MS)) == MAX_TIME_MS
    assert parse_time("9999-12-31T23:59:59Z") == MAX_TIME_MS - 999


def test_an_entry_id_over_64_bits_is_no_entry_id() -> None:
    assert is_entry_id(f"{MAX_PART}-{MAX_PART}")
    assert not is_entry_id("99999999999999999999-9999999999999999999")
    assert not is_entry_id(f"1-{MAX_PART + 1}")


async def test_resuming_after_the_largest_id_reads_nothing(bus: BusProbe) -> None:
    await bus.redis.xadd("s", {"a": "1"})
    entries = [e async for e in read_merged(bus.redis, ["s"], low=f"({MAX_PART}-{MAX_PART}")]
    assert entries == []
    backwards = [e async for e in read_merged(bus.redis, ["s"], high="(0-0", reverse=True)]
    assert backwards == []
