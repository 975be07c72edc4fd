"""The dispatcher's pipelined pending-context pops (:mod:`workers.engine.contextpops`) on a real Redis.

Round trips are counted on the server (``INFO stats`` ``total_reads_processed``: one socket
read per pipeline of small commands), and a round trip is held in flight with ``CLIENT PAUSE
WRITE`` (LPOP is a write) on a private Redis, so "joins the next pipeline" is observed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from bus.errors import BusUnavailable, RedisCommandError
from bus.redis.connection import connect
from hookbus.platform.redis_server import EmbeddedRedis, free_port
from tests.conftest import async_wait_for, redis_reads
from workers.engine.contextpops import ContextPops

NAME = "test-contextpops"


@pytest_asyncio.fixture
async def pops(redis_url: str) -> AsyncIterator[ContextPops]:
    client = connect(redis_url, client_name=NAME)
    yield ContextPops(client, redis_url)
    await client.aclose()


def items(key: str, n: int) -> list[bytes]:
    return [f"{key}:{i}".encode() for i in range(n)]


async def test_concurrent_pops_of_different_keys_get_their_own_items_in_one_round_trip(
    pops: ContextPops, probe: aioredis.Redis
) -> None:
    keys = [f"ctx:s-{n}" for n in range(40)]
    for n, key in enumerate(keys):
        await probe.rpush(key, *items(key, n % 4 + 1))  # type: ignore[misc]
    await pops.redis.ping()  # the pops' connection is open before counting
    before = await redis_reads(probe)
    results = await asyncio.gather(*(pops.pop(key, 3) for key in keys), pops.pop("ctx:empty", 3))
    after = await redis_reads(probe)
    assert list(results[:-1]) == [items(key, n % 4 + 1)[:3] for n, key in enumerate(keys)]  # in order, up to count
    assert results[-1] == []
    assert after - before <= 3, after - before  # one pipeline (and this INFO), not forty-one round trips
    left = [await probe.lrange(key, 0, -1) for key in keys]  # type: ignore[misc]
    assert left == [items(key, 4)[3:] if n % 4 == 3 else [] for n, key in enumerate(keys)]


async def test_concurrent_pops_of_one_key_share_no_item_and_lose_none(pops: ContextPops, probe: aioredis.Redis) -> None:
    everything = items("ctx:s-1", 500)
    await probe.rpush("ctx:s-1", *everything)  # type: ignore[misc]
    taken: list[bytes] = []
    for _ in range(3):  # waves, so later pops meet a round trip in flight as well
        results = await asyncio.gather(*(pops.pop("ctx:s-1", 7) for _ in range(30)))
        assert all(len(r) <= 7 for r in results)
        taken.extend(item for r in results for item in r)
    taken.extend(await probe.lrange("ctx:s-1", 0, -1))  # type: ignore[misc]
    assert len(taken) == len(set(taken)) == 500  # no item popped twice ...
    assert sorted(taken) == sorted(everything)  # ... and none lost


async def test_a_pop_alone_leaves_at_once(pops: ContextPops, probe: aioredis.Redis) -> None:
    await probe.rpush("ctx:s-1", *items("ctx:s-1", 3))  # type: ignore[misc]
    for n in range(3):  # one after the other: each waits for its own round trip only
        assert await pops.pop("ctx:s-1", 1) == [f"ctx:s-1:{n}".encode()]
    assert await pops.pop("ctx:s-1", 1) == []


async def test_pops_during_a_round_trip_join_the_next_one(private_redis: EmbeddedRedis) -> None:
    client = connect(private_redis.url, client_name=NAME)
    probe = connect(private_redis.url)
    pops = ContextPops(client, private_redis.url)
    try:
        for n in range(21):
            await probe.rpush(f"ctx:s-{n}", f"item-{n}")  # type: ignore[misc]
        await client.ping()
        await probe.client_pause(10_000, all=False)  # writes wait; reads (INFO, CLIENT LIST) do not
        try:
            first = asyncio.create_task(pops.pop("ctx:s-0", 10))

            async def first_is_held() -> bool:  # its LPOP reached the server and waits there
                return any(c.get("name") == NAME and "b" in c["flags"] for c in await probe.client_list())

            await async_wait_for(first_is_held, timeout_s=5)
            # Queued ahead of the owner of ctx:s-1's item: had it been sent, it would take that item.
            cancelled = asyncio.create_task(pops.pop("ctx:s-1", 10))
            later = [asyncio.create_task(pops.pop(f"ctx:s-{n}", 10)) for n in range(1, 21)]
            await async_wait_for(lambda: len(pops.pipeline) == 21, timeout_s=5)  # all queued behind the first
            cancelled.cancel()
            before = await redis_reads(probe)
        finally:
            await probe.client_unpause()
        async with asyncio.timeout(5):
            results = await asyncio.gather(first, *later)
        after = await redis_reads(probe)
        assert results == [[f"item-{n}".encode()] for n in range(21)]
        assert cancelled.cancelled()  # and its pop was never sent: ctx:s-1's item went to its owner
        # UNPAUSE, this INFO and one pipeline for the 20 that waited.
        assert after - before <= 4, after - before
    finally:
        await client.aclose()
        await probe.aclose()


@pytest.mark.system
async def test_redis_unreachable_every_caller_gets_bus_unavailable() -> None:
    port = free_port()  # nothing listens there
    client = connect(f"redis://127.0.0.1:{port}")
    pops = ContextPops(client, f"redis://127.0.0.1:{port}")
    try:
        async with asyncio.timeout(10):
            outcomes = await asyncio.gather(*(pops.pop(f"ctx:s-{n}", 10) for n in range(5)), return_exceptions=True)
        assert all(isinstance(o, BusUnavailable) for o in outcomes), outcomes
        assert all(str(o).startswith(f"redis unavailable at redis://127.0.0.1:{port}") for o in outcomes), outcomes
    finally:
        await client.aclose()


async def test_redis_down_then_back_the_pops_recover(private_redis: EmbeddedRedis) -> None:
    client = connect(private_redis.url)
    pops = ContextPops(client, private_redis.url)
    try:
        assert await pops.pop("ctx:s-1", 10) == []
        private_redis.stop()
        async with asyncio.timeout(10):
            outcomes = await asyncio.gather(*(pops.pop(f"ctx:s-{n}", 10) for n in range(5)), return_exceptions=True)
        assert all(isinstance(o, BusUnavailable) for o in outcomes), outcomes
        private_redis.start()
        await async_wait_for(lambda: _pops(pops, "ctx:s-1"), timeout_s=10)  # no restart of the pops needed
        await client.rpush("ctx:s-1", b"back")  # type: ignore[misc]
        assert await pops.pop("ctx:s-1", 10) == [b"back"]
    finally:
        await client.aclose()


async def _pops(pops: ContextPops, key: str) -> bool:
    try:
        await pops.pop(key, 1)
    except BusUnavailable:
        return False
    return True


async def test_a_key_of_the_wrong_type_fails_only_its_own_caller(pops: ContextPops, probe: aioredis.Redis) -> None:
    await probe.rpush("ctx:s-1", b"one")  # type: ignore[misc]
    await probe.rpush("ctx:s-3", b"three")  # type: ignore[misc]
    await probe.set("ctx:s-2", "a string")
    outcomes = await asyncio.gather(
        pops.pop("ctx:s-1", 10), pops.pop("ctx:s-2", 10), pops.pop("ctx:s-3", 10), return_exceptions=True
    )
    assert outcomes[0] == [b"one"] and outcomes[2] == [b"three"]
    assert isinstance(outcomes[1], RedisCommandError) and outcomes[1].code == "WRONGTYPE"
    assert "WRONGTYPE" in str(outcomes[1])
    assert await probe.get("ctx:s-2") == b"a string"
