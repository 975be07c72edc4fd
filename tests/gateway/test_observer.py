"""The gateway's observer: the platform's Redis state as gauges (a real Redis)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio

from bus.redis.keys import DISPATCH_GROUP, Keyspace
from bus.runtime.metrics import Metrics
from bus.stream.protocol import now_ms
from gateway.observer import Observer, group_lag
from hookbus.platform.redis_server import EmbeddedRedis, free_port
from tests.conftest import BusProbe, async_wait_for, exposition_samples


@pytest.fixture
def m() -> Metrics:
    """The metrics the test's observer sets, on a registry of this test alone."""
    return Metrics()


def stream_gauge(m: Metrics, name: str, stream: str, group: str | None = DISPATCH_GROUP) -> float:
    """A stream gauge the observer set (a series it never set fails, rather than reading 0)."""
    labels = {"stream": stream} if group is None else {"stream": stream, "group": group}
    value = m.registry.get_sample_value(name, labels)
    assert value is not None, f"{name}{labels} was never set"
    return value


@pytest_asyncio.fixture
async def observer(redis_url: str, m: Metrics) -> AsyncIterator[Observer]:
    found = Observer(redis_url, Keyspace(), metrics=m)
    yield found
    await found.stop()


async def test_the_observer_reports_streams_heartbeats_dead_letters_and_the_async_queue(
    observer: Observer, bus: BusProbe, m: Metrics
) -> None:
    keys = bus.keys
    for n in range(5):
        await bus.redis.xadd(keys.blocking_stream(), {"n": n})
    await bus.redis.xgroup_create(keys.blocking_stream(), DISPATCH_GROUP, id="0")
    await bus.redis.xreadgroup(DISPATCH_GROUP, "reader", {keys.blocking_stream(): ">"}, count=2)  # 2 pending
    for n in range(3):
        await bus.redis.xadd(keys.dead_letter_stream(), {"n": n})
    await bus.redis.xadd(keys.decision_log(), {"n": 1})
    await bus.redis.hset(keys.dispatchers, mapping={"fresh": now_ms(), "gone": now_ms() - 60_000})  # type: ignore[misc]
    await bus.redis.zadd(keys.arq_queue, {f"job-{n}": n for n in range(4)})

    assert await observer.observe()
    assert m.value("hookbus_redis_up") == 1
    assert stream_gauge(m, "hookbus_stream_length", "blocking", None) == 5
    assert stream_gauge(m, "hookbus_stream_length", "events", None) == 0  # no such stream yet
    assert stream_gauge(m, "hookbus_stream_length", "decisions", None) == 1
    assert stream_gauge(m, "hookbus_stream_pending", "blocking") == 2
    assert stream_gauge(m, "hookbus_stream_lag", "blocking") == 3
    assert stream_gauge(m, "hookbus_stream_pending", "events") == 0
    assert stream_gauge(m, "hookbus_stream_lag", "events") == 0
    assert m.value("hookbus_dispatchers_alive") == 1  # the other heartbeat is a minute old
    assert m.value("hookbus_dlq_size") == 3
    assert m.value("hookbus_async_queue_depth") == 4


async def test_the_lag_is_zero_once_every_entry_was_delivered(observer: Observer, bus: BusProbe, m: Metrics) -> None:
    stream = bus.keys.events_stream()
    await bus.redis.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True)
    ids = [await bus.redis.xadd(stream, {"n": n}) for n in range(4)]
    await bus.redis.xreadgroup(DISPATCH_GROUP, "reader", {stream: ">"})
    await bus.redis.xack(stream, DISPATCH_GROUP, *ids)  # acknowledged, not yet trimmed
    assert await observer.observe()
    assert (
        stream_gauge(m, "hookbus_stream_length", "events", None),
        stream_gauge(m, "hookbus_stream_lag", "events"),
        stream_gauge(m, "hookbus_stream_pending", "events"),
    ) == (4, 0, 0)
    await bus.redis.xadd(stream, {"n": "new"})
    assert await observer.observe()
    assert stream_gauge(m, "hookbus_stream_lag", "events") >= 1


async def test_with_four_partitions_the_gauges_add_up_every_partition(bus: BusProbe, m: Metrics) -> None:
    keys = Keyspace(partitions=4)
    for partition, (blocking, delivered, dead, logged) in enumerate(
        [(3, 1, 1, 2), (0, 0, 0, 1), (4, 4, 2, 0), (1, 0, 0, 3)]
    ):
        stream = keys.blocking_stream(partition)
        await bus.redis.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True)
        for n in range(blocking):
            await bus.redis.xadd(stream, {"n": n})
        if delivered:
            await bus.redis.xreadgroup(DISPATCH_GROUP, "reader", {stream: ">"}, count=delivered)
        for n in range(dead):
            await bus.redis.xadd(keys.dead_letter_stream(partition), {"n": n})
        for n in range(logged):
            await bus.redis.xadd(keys.decision_log(partition), {"n": n})
    await bus.redis.xadd(keys.events_stream(3), {"n": 0})  # no group there yet: all of it is lag
    observer = Observer(bus.url, keys, metrics=m)
    try:
        assert await observer.observe()
    finally:
        await observer.stop()
    assert stream_gauge(m, "hookbus_stream_length", "blocking", None) == 8
    assert stream_gauge(m, "hookbus_stream_pending", "blocking") == 5
    assert stream_gauge(m, "hookbus_stream_lag", "blocking") == 3  # 2 + 0 + 0 + 1 not delivered
    events = stream_gauge(m, "hookbus_stream_length", "events", None), stream_gauge(m, "hookbus_stream_lag", "events")
    assert events == (1, 1)
    assert stream_gauge(m, "hookbus_stream_length", "decisions", None) == 6
    assert m.value("hookbus_decision_log_length") == 6
    assert m.value("hookbus_dlq_size") == 3


def test_group_lag_is_redis_7s_counter_when_there_is_one() -> None:
    assert group_lag({"name": b"dispatchers", "pending": 2, "lag": 7}, length=10) == 7
    assert group_lag({"name": b"dispatchers", "pending": 2, "lag": None}, length=10) is None  # Redis 7 cannot tell
    assert group_lag({"name": b"dispatchers", "pending": 2}, length=10) is None  # Redis 6.2
    assert group_lag(None, length=10) == 10  # no group yet: it will read everything


async def test_an_unreachable_redis_is_redis_up_0(silent_port: int, m: Metrics) -> None:
    for port in (free_port(), silent_port):  # refused, and accepted but never answered
        observer = Observer(f"redis://127.0.0.1:{port}/0", Keyspace(), timeout_s=0.2, metrics=m)
        m.observed().redis_up.set(1)  # as a last look that succeeded left it
        try:
            assert not await observer.observe()
        finally:
            await observer.stop()
        assert m.value("hookbus_redis_up") == 0
    assert m.value("hookbus_redis_errors_total", op="observe") == 2


async def test_the_gateway_runs_the_observer(platform: Callable[..., Any]) -> None:
    async with platform() as p:

        async def scraped() -> dict[Any, float] | None:
            samples = exposition_samples((await p.client.get(f"{p.url}/metrics")).content)
            alive = samples.get(("hookbus_dispatchers_alive", frozenset()))
            return samples if alive else None

        samples = await async_wait_for(scraped, timeout_s=10, interval_s=0.1)
    assert samples[("hookbus_redis_up", frozenset())] == 1
    assert samples[("hookbus_stream_lag", frozenset({("stream", "blocking"), ("group", DISPATCH_GROUP)}))] == 0


async def test_with_a_queue_redis_of_its_own_the_async_gauges_are_read_there(
    bus: BusProbe, private_redis: EmbeddedRedis, caplog: pytest.LogCaptureFixture, m: Metrics
) -> None:
    keys = bus.keys
    queue = BusProbe(private_redis.url)
    observer = Observer(bus.url, keys, queue_url=private_redis.url, timeout_s=0.5, metrics=m)
    try:
        await bus.redis.zadd(keys.arq_queue, {"not-the-queue": 1})
        await queue.redis.zadd(keys.arq_queue, {f"job-{n}": n for n in range(3)})
        for n in range(2):
            await queue.redis.xadd(keys.async_dead_letters, {"n": n})
        await bus.redis.xadd(keys.dead_letter_stream(), {"n": 0})
        assert await observer.observe()
        assert m.value("hookbus_redis_up") == 1
        assert (m.value("hookbus_async_queue_depth"), m.value("hookbus_async_dead_letters")) == (3, 2)
        assert m.value("hookbus_dlq_size") == 1  # the bus's own dead letters, still read on the bus
        private_redis.stop()
        await bus.redis.xadd(keys.dead_letter_stream(), {"n": 1})
        assert not await observer.observe()  # the queue's Redis is down: redis_up 0, its gauges as they were
        assert m.value("hookbus_redis_up") == 0
        assert (m.value("hookbus_async_queue_depth"), m.value("hookbus_async_dead_letters")) == (3, 2)
        assert m.value("hookbus_dlq_size") == 2  # the bus was read all the same
        assert "(the async queue's)" in caplog.text
    finally:
        await observer.stop()
        await queue.close()


async def test_the_gateway_reads_the_async_gauges_on_the_queue_redis(
    platform: Callable[..., Any], private_redis: EmbeddedRedis
) -> None:
    queue = BusProbe(private_redis.url)
    try:
        await queue.redis.zadd(queue.keys.arq_queue, {f"job-{n}": n for n in range(4)})
        async with platform(queue_redis_url=private_redis.url) as p:

            async def queued_jobs_seen() -> bool:
                samples = exposition_samples((await p.client.get(f"{p.url}/metrics")).content)
                return samples.get(("hookbus_async_queue_depth", frozenset())) == 4

            await async_wait_for(queued_jobs_seen, timeout_s=10, interval_s=0.1)
    finally:
        await queue.close()
