"""Reading the decision log as an audit trail (:mod:`bus.decisionlog.audit`): times, windows, filters, and a
log of four partitions read as one (a real Redis)."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from bus.decisionlog.audit import RecordFilter, Window, log_state, parse_time, read_window
from bus.decisionlog.reader import read_merged
from bus.errors import TimeError
from bus.redis.entries import entry_ms
from bus.redis.keys import Keyspace
from bus.stream.protocol import LogRecord
from tests.conftest import BusProbe

NOW = 1_736_242_200_000  # 2025-01-07T09:30:00Z


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("now", NOW),
        ("90s", NOW - 90_000),
        ("15m", NOW - 900_000),
        ("1h", NOW - 3_600_000),
        ("1.5h", NOW - 5_400_000),
        ("7d", NOW - 604_800_000),
        ("2w", NOW - 1_209_600_000),
        ("250ms", NOW - 250),
        ("2025-01-07T09:30:00Z", NOW),
        ("2025-01-07T10:30:00+01:00", NOW),
        ("2025-01-07T09:30:00.250Z", NOW + 250),
        ("1736242200", NOW),
        ("1736242200000", NOW),
    ],
)
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
    base = {
        "event_id": "e",
        "event": "PreToolUse",
        "tenant": "acme",
        "session_id": "sess-42",
        "outcome": "decided",
        "decision": "deny",
    }
    return LogRecord(**{**base, **fields}, output={}, payload=b"{}", received_ms=0, decided_ms=0)  # type: ignore[arg-type]


def test_filters() -> None:
    assert RecordFilter().matches(record())
    assert RecordFilter.of(sessions=["sess-4"]).matches(record())
    assert not RecordFilter.of(sessions=["ess"]).matches(record())  # a prefix, not a substring
    assert RecordFilter.of(decisions=["allow,deny"], events=["PreToolUse"]).matches(record())
    assert RecordFilter.of(decisions=["fail-open"]).matches(record(outcome="fail-open", decision="none"))
    assert not RecordFilter.of(tenants=["globex"]).matches(record())
    assert not RecordFilter.of("globex").matches(record())  # the scope is no filter a caller can widen
    assert not RecordFilter.of("globex", tenants=["acme"]).matches(record())
    assert RecordFilter.of(decisions=["decided"]).matches(record())  # every outcome, as every reader has it


def test_the_agent_filter() -> None:
    assert RecordFilter.of(agents=["claude"]).matches(record())  # a record without a dialect is Claude Code's
    assert not RecordFilter.of(agents=["gemini"]).matches(record())
    assert RecordFilter.of(agents=["codex, Gemini"]).matches(record(agent="gemini"))  # names in any case
    assert RecordFilter.of(agents=["GEMINI"]).agents == frozenset({"gemini"})
    assert not RecordFilter.of(agents=["gemini"], tenants=["globex"]).matches(record(agent="gemini"))


def test_a_record_written_before_these_fields_existed_still_reads() -> None:
    meta = {
        "id": "e1",
        "ev": "Stop",
        "tn": "acme",
        "sid": "s",
        "outcome": "recorded",
        "dec": "none",
        "out": {},
        "ts": 1,
        "dms": 3,
        "rev": "r",
        "hooks": [],
        "shadow": [],
    }
    old = LogRecord.decode({b"r": orjson.dumps(meta), b"in": b"{}", b"o": b"recorded", b"fo": b""})
    assert (old.agent_id, old.tool_use_id, old.reason, old.masked) == ("", "", "", [])
    view = old.to_json()
    assert view["latency_ms"] == 2 and view["agent_id"] is None and view["masked"] == []


# -- four partitions: one log, merged by entry id ---------------------------------------------------

FOUR = Keyspace(partitions=4)
AT_MS = 1_700_000_000_000
#: (partition, entry id offset in ms, seq): partitions written unevenly, with two ids that two
#: partitions share (the same millisecond and sequence number in both).
LAYOUT = [
    (0, 0, 0),
    (2, 1, 0),
    (1, 2, 0),
    (3, 2, 0),
    (0, 3, 0),
    (0, 3, 1),
    (2, 5, 0),
    (1, 6, 0),
    (3, 7, 0),
    (2, 7, 0),
    (1, 9, 0),
]


async def write_partitions(bus: BusProbe, layout: list[tuple[int, int, int]] = LAYOUT) -> list[tuple[int, str]]:
    """XADD one record per ``(partition, ms, seq)`` with that id; returns (partition, id) in merged order."""
    for n, (partition, ms, seq) in enumerate(layout):
        entry = record(event_id=f"ev-{n:02d}", tenant="acme" if partition % 2 else "globex")
        await bus.redis.xadd(
            FOUR.decision_log(partition),
            entry.encode(),  # type: ignore[arg-type]
            id=f"{AT_MS + ms}-{seq}",
        )
    return [(p, f"{AT_MS + ms}-{seq}") for ms, seq, p in sorted((ms, seq, p) for p, ms, seq in layout)]


async def window_ids(bus: BusProbe, window: Window | None = None, **options: Any) -> list[tuple[str, str]]:
    return [
        (log_id, found.event_id) async for log_id, found in read_window(bus.redis, FOUR, window or Window(), **options)
    ]


async def test_a_window_merges_every_partition_in_id_order_ties_in_partition_order(bus: BusProbe) -> None:
    merged = await write_partitions(bus)
    by_event = {f"ev-{n:02d}": (p, f"{AT_MS + ms}-{seq}") for n, (p, ms, seq) in enumerate(LAYOUT)}
    for page in (1, 2, 3, 500):
        got = await window_ids(bus, page=page)
        assert [by_event[event_id] for _, event_id in got] == merged, page
        assert len({event_id for _, event_id in got}) == len(LAYOUT)
    # The window bounds hold in every partition.
    inside = await window_ids(bus, Window(AT_MS + 2, AT_MS + 7))
    assert [log_id for log_id, _ in inside] == [
        f"{AT_MS + ms}-{seq}" for ms, seq in ((2, 0), (2, 0), (3, 0), (3, 1), (5, 0), (6, 0), (7, 0), (7, 0))
    ]
    only_acme = [
        event_id
        async for _, event_id in _events(read_window(bus.redis, FOUR, Window(), RecordFilter.of(tenants=["acme"])))
    ]
    assert only_acme == [event_id for _, event_id in await window_ids(bus) if by_event[event_id][0] % 2]


async def _events(pairs: AsyncIterator[tuple[str, LogRecord]]) -> AsyncIterator[tuple[str, str]]:
    async for log_id, found in pairs:
        yield log_id, found.event_id


async def test_pages_resumed_with_an_after_cursor_read_each_record_once(bus: BusProbe) -> None:
    """What ``GET /v1/audit/events?after=`` does: a page of ``limit``, then resume after its last log_id."""
    await write_partitions(bus, [(p, ms, 0) for ms in range(12) for p in (ms % 4, (ms + 1) % 4) if p != 3 or ms < 8])
    everything = await window_ids(bus)
    resumed: list[tuple[str, str]] = []
    after = None
    while True:
        page = await window_ids(bus, after=after, limit=3)
        if not page:
            break
        resumed += page
        after = page[-1][0]
        assert len(page) <= 3 or len({log_id for log_id, _ in page[2:]}) == 1  # the limit, then only ties
    assert resumed == everything and len(everything) == 22


async def test_records_written_into_any_partition_while_a_window_is_read_come_once(bus: BusProbe) -> None:
    await write_partitions(bus, [(p, p, 0) for p in range(4)])
    seen = []
    async for log_id, _ in read_window(bus.redis, FOUR, Window(), page=1):
        seen.append(log_id)
        if len(seen) == 2:
            for p in range(4):
                await bus.redis.xadd(
                    FOUR.decision_log(p),
                    record(event_id=f"late-{p}").encode(),  # type: ignore[arg-type]
                    id=f"{AT_MS + 100 + p}-0",
                )
    # Partition 0 had answered a short page (it was done) before late-0 came: read once or not at all.
    assert seen == [f"{AT_MS + ms}-0" for ms in (0, 1, 2, 3, 101, 102, 103)]


async def test_newest_first_merges_every_partition_too(bus: BusProbe) -> None:
    merged = await write_partitions(bus)
    for page in (1, 4):
        got = [
            (e.partition, e.log_id) async for e in read_merged(bus.redis, FOUR.decision_logs, page=page, reverse=True)
        ]
        assert got == merged[::-1]
    starts = [f"({AT_MS + 3}-0", "+", "+", f"({AT_MS + 2}-0"]  # a start bound per partition
    got = [(e.partition, e.log_id) async for e in read_merged(bus.redis, FOUR.decision_logs, high=starts, reverse=True)]
    assert got == [
        (p, i)
        for p, i in merged[::-1]
        if not (p == 0 and i >= f"{AT_MS + 3}-0") and not (p == 3 and i >= f"{AT_MS + 2}-0")
    ]


async def test_the_log_state_adds_up_every_partition(bus: BusProbe) -> None:
    now = AT_MS + 60_000
    await write_partitions(bus)
    for p in range(4):  # an audit follower's group: one per partition log
        await bus.redis.xgroup_create(FOUR.decision_log(p), "siem", id="0")
    delivered = await bus.redis.xreadgroup("siem", "c", {FOUR.decision_log(2): ">"}, count=2)
    await bus.redis.xack(FOUR.decision_log(2), "siem", delivered[0][1][0][0])  # one acknowledged, one pending
    for p in (1, 3):  # everything there acknowledged
        for entry_id, _ in await bus.redis.xrange(FOUR.decision_log(p)):
            await bus.redis.xreadgroup("siem", "c", {FOUR.decision_log(p): ">"})
            await bus.redis.xack(FOUR.decision_log(p), "siem", entry_id)
    state = await log_state(bus.redis, FOUR, now)
    assert state.length == len(LAYOUT) and state.age_s == pytest.approx(60.0)
    (siem,) = state.groups
    # Partition 0: 3 undelivered; partition 2: 1 pending + 1 undelivered (of 3); 1 and 3: none.
    assert (siem.name, siem.pending, siem.lag) == ("siem", 1, 5)
    assert siem.lag_s == pytest.approx(60.0)  # the oldest unacknowledged record: partition 0's first
