"""The dispatcher's outbox (:mod:`workers.dispatcher.outbox`): coalesced writes, their order, retries, on a real Redis.

What a settle writes (records, replies, outcome keys) is :mod:`tests.bus.stream.test_settle`'s subject;
here it is how the outbox sends writes: round trips are counted on the server (``INFO stats``
``total_reads_processed``), the order of commands is read with MONITOR, and failures are a
stopped Redis or a key of the wrong type.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from bus.redis.connection import connect
from bus.redis.keys import DISPATCH_GROUP, Keyspace
from bus.runtime.metrics import Metrics
from bus.runtime.replykey import reply_json
from bus.stream.protocol import LogRecord, Reply, Request, now_ms
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import BusProbe, async_wait_for, redis_reads
from workers.dispatcher.outbox import Outbox, Settle

KEYS = Keyspace()
STREAM = KEYS.events_stream()
DEAD = KEYS.dead_letter_stream()


@pytest.fixture
def m() -> Metrics:
    """The metrics the outboxes under test count into (a registry of this test's own)."""
    return Metrics()


@pytest_asyncio.fixture
async def outbox(bus: BusProbe, m: Metrics) -> AsyncIterator[Outbox]:
    box = Outbox(bus.redis, KEYS, metrics=m)
    await box.start()
    yield box
    await box.stop()


async def pending_entries(redis: aioredis.Redis, count: int) -> list[bytes]:
    """``count`` entries appended to STREAM and read by a dispatcher: pending, unacknowledged."""
    await redis.xgroup_create(STREAM, DISPATCH_GROUP, id="0", mkstream=True)
    for n in range(count):
        await redis.xadd(STREAM, {"n": n})
    read = await redis.xreadgroup(DISPATCH_GROUP, "test-consumer", {STREAM: ">"})
    return [entry_id for _, entries in read for entry_id, _ in entries]


async def pending(redis: aioredis.Redis) -> list[bytes]:
    found = await redis.xpending_range(STREAM, DISPATCH_GROUP, min="-", max="+", count=1000)
    return [p["message_id"] for p in found]


def settle(entry_id: bytes, n: int) -> Settle:
    """Settling a non-blocking event read from STREAM: its record, then its acknowledgement."""
    request = Request(f"evt-{n}", "Notification", "default", b'{"session_id": "s-1"}', now_ms())
    record = LogRecord(
        event_id=request.event_id,
        event=request.event,
        tenant="default",
        session_id="s-1",
        outcome="recorded",
        decision="none",
        output={},
        payload=request.payload,
        received_ms=request.received_ms,
        decided_ms=now_ms(),
    )
    return Settle(STREAM, entry_id, request, record, None, 1000)


async def logged_ids(redis: aioredis.Redis) -> list[str]:
    return [LogRecord.decode(fields).event_id for _, fields in await redis.xrange(KEYS.decision_log())]


async def test_flushed_returns_at_once_when_nothing_is_queued(outbox: Outbox) -> None:
    await asyncio.wait_for(outbox.flushed(), 1)
    assert len(outbox) == 0


async def test_writes_queued_together_go_in_one_round_trip(outbox: Outbox, bus: BusProbe) -> None:
    ids = await pending_entries(bus.redis, 50)
    before = await redis_reads(bus.redis)
    for n, entry_id in enumerate(ids):  # queued without yielding: one flush
        outbox.settle(settle(entry_id, n))
    assert len(outbox) == 50
    await asyncio.wait_for(outbox.flushed(), 5)
    after = await redis_reads(bus.redis)
    # One pipeline (after redis-py's SCRIPT EXISTS/LOAD, and this INFO), not fifty round trips.
    assert after - before <= 6, after - before
    assert await logged_ids(bus.redis) == [f"evt-{n}" for n in range(50)]
    assert await pending(bus.redis) == []
    assert len(outbox) == 0


async def test_dead_letters_are_written_before_their_entries_are_acknowledged(
    outbox: Outbox, bus: BusProbe, redis_url: str
) -> None:
    ids = await pending_entries(bus.redis, 3)
    watcher = connect(redis_url, socket_timeout_s=None)
    commands: list[str] = []
    try:
        async with watcher.monitor() as monitor:
            for n, entry_id in enumerate(ids):
                outbox.ack(STREAM, entry_id)
                if n != 1:
                    outbox.xadd(DEAD, {"stream": STREAM, "id": entry_id, "why": "poison"}, 100)
            async with asyncio.timeout(5):
                while not commands or not commands[-1].startswith("XACK"):
                    info: Any = await monitor.next_command()
                    if info["command"].split(" ", 1)[0].upper() in ("XADD", "XACK"):
                        commands.append(info["command"].upper())
    finally:
        await watcher.aclose()
    # Both dead letters first, then one XACK for every entry of the stream.
    assert [c.split(" ", 2)[:2] for c in commands] == [["XADD", DEAD.upper()]] * 2 + [["XACK", STREAM.upper()]]
    assert all(entry_id.decode() in commands[-1] for entry_id in ids)
    dead = [fields[b"id"] for _, fields in await bus.redis.xrange(DEAD)]
    assert dead == [ids[0], ids[2]]
    assert await pending(bus.redis) == []


async def test_a_write_redis_never_takes_is_dropped_not_retried_forever(
    outbox: Outbox, bus: BusProbe, caplog: pytest.LogCaptureFixture, m: Metrics
) -> None:
    ids = await pending_entries(bus.redis, 1)
    await bus.redis.set(DEAD, "not a stream")  # XADD to it fails with WRONGTYPE, now and always
    with caplog.at_level(logging.WARNING, logger="hookbus.dispatcher"):
        outbox.xadd(DEAD, {"why": "poison"}, 100)
        outbox.settle(settle(ids[0], 0))
        await asyncio.wait_for(outbox.flushed(), 10)  # not wedged by the refused write
    assert "WRONGTYPE" in outbox.last_error and "refused a write" in caplog.text
    assert "retrying in" not in caplog.text
    assert await logged_ids(bus.redis) == ["evt-0"]  # the others settled at once, and only once
    assert await pending(bus.redis) == []
    assert m.value("hookbus_redis_errors_total", op="xadd") == 1


async def test_writes_wait_while_redis_is_down_and_land_when_it_is_back(
    private_redis: EmbeddedRedis, caplog: pytest.LogCaptureFixture, m: Metrics
) -> None:
    client = connect(private_redis.url)
    box = Outbox(client, KEYS, private_redis.url, metrics=m)
    await box.start()
    try:
        private_redis.stop()
        with caplog.at_level(logging.WARNING, logger="hookbus.dispatcher"):
            box.xadd(DEAD, {"n": 1}, 100)
            box.xadd(DEAD, {"n": 2}, 100)
            await async_wait_for(lambda: "redis unavailable" in caplog.text, timeout_s=5)
        assert "2 writes failed" in caplog.text
        private_redis.start()
        await asyncio.wait_for(box.flushed(), 10)  # retried with backoff, no restart needed
        assert [fields[b"n"] for _, fields in await client.xrange(DEAD)] == [b"1", b"2"]
    finally:
        await box.stop()
        await client.aclose()


async def test_stop_gives_up_after_its_timeout_and_says_what_is_left(
    bus: BusProbe, caplog: pytest.LogCaptureFixture, m: Metrics
) -> None:
    box = Outbox(bus.redis, KEYS, metrics=m)  # never started: nothing will flush these
    box.xadd(DEAD, {"n": 1}, 100)
    box.ack(STREAM, b"1-1")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="hookbus.dispatcher"):
        await box.stop(timeout_s=0.2)
    assert 0.15 <= time.monotonic() - started < 3.0
    assert "stopping with 2 unflushed writes; their entries stay pending" in caplog.text
    assert await bus.redis.exists(DEAD) == 0


def blocking_settle(entry_id: bytes, n: int, channel: str) -> Settle:
    """Settling a blocking event read from STREAM in time: its record, its reply on ``channel``."""
    request = Request(
        f"evt-{n}", "PreToolUse", "default", b'{"session_id": "s-1"}', now_ms(), now_ms() + 30_000, channel
    )
    reply = Reply(request.event_id, {}, "allow")
    record = LogRecord(
        event_id=request.event_id,
        event=request.event,
        tenant="default",
        session_id="s-1",
        outcome="decided",
        decision="allow",
        output={},
        payload=request.payload,
        received_ms=request.received_ms,
        decided_ms=now_ms(),
    )
    return Settle(STREAM, entry_id, request, record, reply, 1000)


async def read_replies(pubsub: Any, expected: int) -> list[list[str]]:
    """The event ids of each message on ``pubsub`` until ``expected`` replies arrived."""
    messages: list[list[str]] = []
    async with asyncio.timeout(5):
        while sum(map(len, messages)) < expected:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is not None:
                # One sealed reply per line (bus.runtime.replykey).
                lines = message["data"].split(b"\n")
                messages.append([Reply.decode(reply_json(line)).event_id for line in lines])
    return messages


async def test_a_flush_settles_its_events_in_one_call_and_answers_a_gateway_in_one_message(
    outbox: Outbox, bus: BusProbe, redis_url: str
) -> None:
    ids = await pending_entries(bus.redis, 20)
    channel = f"{KEYS.prefix}reply:test-gateway"
    subscriber = connect(redis_url, socket_timeout_s=None)
    pubsub = subscriber.pubsub()
    try:
        await pubsub.subscribe(channel)
        await pubsub.get_message(timeout=1.0)  # the subscription's confirmation
        calls_before = (await bus.redis.info("commandstats")).get("cmdstat_evalsha", {}).get("calls", 0)
        for n, entry_id in enumerate(ids):  # queued without yielding: one flush
            outbox.settle(blocking_settle(entry_id, n, channel))
        messages = await read_replies(pubsub, 20)
        await asyncio.wait_for(outbox.flushed(), 5)
        calls = (await bus.redis.info("commandstats"))["cmdstat_evalsha"]["calls"] - calls_before
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await subscriber.aclose()
    assert calls == 1
    assert messages == [[f"evt-{n}" for n in range(20)]]
    assert await logged_ids(bus.redis) == [f"evt-{n}" for n in range(20)]
    assert await pending(bus.redis) == []


async def test_an_event_redis_refuses_stays_pending_alone_and_its_batch_is_answered(
    bus: BusProbe, redis_url: str, caplog: pytest.LogCaptureFixture, m: Metrics
) -> None:
    ids = await pending_entries(bus.redis, 3)
    await bus.redis.rpush(KEYS.outcome("evt-2"), "not a string")  # type: ignore[misc]  # GET: WRONGTYPE, always
    refused: list[bytes] = []
    box = Outbox(bus.redis, KEYS, on_refused=lambda stream, entry_id: refused.append(entry_id), metrics=m)
    await box.start()
    channel = f"{KEYS.prefix}reply:test-gateway"
    subscriber = connect(redis_url, socket_timeout_s=None)
    pubsub = subscriber.pubsub()
    try:
        await pubsub.subscribe(channel)
        await pubsub.get_message(timeout=1.0)
        with caplog.at_level(logging.WARNING, logger="hookbus.dispatcher"):
            for n, entry_id in enumerate(ids):
                box.settle(blocking_settle(entry_id, n, channel))
            messages = await read_replies(pubsub, 2)
            await asyncio.wait_for(box.flushed(), 10)
    finally:
        await box.stop()
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await subscriber.aclose()
    # Event 1 was logged by the call that failed on event 2: the one-by-one re-send answers it.
    assert sorted(event_id for message in messages for event_id in message) == ["evt-0", "evt-1"]
    assert await logged_ids(bus.redis) == ["evt-0", "evt-1"]
    assert await pending(bus.redis) == [ids[2]]
    assert refused == [ids[2]]
    assert "WRONGTYPE" in caplog.text and "retrying in" not in caplog.text
