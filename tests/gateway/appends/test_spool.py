"""The spool when Redis refuses its appends: for now (a full disk: ``MISCONF``) it keeps them for
the next try; for good (a wrong command) it drops them, and counts them.

The full disk is a real one as far as Redis can tell: its snapshot cannot be written (the file's
place is taken by a directory), and a Redis that saves snapshots then refuses every write.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions

from bus.redis.connection import redis_errors
from bus.runtime.metrics import Metrics
from bus.stream.protocol import StreamFields
from gateway.appends.spool import Spool
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import BusProbe, async_wait_for, rm_rf

pytestmark = pytest.mark.timeout(60)

POLICY = """
hookbus: {deadlineSeconds: 0.5}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {type: rule, deny: ["Bash(rm -rf *)"]}
"""


async def _persistence(client: aioredis.Redis) -> dict[str, Any]:
    info: dict[str, Any] = await client.info("persistence")
    return info


async def _refused_appends(client: aioredis.Redis) -> int:
    """The XADDs Redis refused before running them (MISCONF among them)."""
    stats: dict[str, Any] = await client.info("commandstats")
    return int(stats.get("cmdstat_xadd", {}).get("rejected_calls", 0))


async def _snapshot(client: aioredis.Redis, status: str) -> None:
    await client.bgsave()

    async def done() -> bool:
        found = await _persistence(client)
        return bool(found["rdb_bgsave_in_progress"] == 0 and found["rdb_last_bgsave_status"] == status)

    await async_wait_for(done, timeout_s=10)


async def _more_than(client: aioredis.Redis, count: int) -> bool:
    return await _refused_appends(client) > count


@contextlib.asynccontextmanager
async def disk_full(server: EmbeddedRedis) -> AsyncIterator[aioredis.Redis]:
    """``server`` refusing every write with ``MISCONF`` for the block, as with its disk full."""
    client = aioredis.Redis.from_url(server.url)
    taken = server.state_dir / "dump.rdb"
    try:
        await client.config_set("save", "3600 1")  # MISCONF is for a Redis that saves snapshots
        (taken / "in-the-way").mkdir(parents=True)
        await _snapshot(client, "err")
        with pytest.raises(redis.exceptions.ResponseError, match=r"^MISCONF "):
            await client.set("probe", 1)
        yield client
        shutil.rmtree(taken)  # room again
        await _snapshot(client, "ok")
    finally:
        await client.aclose()


async def test_a_full_disk_keeps_the_spooled_events_until_it_has_room(
    platform: Callable[..., Any], private_redis: EmbeddedRedis
) -> None:
    probe = BusProbe(private_redis.url)
    try:
        async with platform(POLICY, on_redis=private_redis.url) as p:
            spool: Spool = p.app.state.gateway.spool
            async with disk_full(private_redis) as redis_client:
                blocking = await p.post(rm_rf("s-full"))
                assert blocking.headers["X-Hookbus-Outcome"] == "fail-open"
                note = await p.post({"hook_event_name": "Notification", "session_id": "s-full", "message": "keep me"})
                assert note.status_code == 200
                assert note.headers["X-Hookbus-Outcome"] == "fail-open"
                assert len(spool) == 2  # the Notification and the blocking event's audit record
                # The spool tries again (both in one batch), Redis refuses again: it keeps both.
                refused = await _refused_appends(redis_client)
                await async_wait_for(lambda: _more_than(redis_client, refused + 1), timeout_s=10)
                assert len(spool) == 2
                assert p.metrics.value("hookbus_spooled_events_total", status="dropped") == 0
            await async_wait_for(lambda: len(spool) == 0, timeout_s=10)
            assert p.metrics.value("hookbus_spooled_events_total", status="flushed") == 2
            spooled = await async_wait_for(lambda: probe.record(note.headers["X-Hookbus-Event-Id"]), timeout_s=10)
            assert (spooled.event, spooled.outcome, spooled.fail_open) == (
                "Notification",
                "fail-open",
                "redis_unavailable",
            )
            audit = await async_wait_for(lambda: probe.record(blocking.headers["X-Hookbus-Event-Id"]), timeout_s=10)
            assert (audit.event, audit.outcome, audit.fail_open) == ("PreToolUse", "fail-open", "redis_unavailable")
    finally:
        await probe.close()


async def test_an_append_refused_for_now_is_kept_and_one_refused_for_good_is_dropped(bus: BusProbe) -> None:
    """The append maps Redis's errors at the boundary, as the gateway's does: a refusal for now is
    kept for the next try, one for good is dropped."""
    stream = bus.keys.events_stream()
    await bus.redis.set("not-a-stream", "x")
    full = True
    tries = 0

    async def append(entries: list[tuple[str, StreamFields]]) -> None:
        nonlocal tries
        tries += 1
        async with bus.redis.pipeline(transaction=False) as pipe:
            for target, fields in entries:
                if full and target == stream:
                    pipe.eval("return redis.error_reply('MISCONF no room on the disk')", 0)
                else:
                    pipe.xadd(target, dict(fields))  # type: ignore[arg-type]
            with redis_errors():
                await pipe.execute()

    m = Metrics()
    spool = Spool(append, retry_every_s=0.05, metrics=m)
    await spool.start()
    try:
        spool.put(stream, {"n": 1})
        await async_wait_for(lambda: tries >= 3, timeout_s=5)  # refused, and tried again
        assert len(spool) == 1
        assert m.value("hookbus_spooled_events_total", status="dropped") == 0
        full = False
        await async_wait_for(lambda: len(spool) == 0, timeout_s=5)
        assert [fields for _, fields in await bus.redis.xrange(stream)] == [{b"n": b"1"}]
        spool.put("not-a-stream", {"n": 2})  # WRONGTYPE: never
        await async_wait_for(lambda: len(spool) == 0, timeout_s=5)
    finally:
        await spool.stop()
    assert m.value("hookbus_spooled_events_total", status="dropped") == 1
    assert m.value("hookbus_spooled_events_total", status="flushed") == 1
