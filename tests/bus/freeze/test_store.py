"""Freezes in Redis and every node's cached copy of them."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest_asyncio

from bus.freeze.cache import FreezeCache
from bus.freeze.freezes import Freeze, now_ms
from bus.freeze.store import active_freezes, freeze, unfreeze
from bus.runtime.metrics import Metrics
from tests.conftest import BusProbe, async_wait_for


@pytest_asyncio.fixture
async def tenants(bus: BusProbe) -> AsyncIterator[tuple[str, str]]:
    """Two tenants of this test's own; their freezes are lifted after it."""
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    yield a, b
    await bus.redis.hdel(bus.keys.freezes, a, b)  # type: ignore[misc]


async def test_freeze_list_and_unfreeze(bus: BusProbe, tenants: tuple[str, str]) -> None:
    a, b = tenants
    set_ = await freeze(bus.redis, bus.keys, a, ["Bash"], None, "incident", "alice (org admin)")
    mine = [f for f in await active_freezes(bus.redis, bus.keys) if f.tenant in tenants]
    assert mine == [set_]
    assert await unfreeze(bus.redis, bus.keys, b) is None  # b was never frozen
    assert await unfreeze(bus.redis, bus.keys, a) == set_
    assert all(f.tenant not in tenants for f in await active_freezes(bus.redis, bus.keys))


async def test_an_expired_freeze_is_not_listed_and_is_deleted(bus: BusProbe, tenants: tuple[str, str]) -> None:
    a, _ = tenants
    expired = Freeze(a, ("Bash",), "alice", "", now_ms() - 2000, now_ms() - 1000)
    await bus.redis.hset(bus.keys.freezes, a, expired.encode().decode())  # type: ignore[misc]
    assert all(f.tenant != a for f in await active_freezes(bus.redis, bus.keys))
    assert await bus.redis.hget(bus.keys.freezes, a) is None  # type: ignore[misc]
    assert await unfreeze(bus.redis, bus.keys, a) is None


async def test_every_cache_sees_a_freeze_and_its_lifting_within_a_poll(bus: BusProbe, tenants: tuple[str, str]) -> None:
    a, b = tenants
    metrics = Metrics()
    cache = FreezeCache(bus.redis, bus.keys, metrics=metrics)
    await cache.start()
    try:
        assert cache.frozen(a, "PreToolUse", "Bash") is None
        await freeze(bus.redis, bus.keys, a, None, None, "incident", "alice")
        found = await async_wait_for(lambda: cache.frozen(a, "PreToolUse", "Bash"), timeout_s=5)
        assert found.tenant == a and found.reason == "incident"
        # Tenant isolation: b's calls, and a's reading tools, are not touched.
        assert cache.frozen(b, "PreToolUse", "Bash") is None
        assert cache.frozen(a, "PreToolUse", "Read") is None
        assert metrics.freezes_active._value.get() >= 1
        await unfreeze(bus.redis, bus.keys, a)
        await async_wait_for(lambda: cache.frozen(a, "PreToolUse", "Bash") is None, timeout_s=5)
    finally:
        await cache.stop()


async def test_until_lifts_a_cached_freeze_without_a_read(bus: BusProbe) -> None:
    cache = FreezeCache(None, bus.keys, metrics=Metrics())
    cache.put(Freeze("acme", ("Bash",), "alice", "", now_ms(), now_ms() + 300))
    assert cache.frozen("acme", "PreToolUse", "Bash") is not None
    await async_wait_for(lambda: cache.frozen("acme", "PreToolUse", "Bash") is None, timeout_s=5)
    assert cache.active() == []


async def test_a_read_that_started_before_a_local_freeze_does_not_undo_it(
    bus: BusProbe, tenants: tuple[str, str]
) -> None:
    a, _ = tenants
    cache = FreezeCache(bus.redis, bus.keys, metrics=Metrics())
    reading = asyncio.create_task(cache.refresh())
    await asyncio.sleep(0)  # the read is on its way, and Redis holds no freeze of a
    set_ = Freeze.new(a, reason="set here while the read was out", by="alice")
    cache.put(set_)
    await reading
    assert cache.frozen(a, "PreToolUse", "Bash") == set_
    await bus.redis.hset(bus.keys.freezes, a, set_.encode().decode())  # type: ignore[misc]
    await cache.refresh()  # the next read sees it in Redis
    assert cache.frozen(a, "PreToolUse", "Bash") == set_
