"""The gateway's append batcher (:mod:`gateway.appends.batcher`) on a real Redis.

Round trips are counted on the server (``INFO stats`` ``total_reads_processed``: one socket
read per pipeline of small commands), and a round trip is held in flight with ``CLIENT PAUSE
WRITE`` on a private Redis, so "joins the next pipeline" is observed, not assumed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from bus.errors import BusUnavailable, RedisCommandError
from bus.redis.connection import connect
from bus.stream.pending_context import APPEND_TAKING_CONTEXT
from gateway.appends.batcher import AppendBatcher
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import async_wait_for, redis_reads

STREAM = "hookbus:stream:events"
NAME = "test-batcher"


@pytest_asyncio.fixture
async def batcher(redis_url: str) -> AsyncIterator[AppendBatcher]:
    client = connect(redis_url, client_name=NAME)
    yield AppendBatcher(client, redis_url)
    await client.aclose()


async def numbers(probe: aioredis.Redis, stream: str = STREAM) -> list[int]:
    return [int(fields[b"n"]) for _, fields in await probe.xrange(stream)]


async def test_concurrent_appends_share_one_round_trip(batcher: AppendBatcher, probe: aioredis.Redis) -> None:
    await batcher.redis.ping()  # the batcher's connection is open before counting
    before = await redis_reads(probe)
    results = await asyncio.gather(
        *(batcher.append(STREAM, {"n": n, "who": f"agent-{n}", "raw": b"\xff"}) for n in range(50))
    )
    after = await redis_reads(probe)
    assert results == [None] * 50  # every caller is answered
    assert await numbers(probe) == list(range(50))  # in the order they were appended
    assert after - before <= 3, after - before  # one pipeline (and this INFO), not fifty round trips
    _, fields = (await probe.xrange(STREAM, count=1))[0]
    assert fields == {b"n": b"0", b"who": b"agent-0", b"raw": b"\xff"}


async def test_an_append_alone_leaves_at_once(batcher: AppendBatcher, probe: aioredis.Redis) -> None:
    for n in range(3):  # one after the other: each waits for its own round trip only
        await batcher.append(STREAM, {"n": n})
        assert await numbers(probe) == list(range(n + 1))


async def test_appends_during_a_round_trip_join_the_next_one(private_redis: EmbeddedRedis) -> None:
    client = connect(private_redis.url, client_name=NAME)
    probe = connect(private_redis.url)
    batcher = AppendBatcher(client, private_redis.url)
    try:
        await client.ping()
        await probe.client_pause(10_000, all=False)  # writes wait; reads (INFO, CLIENT LIST) do not
        try:
            first = asyncio.create_task(batcher.append(STREAM, {"n": 0}))

            async def first_is_held() -> bool:  # its XADD reached the server and waits there
                return any(c.get("name") == NAME and "b" in c["flags"] for c in await probe.client_list())

            await async_wait_for(first_is_held, timeout_s=5)
            later = [asyncio.create_task(batcher.append(STREAM, {"n": n})) for n in range(1, 21)]
            before = await redis_reads(probe)  # a round trip: the 20 tasks have queued their entries by now
            assert await probe.xlen(STREAM) == 0
        finally:
            await probe.client_unpause()
        async with asyncio.timeout(5):
            await asyncio.gather(first, *later)
        after = await redis_reads(probe)
        assert await numbers(probe) == list(range(21))
        # UNPAUSE, this INFO and one pipeline for the 20 that waited.
        assert after - before <= 4, after - before
    finally:
        await client.aclose()
        await probe.aclose()


async def test_redis_down_every_caller_gets_bus_unavailable_then_it_recovers(private_redis: EmbeddedRedis) -> None:
    client = connect(private_redis.url)
    batcher = AppendBatcher(client, private_redis.url)
    try:
        await batcher.append(STREAM, {"n": 0})
        private_redis.stop()
        async with asyncio.timeout(10):
            outcomes = await asyncio.gather(
                *(batcher.append(STREAM, {"n": n}) for n in range(1, 6)), return_exceptions=True
            )
        assert all(isinstance(o, BusUnavailable) for o in outcomes), outcomes
        where = f"redis unavailable at redis://127.0.0.1:{private_redis.port}"
        assert all(str(o).startswith(where) for o in outcomes), outcomes
        private_redis.start()
        await async_wait_for(lambda: _appended(batcher, 6), timeout_s=10)  # no restart of the batcher needed
        assert await numbers(client) == [6]  # (the private Redis keeps no data across a restart)
    finally:
        await client.aclose()


async def _appended(batcher: AppendBatcher, n: int) -> bool:
    try:
        await batcher.append(STREAM, {"n": n})
    except BusUnavailable:
        return False
    return True


async def test_streams_are_capped_near_maxlen(redis_url: str, probe: aioredis.Redis) -> None:
    client = connect(redis_url)
    batcher = AppendBatcher(client, redis_url, maxlen=10)
    try:
        for start in range(0, 1000, 100):
            await asyncio.gather(*(batcher.append(STREAM, {"n": n}) for n in range(start, start + 100)))
    finally:
        await client.aclose()
    # Approximate trimming drops whole nodes of 100 entries: about maxlen, never unbounded.
    assert 10 <= await probe.xlen(STREAM) <= 200
    assert (await numbers(probe))[-1] == 999


async def test_one_bad_append_does_not_fail_the_others_of_its_batch(
    batcher: AppendBatcher, probe: aioredis.Redis
) -> None:
    await probe.set("not-a-stream", "x")
    outcomes = await asyncio.gather(
        batcher.append(STREAM, {"n": 1}),
        batcher.append("not-a-stream", {"n": 2}),
        batcher.append(STREAM, {"n": 3}),
        return_exceptions=True,
    )
    assert await numbers(probe) == [1, 3]  # both were appended ...
    assert outcomes[0] is None and outcomes[2] is None  # ... so their callers must not be told otherwise
    assert isinstance(outcomes[1], Exception)


async def test_an_append_for_a_reply_fails_the_wait_for_that_reply_and_only_when_it_fails(
    batcher: AppendBatcher, probe: aioredis.Redis
) -> None:
    await probe.set("not-a-stream", "x")
    loop = asyncio.get_running_loop()
    replies: list[asyncio.Future[str]] = [loop.create_future() for _ in range(3)]
    answered = loop.create_future()
    answered.set_result("answered already")
    for n, (stream, reply) in enumerate(
        [(STREAM, replies[0]), ("not-a-stream", replies[1]), (STREAM, replies[2]), ("not-a-stream", answered)]
    ):
        batcher.append_failing_into(reply, stream, {"n": n})
    async with asyncio.timeout(5):  # refused: its wait ends with the error (the round trip's results are out)
        with pytest.raises(RedisCommandError):
            await replies[1]
    assert not replies[0].done() and not replies[2].done()  # appended: still waiting for their replies
    assert await numbers(probe) == [0, 2]
    assert answered.result() == "answered already"  # a wait already over is left as it is


async def test_redis_down_an_append_for_a_reply_fails_its_wait_with_bus_unavailable(
    private_redis: EmbeddedRedis,
) -> None:
    client = connect(private_redis.url)
    batcher = AppendBatcher(client, private_redis.url)
    try:
        await batcher.append(STREAM, {"n": 0})
        private_redis.stop()
        reply: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        batcher.append_failing_into(reply, STREAM, {"n": 1})
        async with asyncio.timeout(10):
            with pytest.raises(BusUnavailable):
                await reply
    finally:
        await client.aclose()


async def test_an_append_takes_its_sessions_pending_context_into_the_entry(
    batcher: AppendBatcher, probe: aioredis.Redis
) -> None:
    context = "hookbus:context:default:s-1"
    left = [b'{"additionalContext":"tests failed"}', b'{"systemMessage":"lint failed"}']
    await probe.rpush(context, *left)  # type: ignore[misc]
    await probe.script_load(APPEND_TAKING_CONTEXT)  # as the gateway does when it starts
    await asyncio.gather(
        batcher.append(STREAM, {"n": 0}, context),
        batcher.append(STREAM, {"n": 1}),  # the same pipeline: a plain XADD
        batcher.append(STREAM, {"n": 2}, context),
    )  # after the first: nothing left
    entries = [fields for _, fields in await probe.xrange(STREAM)]
    assert entries == [{b"c": b"[" + b",".join(left) + b"]", b"n": b"0"}, {b"n": b"1"}, {b"c": b"[]", b"n": b"2"}]
    assert orjson.loads(entries[0][b"c"]) == [orjson.loads(item) for item in left]
    assert await probe.exists(context) == 0


async def test_an_append_taking_context_survives_a_flushed_script_cache(
    batcher: AppendBatcher, probe: aioredis.Redis
) -> None:
    context = "hookbus:context:default:s-2"
    await batcher.append(STREAM, {"n": 0}, context)  # the script is cached now
    await probe.script_flush()  # as after a Redis restart
    await probe.rpush(context, b'{"additionalContext":"kept"}')  # type: ignore[misc]
    await asyncio.gather(batcher.append(STREAM, {"n": 1}, context), batcher.append(STREAM, {"n": 2}))
    entries = [fields for _, fields in await probe.xrange(STREAM)]
    # Each once; the one refused with NOSCRIPT is sent again after the rest of its pipeline.
    assert entries[1:] == [{b"n": b"2"}, {b"c": b'[{"additionalContext":"kept"}]', b"n": b"1"}]
    assert await probe.exists(context) == 0
