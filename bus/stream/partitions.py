"""The bus's partitions: agreeing on how many there are, and reading their logs as one.

Work streams and decision logs are split into ``hookbus.streams.partitions`` partitions
(:mod:`bus.redis.keys`). Every gateway and dispatcher must agree on the number: the first one to
start records it in ``{p}layout`` and a node started with another number refuses to run,
with a message saying so, instead of sending events no dispatcher reads. Readers that are not
given a policy (``hookbus tail``, ``hookbus audit``, the export) take the number from there.

Entry ids are ``<ms>-<seq>``, so the decision logs of all partitions merge into one
time-ordered log by id (:func:`bus.redis.entries.entry_order`; the readers are in :mod:`bus.decisionlog.reader`).
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis

from bus.errors import ConfigError
from bus.policy.loading import Policy
from bus.redis.keys import Keyspace, partition_tags

logger = logging.getLogger("hookbus")


async def claim_layout(redis: aioredis.Redis, keys: Keyspace) -> None:
    """Record ``keys.partitions`` as the bus's partition count, or raise :class:`ConfigError`
    if the bus already runs with another one."""
    await redis.hsetnx(keys.layout, "partitions", str(keys.partitions))  # type: ignore[misc]
    # The partitions' hash tags, for operators' redis-cli (p0, or p<i>.<k> spread over the slots).
    await redis.hsetnx(keys.layout, "tags", ",".join(partition_tags(keys.partitions)))  # type: ignore[misc]
    stored = await redis.hget(keys.layout, "partitions")  # type: ignore[misc]
    if stored is not None and int(stored) != keys.partitions:
        raise ConfigError(
            f"the bus has {int(stored)} partitions, this node's policy says hookbus.streams.partitions: "
            f"{keys.partitions}; every gateway and dispatcher must use the same number (to change it, drain "
            f"the work streams, stop every node and delete the key {keys.layout})"
        )


async def bus_keyspace(redis: aioredis.Redis, keys: Keyspace) -> Keyspace:
    """``keys`` with the bus's partition count (1 when no node has recorded one yet)."""
    stored = await redis.hget(keys.layout, "partitions")  # type: ignore[misc]
    return keys.with_partitions(int(stored) if stored else 1)


def warn_partitions_changed(keys: Keyspace, policy: Policy) -> None:
    """Log a reloaded policy's new partition count: it takes a restart (of a drained bus)."""
    wanted = policy.settings.streams.partitions
    if wanted != keys.partitions:
        logger.warning(
            "hookbus.streams.partitions changed from %d to %d in the reloaded policy: it applies only "
            "when every gateway and dispatcher restarts on a drained bus; keeping %d",
            keys.partitions,
            wanted,
            keys.partitions,
        )


__all__ = ["bus_keyspace", "claim_layout", "warn_partitions_changed"]
