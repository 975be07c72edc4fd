"""The freeze on a real Redis Cluster: set, listed, obeyed by a gateway and lifted, as on one Redis."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from bus.freeze.store import active_freezes, freeze, unfreeze
from bus.redis.connection import connect
from bus.redis.keys import Keyspace
from bus.redis.urls import cluster_url
from tests.conftest import async_wait_for, pre_tool_use
from tests.redis_cluster import LocalCluster
from tests.workers.sessions.test_fleet_counters import POLICY


@pytest.mark.timeout(60)
async def test_a_freeze_on_a_cluster_is_obeyed_and_lifted(
    platform: Callable[..., Any], redis_cluster: LocalCluster, redis_cluster_url: str, redis_url: str
) -> None:
    url = cluster_url(redis_cluster_url)
    redis = connect(url)
    keys = Keyspace()
    try:
        async with platform("hooks: {}\n", on_redis=url, queue_redis_url=redis_url) as p:

            async def denied() -> bool:
                answer: dict[str, Any] = (await p.post(pre_tool_use("ls"))).json()
                return bool(answer.get("hookSpecificOutput", {}).get("permissionDecision") == "deny")

            assert not await denied()
            await freeze(redis, keys, "default", None, None, "cluster drill", "test")
            await async_wait_for(denied, timeout_s=5)
            assert [f.tenant for f in await active_freezes(redis, keys)] == ["default"]
            lifted = await unfreeze(redis, keys, "default")
            assert lifted is not None and lifted.reason == "cluster drill"
            await async_wait_for(lambda: _not(denied), timeout_s=5)
            assert await active_freezes(redis, keys) == []
    finally:
        await redis.aclose()


async def _not(check: Callable[[], Awaitable[bool]]) -> bool:
    return not await check()


@pytest.mark.timeout(60)
async def test_a_tenant_counter_freezes_its_tenant_on_a_cluster(
    platform: Callable[..., Any], redis_cluster: LocalCluster, redis_cluster_url: str, redis_url: str
) -> None:
    url = cluster_url(redis_cluster_url)
    redis, keys = connect(url), Keyspace()
    policy = POLICY.replace("  deadlineSeconds: 5\n", "  deadlineSeconds: 5\n  streams: {partitions: 4}\n")
    try:
        async with platform(policy, on_redis=url, queue_redis_url=redis_url) as p:
            sessions = [f"cluster-rm-{n}" for n in range(4)]  # above 3 freezes
            assert len({keys.with_partitions(4).partition_of(s) for s in sessions}) > 1  # two slots at least
            for session in sessions:  # the counter is in the tenant's own slot
                await p.post(pre_tool_use("rm -rf /tmp/x", session))

            async def frozen() -> bool:
                return [f.by for f in await active_freezes(redis, keys)] == ["policy"]

            await async_wait_for(frozen, timeout_s=10)
    finally:
        await unfreeze(redis, keys, "default")
        await redis.aclose()
