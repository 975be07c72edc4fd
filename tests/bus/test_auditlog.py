"""Reading the decision log as an audit trail (:mod:`bus.auditlog`): times, windows, filters."""

from __future__ import annotations

import datetime

import orjson
import pytest

from bus.auditlog import RecordFilter, TimeError, Window, entry_ms, parse_time
from bus.protocol import LogRecord

NOW = 1_736_242_200_000  # 2025-01-07T09:30:00Z


@pytest.mark.parametrize(("text", "ms"), [
    ("now", NOW), ("90s", NOW - 90_000), ("15m", NOW - 900_000), ("1h", NOW - 3_600_000), ("1.5h", NOW - 5_400_000),
    ("7d", NOW - 604_800_000), ("2w", NOW - 1_209_600_000), ("250ms", NOW - 250),
    ("2025-01-07T09:30:00Z", NOW), ("2025-01-07T10:30:00+01:00", NOW), ("2025-01-07T09:30:00.250Z", NOW + 250),
    ("1736242200", NOW), ("1736242200000", NOW),
])
def test_times(text: str, ms: int) -> None:
    assert parse_time(text, NOW) == ms


def test_a_time_without_a_zone_is_local_time() -> None:
    local = datetime.datetime(2025, 1, 7, 9, 30).astimezone()
    assert parse_time("2025-01-07T09:30:00", NOW) == int(local.timestamp() * 1000)


@pytest.mark.parametrize("text", ["yesterday", "1y", "-5m", "", "2025-13-01"])
def test_unreadable_times_say_what_works(text: str) -> None:
    with pytest.raises(TimeError, match="use now, 15m, 2h, 7d"):
        parse_time(text, NOW)


def test_a_window_is_inclusive_stream_ids() -> None:
    window = Window.parse("2025-01-07T09:30:00Z", "now", NOW + 5000)
    assert (window.low, window.high) == (f"{NOW}-0", f"{NOW + 5000}-18446744073709551615")
    assert (Window().low, Window().high) == ("-", "+")
    with pytest.raises(TimeError, match="ends before it starts"):
        Window.parse("1h", "2h", NOW)
    assert entry_ms(b"1736242200000-7") == NOW


def record(**fields: str) -> LogRecord:
    base = {"event_id": "e", "event": "PreToolUse", "tenant": "acme", "session_id": "sess-42", "outcome": "decided",
            "decision": "deny"}
    return LogRecord(**{**base, **fields}, output={}, payload=b"{}", received_ms=0, decided_ms=0)  # type: ignore[arg-type]


def test_filters() -> None:
    assert RecordFilter()(record())
    assert RecordFilter.of(sessions=["sess-4"])(record())
    assert not RecordFilter.of(sessions=["ess"])(record())  # a prefix, not a substring
    assert RecordFilter.of(decisions=["allow,deny"], events=["PreToolUse"])(record())
    assert RecordFilter.of(decisions=["fail-open"])(record(outcome="fail-open", decision="none"))
    assert not RecordFilter.of(tenants=["globex"])(record())
    assert not RecordFilter.of("globex")(record())  # the scope is no filter a caller can widen
    assert not RecordFilter.of("globex", tenants=["acme"])(record())


def test_a_record_written_before_these_fields_existed_still_reads() -> None:
    meta = {"id": "e1", "ev": "Stop", "tn": "acme", "sid": "s", "outcome": "recorded", "dec": "none", "out": {},
            "ts": 1, "dms": 3, "rev": "r", "hooks": [], "shadow": []}
    old = LogRecord.decode({b"r": orjson.dumps(meta), b"in": b"{}", b"o": b"recorded", b"fo": b""})
    assert (old.agent_id, old.tool_use_id, old.reason, old.masked) == ("", "", "", [])
    view = old.to_json()
    assert view["latency_ms"] == 2 and view["agent_id"] is None and view["masked"] == []
