"""The settle script queues an event's async jobs: with its record, once, as arq would, within maxQueued.

Driven through the dispatcher's :class:`workers.dispatcher.outbox.Outbox` (the real writer) on a real Redis;
the jobs are read back with arq's own :class:`arq.jobs.Job`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest_asyncio
from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import Job

from bus.redis.connection import connect
from bus.redis.keys import DISPATCH_GROUP, Keyspace
from bus.runtime.metrics import Metrics
from bus.stream.protocol import LogRecord, Request, now_ms
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import BusProbe, async_wait_for
from workers.dispatcher.outbox import Outbox, Settle
from workers.jobs.enqueue import JOB_FUNCTION, PreparedJob, arq_pool, prepare_job, put_job


class Rig:
    """An outbox settling entries of a work stream of its own, under a keyspace of its own,
    counting in metrics of its own."""

    def __init__(self, bus: BusProbe) -> None:
        self.bus = bus
        self.keys = Keyspace(f"t{uuid.uuid4().hex[:8]}:")
        self.metrics = Metrics()
        self.outbox = Outbox(bus.redis, self.keys, metrics=self.metrics)
        self.stream = f"{self.keys.prefix}work"

    async def entry(self) -> tuple[Request, bytes]:
        """A non-blocking event read from the work stream (pending until settled)."""
        request = Request(
            uuid.uuid4().hex,
            "Notification",
            "default",
            json.dumps({"session_id": "s", "message": "built"}).encode(),
            now_ms(),
        )
        if not await self.bus.redis.exists(self.stream):
            await self.bus.redis.xgroup_create(self.stream, DISPATCH_GROUP, id="0", mkstream=True)
        await self.bus.redis.xadd(self.stream, request.encode())  # type: ignore[arg-type]
        read = await self.bus.redis.xreadgroup(DISPATCH_GROUP, "c", {self.stream: ">"}, count=1)
        return request, read[0][1][0][0]

    def op(self, request: Request, entry_id: bytes, jobs: list[PreparedJob]) -> Settle:
        record = LogRecord(
            event_id=request.event_id,
            event=request.event,
            tenant="default",
            session_id="s",
            outcome="recorded",
            decision="none",
            output={},
            payload=request.payload,
            received_ms=request.received_ms,
            decided_ms=now_ms(),
        )
        return Settle(self.stream, entry_id, request, record, None, 1000, jobs)

    async def settle(self, request: Request, entry_id: bytes, jobs: list[PreparedJob]) -> None:
        self.outbox.settle(self.op(request, entry_id, jobs))
        await self.outbox.flushed()

    async def queued(self) -> list[str]:
        return [m.decode() for m in await self.bus.redis.zrange(self.keys.arq_queue, 0, -1)]

    async def pending(self) -> int:
        return int((await self.bus.redis.xpending(self.stream, DISPATCH_GROUP))["pending"])

    def counted(self, status: str) -> float:
        """Async jobs the outbox counted with ``status`` (``hookbus_async_jobs_total``)."""
        return self.metrics.value("hookbus_async_jobs_total", status=status)


@pytest_asyncio.fixture
async def rig(bus: BusProbe) -> AsyncIterator[Rig]:
    r = Rig(bus)
    await r.outbox.start()
    yield r
    await r.outbox.stop()


def jobs_of(request: Request, *handlers: str, max_queued: int = 100) -> list[PreparedJob]:
    return [prepare_job(request, handler, 3600, max_queued) for handler in handlers]


async def test_the_first_settle_queues_the_jobs_as_arq_would_and_a_second_settle_queues_nothing(rig: Rig) -> None:
    request, entry_id = await rig.entry()
    jobs = jobs_of(request, "h1", "h2")
    await rig.settle(request, entry_id, jobs)
    await rig.settle(request, entry_id, jobs)  # a re-delivered entry: settled again
    assert sorted(await rig.queued()) == sorted([f"{request.event_id}:h1", f"{request.event_id}:h2"])
    assert rig.counted("queued") == 2
    assert await rig.pending() == 0
    # arq reads the job as one it had queued itself: function, arguments, enqueue time, score.
    info = await Job(
        f"{request.event_id}:h1", rig.bus.redis, _queue_name=rig.keys.arq_queue, _deserializer=orjson.loads
    ).info()
    assert info is not None and info.function == JOB_FUNCTION and info.job_try is None
    job, handler = info.args
    assert handler == "h1"
    assert Request.from_job(job) == Request(
        request.event_id, request.event, request.tenant, request.payload, request.received_ms
    )  # no reply channel, no deadline
    # A float timestamp in ms is rounded: .379 s times 1000 can come out as 378.99. arq's enqueue
    # time is rounded to the ms and Redis's score truncated, so in the same ms it can lead by one.
    assert info.score is not None and info.score >= round(info.enqueue_time.timestamp() * 1000) - 1
    ttl_ms = await rig.bus.redis.pttl(job_key_prefix + f"{request.event_id}:h1")
    assert 86_400_000 - 60_000 < ttl_ms <= 86_400_000  # maxAgeSeconds 3600 + 3600: arq's day at least
    # ... and it is the record put_job (arq's own enqueue) writes, but for the enqueue time.
    arq = arq_pool(rig.bus.url)
    try:
        assert await put_job(arq, rig.keys, request, "h1", "via-arq", 3600)
        ours, arqs = [
            orjson.loads(await rig.bus.redis.get(job_key_prefix + name))
            for name in (f"{request.event_id}:h1", "via-arq")
        ]
        assert {**ours, "et": 0} == {**arqs, "et": 0}
    finally:
        await arq.aclose()


async def test_a_job_queued_already_or_with_a_kept_result_is_skipped_not_dropped(rig: Rig) -> None:
    request, entry_id = await rig.entry()
    await rig.bus.redis.set(result_key_prefix + f"{request.event_id}:h1", b"{}")  # keepResultSeconds > 0
    await rig.settle(request, entry_id, jobs_of(request, "h1", "h2"))
    assert await rig.queued() == [f"{request.event_id}:h2"]
    other, other_id = await rig.entry()
    await rig.settle(other, other_id, [*jobs_of(request, "h2"), *jobs_of(other, "h1")])  # h2 is queued already
    assert sorted(await rig.queued()) == sorted([f"{request.event_id}:h2", f"{other.event_id}:h1"])
    assert (rig.counted("queued"), rig.counted("dropped")) == (2, 0)


async def test_past_max_queued_the_script_drops_the_jobs_and_they_are_counted(rig: Rig) -> None:
    await rig.bus.redis.zadd(rig.keys.arq_queue, {"older-1": 1, "older-2": 2})
    request, entry_id = await rig.entry()
    await rig.settle(request, entry_id, jobs_of(request, "h1", "h2", "h3", max_queued=3))
    assert await rig.bus.redis.zcard(rig.keys.arq_queue) == 3
    assert not await rig.bus.redis.exists(*(job_key_prefix + f"{request.event_id}:{h}" for h in ("h2", "h3")))
    assert (rig.counted("queued"), rig.counted("dropped")) == (1, 2)
    assert await rig.pending() == 0  # a dropped job does not hold the event back


async def test_concurrent_settles_cannot_slip_past_max_queued(rig: Rig) -> None:
    entries = [await rig.entry() for _ in range(20)]
    for request, entry_id in entries:  # one pipeline of twenty settles
        rig.outbox.settle(rig.op(request, entry_id, jobs_of(request, "h1", max_queued=5)))
    await asyncio.wait_for(rig.outbox.flushed(), 10)
    assert await rig.bus.redis.zcard(rig.keys.arq_queue) == 5
    assert (rig.counted("queued"), rig.counted("dropped")) == (5, 15)


async def test_a_settle_without_jobs_touches_no_queue(rig: Rig) -> None:
    request, entry_id = await rig.entry()
    await rig.settle(request, entry_id, [])
    assert await rig.pending() == 0
    assert not await rig.bus.redis.exists(rig.keys.arq_queue)


async def test_at_maxmemory_no_job_is_queued_before_its_record_is(private_redis: EmbeddedRedis) -> None:
    probe = BusProbe(private_redis.url)
    r = Rig(probe)
    await r.outbox.start()
    admin = connect(private_redis.url)
    try:
        request, entry_id = await r.entry()
        await admin.config_set("maxmemory", 1)  # every write is refused from now on
        r.outbox.settle(r.op(request, entry_id, jobs_of(request, "h1")))
        await async_wait_for(lambda: r.outbox._backoff.failures >= 2, timeout_s=5)
        assert not await probe.redis.exists(r.keys.arq_queue, job_key_prefix + f"{request.event_id}:h1")
        assert await r.pending() == 1
        await admin.config_set("maxmemory", 0)
        await async_wait_for(r.queued, timeout_s=10)
        assert await r.queued() == [f"{request.event_id}:h1"]
        assert await r.pending() == 0
    finally:
        await r.outbox.stop()
        await admin.aclose()
        await probe.close()


async def test_one_call_settles_events_with_and_without_jobs_each_with_its_own(rig: Rig) -> None:
    entries = [await rig.entry() for _ in range(4)]
    handlers = [(), ("h1", "h2"), (), ("h3",)]
    for (request, entry_id), names in zip(entries, handlers, strict=True):  # queued together: one call
        rig.outbox.settle(rig.op(request, entry_id, jobs_of(request, *names)))
    await asyncio.wait_for(rig.outbox.flushed(), 5)
    expected = [
        f"{request.event_id}:{name}" for (request, _), names in zip(entries, handlers, strict=True) for name in names
    ]
    assert sorted(await rig.queued()) == sorted(expected)
    assert rig.counted("queued") == 3
    logged = [LogRecord.decode(fields) for _, fields in await rig.bus.redis.xrange(rig.keys.decision_log())]
    assert [r.event_id for r in logged] == [request.event_id for request, _ in entries]
    assert all(
        r.outcome == "recorded" and r.payload == request.payload
        for r, (request, _) in zip(logged, entries, strict=True)
    )
    for request, _ in entries:  # every event's own outcome key
        assert await rig.bus.redis.get(rig.keys.outcome(request.event_id)) == b"R"
    assert await rig.pending() == 0
