"""A raw decision-log entry says one outcome: its ``o`` field and the JSON of its ``r`` field agree,
also when the settle script turns the dispatcher's ``decided`` into ``fail-open``.

Read with XRANGE, as a pipeline with a consumer group of its own reads the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest_asyncio

from bus.stream.protocol import LogRecord, Reply
from tests.bus.stream.test_settle import DENY, Harness
from tests.conftest import BusProbe, async_wait_for

SLOW = """
hookbus: {deadlineSeconds: 0.3}
hooks:
  UserPromptSubmit:
    - hooks:
        - {type: command, command: "sleep 1"}
"""


async def _raw(bus: BusProbe, stream: str, event_id: str) -> dict[bytes, bytes] | None:
    for _, fields in await bus.redis.xrange(stream):
        if orjson.loads(fields[b"r"])["id"] == event_id:
            return dict(fields)
    return None


def _outcomes(fields: dict[bytes, bytes]) -> tuple[str, str]:
    return fields[b"o"].decode(), orjson.loads(fields[b"r"])["outcome"]


async def test_an_event_answered_fail_open_on_its_deadline_says_so_in_both(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform(SLOW) as p:
        response = await p.post({"hook_event_name": "UserPromptSubmit", "session_id": "s-slow", "prompt": "hi"})
        assert response.headers["X-Hookbus-Outcome"] == "fail-open"
        event_id = response.headers["X-Hookbus-Event-Id"]
        fields = await async_wait_for(lambda: _raw(bus, bus.keys.decision_log(), event_id), timeout_s=10)
    assert _outcomes(fields) == ("fail-open", "fail-open")
    assert fields[b"fo"] == b"timeout"
    assert LogRecord.decode(fields).outcome == "fail-open"


@pytest_asyncio.fixture
async def harness(bus: BusProbe) -> AsyncIterator[Harness]:
    h = Harness(bus)
    await h.outbox.start()
    yield h
    await h.outbox.stop()


async def test_every_way_to_settle_writes_one_outcome(harness: Harness) -> None:
    stream = harness.keys.decision_log()
    in_time, in_time_id = await harness.entry()
    await harness.settle(in_time, in_time_id, Reply(in_time.event_id, DENY, "deny"))
    late, late_id = await harness.entry(deadline_in_ms=-1)
    await harness.settle(late, late_id, Reply(late.event_id, DENY, "deny"))
    claimed, claimed_id = await harness.entry()
    assert await harness.claim(claimed) is None  # the gateway answered first
    await harness.settle(claimed, claimed_id, Reply(claimed.event_id, DENY, "deny"))
    spooled, spooled_id = await harness.entry(fail_open="redis_unavailable")
    await harness.settle(spooled, spooled_id, Reply(spooled.event_id, DENY, "deny"))
    said = {}
    for request in (in_time, late, claimed, spooled):
        fields = await _raw(harness.bus, stream, request.event_id)
        assert fields is not None
        said[request.event_id] = _outcomes(fields)
        # The rest of the JSON is the dispatcher's, untouched: what it decided, for the agent or not.
        assert orjson.loads(fields[b"r"])["dec"] == "deny"
    assert said == {
        in_time.event_id: ("decided", "decided"),
        late.event_id: ("fail-open", "fail-open"),
        claimed.event_id: ("fail-open", "fail-open"),
        spooled.event_id: ("fail-open", "fail-open"),
    }


def test_the_record_json_starts_with_its_outcome() -> None:
    """The settle script finds the outcome to rewrite there, before any value of the record."""
    record = LogRecord(
        event_id='"outcome":"decided"',
        event="PreToolUse",
        tenant="default",
        session_id="s",
        outcome="decided",
        decision="deny",
        output={"outcome": "x"},
        payload=b"{}",
        received_ms=1,
        decided_ms=2,
    )
    assert record.meta().startswith(b'{"outcome":"decided",')
