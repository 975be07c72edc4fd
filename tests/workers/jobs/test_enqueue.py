"""Jobs queued on a queue Redis of its own (:class:`workers.jobs.enqueue.JobQueue`): one round trip, arq's
rules and ``maxQueued`` as in the settle script, and a Redis that is down waited for as long
as the event allows.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from arq.connections import ArqRedis

from bus.redis.connection import TCP_KEEPALIVE_OPTIONS, connect
from bus.redis.keys import Keyspace
from bus.runtime.metrics import Metrics
from bus.stream.protocol import Request, now_ms
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import async_wait_for, redis_reads
from workers.jobs.enqueue import JobQueue, PreparedJob, arq_pool, prepare_job

KEYS = Keyspace()


@pytest.fixture
def m() -> Metrics:
    """The metrics the queue under test counts into (a registry of this test's own)."""
    return Metrics()


@pytest_asyncio.fixture
async def arq(private_redis: EmbeddedRedis) -> AsyncIterator[ArqRedis]:
    pool = arq_pool(private_redis.url)
    yield pool
    await pool.aclose()


def event(*, deadline_in_ms: int = 0) -> Request:
    return Request(
        uuid.uuid4().hex,
        "Notification",
        "default",
        json.dumps({"session_id": "s"}).encode(),
        now_ms(),
        deadline_ms=now_ms() + deadline_in_ms if deadline_in_ms else 0,
        reply_to="gw" if deadline_in_ms else "",
    )


def jobs_of(request: Request, *handlers: str, max_queued: int = 100) -> list[PreparedJob]:
    return [prepare_job(request, handler, 3600, max_queued) for handler in handlers]


async def queued(arq: ArqRedis) -> list[str]:
    return sorted(m.decode() for m in await arq.zrange(KEYS.arq_queue, 0, -1))


async def test_an_events_jobs_are_queued_in_one_round_trip_and_once(
    arq: ArqRedis, private_redis: EmbeddedRedis, m: Metrics
) -> None:
    jobs = JobQueue(arq, KEYS, private_redis.url, metrics=m)
    request = event()
    await jobs.put(request, jobs_of(request, "h1", "h2"))
    probe = connect(private_redis.url)
    try:
        reads = await redis_reads(probe)
        await jobs.put(request, jobs_of(request, "h1", "h2"))  # the event again (a re-delivery)
        assert await redis_reads(probe) - reads == 2  # the script's round trip, and this count's own
    finally:
        await probe.aclose()
    assert await queued(arq) == sorted([f"{request.event_id}:h1", f"{request.event_id}:h2"])
    assert m.value("hookbus_async_jobs_total", status="queued") == 2


async def test_past_max_queued_jobs_are_dropped_and_counted(arq: ArqRedis, m: Metrics) -> None:
    jobs = JobQueue(arq, KEYS, metrics=m)
    for _ in range(4):
        request = event()
        await jobs.put(request, jobs_of(request, "h1", max_queued=3))
    assert await arq.zcard(KEYS.arq_queue) == 3
    assert m.value("hookbus_async_jobs_total", status="dropped") == 1
    assert m.value("hookbus_async_jobs_total", status="queued") == 3


async def test_a_blocking_event_gives_up_by_its_deadline_and_a_non_blocking_one_waits_for_redis(
    arq: ArqRedis, private_redis: EmbeddedRedis, caplog: pytest.LogCaptureFixture, m: Metrics
) -> None:
    jobs = JobQueue(arq, KEYS, private_redis.url, metrics=m)
    private_redis.stop()
    blocking = event(deadline_in_ms=300)
    await asyncio.wait_for(jobs.put(blocking, jobs_of(blocking, "h1")), 5)  # its decision must not be late
    assert m.value("hookbus_async_jobs_total", status="failed") == 1
    later = event()
    caplog.set_level(logging.INFO, logger="hookbus.queue")
    waiting = asyncio.create_task(jobs.put(later, jobs_of(later, "h1")))
    await async_wait_for(lambda: f"queueing the async hooks of {later.event_id}" in caplog.text, timeout_s=5)
    assert not waiting.done()  # Redis is down: it waits (with backoff)
    private_redis.start()
    await asyncio.wait_for(waiting, 30)
    assert await queued(arq) == [f"{later.event_id}:h1"]
    assert m.value("hookbus_async_jobs_total", status="failed") == 1


async def test_arq_connections_over_tcp_are_watched_by_keepalive_not_a_timer_per_command(
    arq: ArqRedis, tmp_path: Path
) -> None:
    assert await arq.ping()
    [connection] = arq.connection_pool._available_connections
    assert connection.socket_timeout is None  # no task and timers around every command
    assert connection._writer is not None
    sock = connection._writer.transport.get_extra_info("socket")
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == TCP_KEEPALIVE_OPTIONS[socket.TCP_KEEPIDLE]
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 10_000
    with EmbeddedRedis(tmp_path / "unix-redis", persistent=False) as unix_redis:
        assert unix_redis.url.startswith("unix:")  # a unix socket has no keepalive to set, and still connects
        local = arq_pool(unix_redis.url)
        try:
            assert await local.ping()
        finally:
            await local.aclose()
