"""A single Redis or a Redis Cluster: decided once, from the bus's URL, and handed to every role.

The choice is made by the URL (:func:`bus.redis.urls.cluster_url`: ``HOOKBUS_REDIS_CLUSTER=1`` /
``--redis-cluster`` turn the configured URL into a ``redis+cluster://`` one). A role (the
gateway, a dispatcher, the arq worker) makes one :class:`Topology` from its URL when it starts
and gives it to the parts that work differently on a cluster. Each difference is a property
here, named for the question it answers, with why it differs; the parts ask it instead of
inspecting a client.

Two rules cause every difference. On a cluster the keys of one command (or script, or MULTI)
must share one slot, and each partition of the bus is one slot; and redis-py's cluster client
answers a node's connection error by dropping every connection it holds, so work that can
stall on one master is kept apart from the others' (a client, a pipeline, a read of its own).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import redis.asyncio as aioredis

from bus.redis.connection import connect, is_cluster_url
from bus.redis.urls import mask_url


@dataclasses.dataclass(frozen=True)
class Topology:
    """The bus's Redis: where it is (``url``) and whether it is a Redis Cluster (``cluster``)."""

    url: str
    cluster: bool

    @classmethod
    def from_url(cls, url: str) -> Topology:
        """The topology named by the bus's URL (a ``redis+cluster://`` or ``rediss+cluster://``
        URL names a cluster's seed node; any other, a single Redis)."""
        return cls(url, is_cluster_url(url))

    def __repr__(self) -> str:
        return f"Topology({mask_url(self.url)!r}, cluster={self.cluster})"

    def connect(
        self,
        *,
        connect_timeout_s: float = 1.0,
        socket_timeout_s: float | None = 5.0,
        client_name: str | None = None,
    ) -> aioredis.Redis:
        """A client of the bus (:func:`bus.redis.connection.connect`; a ``RedisCluster`` on a cluster)."""
        return connect(
            self.url, connect_timeout_s=connect_timeout_s, socket_timeout_s=socket_timeout_s, client_name=client_name
        )

    def partition_clients(self, shared: aioredis.Redis, **options: Any) -> PartitionClients:
        """The client of each partition: ``shared`` on a single Redis, one of its own (connected
        with ``options``, as :meth:`connect` takes them) per partition on a cluster."""
        return PartitionClients(shared, self.url if self.cluster else None, **options)

    @property
    def reads_every_stream_at_once(self) -> bool:
        """Whether one blocking ``XREADGROUP`` may name every partition's work streams, and so be
        ended at stop by ``CLIENT UNBLOCK`` from another connection. Not on a cluster: a read
        names one partition's streams (one slot), each on its partition's client, and such
        reads are ended by cancelling them (CLIENT UNBLOCK would have to find them on each node)."""
        return not self.cluster

    @property
    def settles_across_partitions(self) -> bool:
        """Whether one settle script may settle events of several partitions (their keys in one
        call), and all of a flush's writes share one pipeline. Not on a cluster: a call per
        partition, and the calls are sent one by one (a cluster pipeline carries no scripts)."""
        return not self.cluster

    @property
    def preloads_scripts(self) -> bool:
        """Whether scripts are loaded with ``SCRIPT LOAD`` and then run by digest. Not on a
        cluster, where ``SCRIPT LOAD`` goes to every master: each partition's first call (and its
        first after a ``NOSCRIPT``, a promoted replica) is an ``EVAL``, caching it on its master."""
        return not self.cluster

    @property
    def sharded_replies(self) -> bool:
        """Whether replies go over sharded Pub/Sub (``SPUBLISH`` on each partition's channel,
        :mod:`gateway.replies.sharded`) rather than one classic channel per gateway. On a
        cluster a classic ``PUBLISH`` is copied to every node; a shard channel stays in its shard."""
        return self.cluster

    @property
    def reply_publish_command(self) -> str:
        """The command a dispatcher's settle script answers a gateway with (see :attr:`sharded_replies`)."""
        return "SPUBLISH" if self.sharded_replies else "PUBLISH"

    @property
    def batches_appends_across_streams(self) -> bool:
        """Whether the gateway's concurrent appends to different work streams share one pipeline.
        Not on a cluster: each stream (one partition) has round trips of its own, on its
        partition's client, so a master that fails over holds up only its own partition's appends."""
        return not self.cluster

    @property
    def appends_take_context(self) -> bool:
        """Whether an append can take its session's pending context in the same script
        (:mod:`bus.stream.pending_context`). Not on a cluster: the session's list and the work
        stream are in different slots; the dispatcher pops the context instead."""
        return not self.cluster

    @property
    def coalesces_context_pops(self) -> bool:
        """Whether the dispatcher's concurrent context pops share one pipeline
        (:mod:`workers.engine.contextpops`). Not on a cluster: each session's key has a slot of
        its own, so a pipeline would be split per node anyway, and a pop per command keeps a
        failing-over master's stall to its own slots."""
        return not self.cluster


class PartitionClients:
    """A client per partition on a Redis Cluster; the one shared client on a single Redis
    (:meth:`Topology.partition_clients` makes them).

    redis-py's cluster client answers a connection error from one node by closing every
    connection it holds (to re-read the topology): one client for all partitions would stall
    them all while one master fails over. A client of its own per partition keeps the stall
    to the partitions of the node that failed.
    """

    def __init__(self, shared: aioredis.Redis, own_url: str | None, **options: Any) -> None:
        """``own_url``: the URL each partition's own client connects to; None to share ``shared``."""
        self.shared = shared
        self.own_url = own_url
        self.options = options
        self._own: dict[int, aioredis.Redis] = {}

    def get(self, partition: int) -> aioredis.Redis:
        if self.own_url is None:
            return self.shared
        client = self._own.get(partition)
        if client is None:
            client = self._own[partition] = connect(self.own_url, **self.options)
        return client

    async def aclose(self) -> None:
        clients, self._own = list(self._own.values()), {}
        for client in clients:
            with contextlib.suppress(Exception):
                await client.aclose()


__all__ = ["PartitionClients", "Topology"]
