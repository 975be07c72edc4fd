"""The reply reader of a gateway on a Redis Cluster: sharded Pub/Sub, one channel per partition.

On a single Redis one classic channel carries every reply (:mod:`gateway.replies.reader`). On a
cluster a classic ``PUBLISH`` is copied to every node over the cluster bus: a message per
node for each decision, and a hop that adds milliseconds. So there a dispatcher's settle
script answers with ``SPUBLISH`` on the partition's own channel (``{p}{tN}:reply:{gateway}``,
in the partition's slot), which stays within that partition's shard, and this reader holds
one ``SSUBSCRIBE`` per partition on the master that serves it. When that master fails (the
connection drops) or its slot moves (Redis ends the subscription), the reader finds the
slot's new owner and subscribes again, with backoff; a partition's requests meanwhile fail
open on their own deadline, the other partitions' are not held up.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Any, cast

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection

from bus.errors import BusUnavailable, RedisCommandError
from bus.redis.connection import redis_errors
from bus.redis.keys import Keyspace
from bus.redis.topology import Topology
from bus.runtime.metrics import Metrics
from bus.runtime.retry import BackgroundTask, Backoff
from gateway.replies.reader import PendingReplies

logger = logging.getLogger("hookbus.gateway")

#: Seconds of silence on a subscription before the reader pings (and 3x that before it gives up on it).
PING_EVERY_S = 5.0


class ShardedReplyWaiter(PendingReplies):
    """Resolves waiting requests from the replies published on each partition's shard channel."""

    def __init__(self, topology: Topology, keys: Keyspace, gateway_id: str, metrics: Metrics | None = None) -> None:
        """``topology``: a Redis Cluster's (:attr:`Topology.sharded_replies`)."""
        if not topology.cluster:
            raise ValueError("sharded replies need a Redis Cluster")
        super().__init__(metrics)
        self.redis_url = topology.url
        self.channels = [keys.shard_reply_channel(gateway_id, p) for p in keys.all_partitions]
        self._live: set[int] = set()
        # Only to find each channel's master: the subscriptions are connections of their own.
        self._cluster = cast(RedisCluster, topology.connect())
        self._tasks = [
            BackgroundTask(functools.partial(self._run, p), f"hookbus-shard-reply-{p}") for p in keys.all_partitions
        ]

    def channel_for(self, partition: int) -> str:
        return self.channels[partition]

    async def start(self) -> None:
        for task in self._tasks:
            task.start()

    async def stop(self) -> None:
        for task in self._tasks:
            await task.stop()
        await self._cluster.aclose()

    def _set_live(self, partition: int, live: bool) -> None:
        if live:
            self._live.add(partition)
        else:
            self._live.discard(partition)
        if len(self._live) == len(self.channels):
            self.subscribed.set()
        else:
            self.subscribed.clear()

    async def _owner(self, channel: str) -> tuple[str, int]:
        """The master that serves ``channel``'s slot now (the topology read again after a failure)."""
        await self._cluster.initialize()
        node = self._cluster.get_node_from_key(channel)
        if node is None:
            raise BusUnavailable(f"no node of the cluster serves {channel}")
        return node.host, int(node.port)

    async def _run(self, partition: int) -> None:
        channel = self.channels[partition]
        backoff = Backoff(cap_s=1.0)
        while True:
            connection: Connection | None = None
            try:
                with redis_errors():
                    host, port = await self._owner(channel)
                    options = self._cluster.nodes_manager.connection_kwargs
                    connection = Connection(
                        host=host,
                        port=port,
                        username=options.get("username"),
                        password=options.get("password"),
                        socket_connect_timeout=1.0,
                    )
                    await connection.connect()  # type: ignore[no-untyped-call]
                    await connection.send_command("SSUBSCRIBE", channel)
                    await self._read(partition, connection, backoff)
            except asyncio.CancelledError:
                raise
            except (BusUnavailable, RedisCommandError) as exc:
                self._set_live(partition, False)
                self.last_error = str(exc) or type(exc).__name__
                if backoff.failures == 0:
                    logger.warning("reply reader of partition %d lost redis: %s", partition, self.last_error)
                await self._cluster.aclose()  # read the topology again: the slot may have moved
                await backoff.wait()
            finally:
                self._set_live(partition, False)
                if connection is not None:
                    with contextlib.suppress(Exception):
                        await connection.disconnect()

    async def _read(self, partition: int, connection: Connection, backoff: Backoff) -> None:
        """Read this partition's replies until the subscription or the connection ends."""
        last_seen = time.monotonic()
        while True:
            # A timeout given to read_response returns None and keeps the connection (and so the
            # subscription); a cancelled read would close it, and the PING would then reconnect
            # without the subscription.
            message: Any = await connection.read_response(timeout=PING_EVERY_S)
            if message is None:
                if time.monotonic() - last_seen > 3 * PING_EVERY_S or not connection.is_connected:
                    raise BusUnavailable("no traffic on the reply channel, not even pongs")
                await connection.send_command("PING")
                continue
            last_seen = time.monotonic()
            kind = message[0] if isinstance(message, list) and message else b""
            if kind == b"smessage":
                self._resolve(message[2])
            elif kind == b"ssubscribe":
                self._set_live(partition, True)
                self.last_error = None
                if backoff.failures:
                    logger.info("reply reader of partition %d subscribed again", partition)
                backoff.reset()
            elif kind == b"sunsubscribe":  # the slot moved to another node: follow it
                raise BusUnavailable(f"the slot of {self.channels[partition]} moved")


__all__ = ["ShardedReplyWaiter"]
