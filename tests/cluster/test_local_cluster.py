"""The cluster harness itself, checked with plain redis-py: topology, key spread, failover."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from tests.conftest import async_wait_for
from tests.redis_cluster import LocalCluster


async def test_three_masters_each_with_one_replica(redis_cluster: LocalCluster, redis_cluster_url: str) -> None:
    nodes = redis_cluster.nodes
    masters = redis_cluster.masters()

    assert len(nodes) == 6
    assert {node.host for node in nodes} == {"127.0.0.1"}
    assert len(masters) == 3
    for master in masters:
        assert [replica.role for replica in redis_cluster.replicas_of(master)] == ["replica"]
    assert redis_cluster_url.startswith("redis://127.0.0.1:")
    assert {redis_cluster.slot_owner(slot) for slot in (0, 8191, 16383)} == {master.port for master in masters}


async def test_keys_spread_over_every_master_and_hash_tags_keep_keys_together(
    redis_cluster: LocalCluster, redis_cluster_url: str
) -> None:
    client = RedisCluster.from_url(redis_cluster_url)
    try:
        for i in range(300):
            await client.set(f"spread:{i}", i)
        for i in range(50):
            await client.set(f"{{tagged}}:{i}", i)
        keyslot = int(await client.execute_command("CLUSTER KEYSLOT", "spread:7"))
    finally:
        await client.aclose()

    spread = redis_cluster.keys_per_master("spread:*")
    assert len(spread) == 3
    assert all(count > 0 for count in spread.values()), spread
    assert sum(spread.values()) == 300
    tagged_home = redis_cluster.master_for_key("{tagged}:0").port
    assert redis_cluster.keys_per_master("{tagged}:*") == {port: 50 if port == tagged_home else 0 for port in spread}
    home = redis_cluster.master_for_key("spread:7").port
    assert redis_cluster.slot_owner(keyslot) == home
    assert redis_cluster.keys_per_master("spread:7")[home] == 1


@pytest.mark.timeout(120)
async def test_a_killed_master_is_replaced_by_its_replica_and_clients_keep_working(
    redis_cluster: LocalCluster, redis_cluster_url: str
) -> None:
    key = "failover:key"
    victim = redis_cluster.master_for_key(key)
    replicas = {replica.port for replica in redis_cluster.replicas_of(victim)}
    # Written on the master and acknowledged by its replica, so it must survive the failover.
    direct = aioredis.Redis.from_url(victim.url)
    async with direct.pipeline(transaction=False) as pipe:
        acked = (await pipe.set(key, "before").execute_command("WAIT", 1, 5000).execute())[1]
    await direct.aclose()
    assert acked == 1
    client = RedisCluster.from_url(redis_cluster_url)
    try:
        assert await client.get(key) == b"before"

        promoted = redis_cluster.kill_master(victim.port)

        assert promoted in replicas
        assert redis_cluster.master_for_key(key).port == promoted
        assert len(redis_cluster.masters()) == 3
        survivor = aioredis.Redis(host="127.0.0.1", port=promoted)
        assert await survivor.get(key) == b"before"
        await survivor.aclose()

        async def write_succeeds() -> bool:
            try:
                return bool(await client.set(key, "after"))
            except redis.RedisError:  # the client finds the new master after its own retries
                return False

        await async_wait_for(write_succeeds, 20.0, 0.05)
        assert await client.get(key) == b"after"
    finally:
        await client.aclose()
        redis_cluster.restart(victim.port)

    assert victim.port in {node.port for node in redis_cluster.replicas_of(promoted)}
