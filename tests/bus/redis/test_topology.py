"""bus.redis.topology: a single Redis or a Redis Cluster, read once from the bus's URL (as the
settings make it from ``HOOKBUS_REDIS_CLUSTER`` / ``--redis-cluster``), and what each role asks it."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from bus.redis.topology import Topology
from bus.runtime.settings import Settings

pytestmark = pytest.mark.timeout(30)

#: Every question a role asks, and the answer on a single Redis (a cluster answers the opposite).
SINGLE_ANSWERS = {
    "reads_every_stream_at_once": True,
    "settles_across_partitions": True,
    "preloads_scripts": True,
    "sharded_replies": False,
    "batches_appends_across_streams": True,
    "appends_take_context": True,
    "coalesces_context_pops": True,
}


def answers(topology: Topology) -> dict[str, bool]:
    return {name: getattr(topology, name) for name in SINGLE_ANSWERS}


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://h:6380", "unix:///run/redis.sock?db=1", "REDIS://H:1"]
)
def test_a_plain_url_is_a_single_redis(url: str) -> None:
    topology = Topology.from_url(url)
    assert topology == Topology(url, cluster=False)
    assert answers(topology) == SINGLE_ANSWERS
    assert topology.reply_publish_command == "PUBLISH"


@pytest.mark.parametrize("url", ["redis+cluster://127.0.0.1:7000", "rediss+cluster://:pw@h:7000/0"])
def test_a_cluster_url_is_a_cluster(url: str) -> None:
    topology = Topology.from_url(url)
    assert topology.cluster
    assert answers(topology) == {name: not answer for name, answer in SINGLE_ANSWERS.items()}
    assert topology.reply_publish_command == "SPUBLISH"


def test_the_cluster_flag_of_the_settings_makes_the_bus_a_cluster() -> None:
    env = {"HOOKBUS_REDIS_URL": "redis://127.0.0.1:7000"}
    assert not Topology.from_url(Settings.from_env(env).redis_url or "").cluster
    flagged = Settings.from_env({**env, "HOOKBUS_REDIS_CLUSTER": "1"})
    assert Topology.from_url(flagged.redis_url or "") == Topology("redis+cluster://127.0.0.1:7000", cluster=True)
    # --redis-cluster is the same override; a --redis-url flag is marked as well
    by_flag = Settings.from_env({}, redis_url="rediss://h:7000", redis_cluster=True)
    assert Topology.from_url(by_flag.redis_url or "").cluster
    assert not Topology.from_url(Settings.from_env({**env, "HOOKBUS_REDIS_CLUSTER": "0"}).redis_url or "").cluster


def test_the_repr_hides_the_password() -> None:
    text = repr(Topology.from_url("redis+cluster://user:s3cret@h:7000"))
    assert "s3cret" not in text
    assert text == "Topology('redis+cluster://user:***@h:7000', cluster=True)"


async def test_a_single_redis_shares_one_client_among_partitions() -> None:
    topology = Topology.from_url("redis://127.0.0.1:6379")
    shared = topology.connect()  # no connection is opened before a command
    assert type(shared) is aioredis.Redis
    clients = topology.partition_clients(shared, socket_timeout_s=None)
    assert all(clients.get(partition) is shared for partition in range(4))
    await clients.aclose()
    await shared.aclose()


async def test_a_cluster_gives_each_partition_a_client_of_its_own() -> None:
    topology = Topology.from_url("redis+cluster://127.0.0.1:7000")
    shared = topology.connect(socket_timeout_s=None, client_name="hookbus-test")
    assert isinstance(shared, RedisCluster)
    clients = topology.partition_clients(shared, socket_timeout_s=None, client_name="hookbus-test")
    own = [clients.get(partition) for partition in range(3)]
    assert all(isinstance(client, RedisCluster) for client in own)
    assert len({id(client) for client in [shared, *own]}) == 4
    assert clients.get(1) is own[1]  # made once per partition
    await clients.aclose()
    assert clients.get(1) is not own[1]  # closed and forgotten: a new one if asked again
    await clients.aclose()
    await shared.aclose()


@pytest.mark.redis
async def test_a_single_redis_client_answers(redis_url: str) -> None:
    topology = Topology.from_url(redis_url)
    client = topology.connect(client_name="hookbus-topology")
    try:
        assert await client.ping()
        assert await client.client_getname() == "hookbus-topology"  # redis-py decodes this reply
        assert topology.partition_clients(client).get(2) is client
    finally:
        await client.aclose()
