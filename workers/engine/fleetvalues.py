"""This process's copy of the tenant and agent counters that ``when:`` conditions read.

A decision reads no Redis for them: it reads the total this process last saw, which each count
it sends refreshes (the count script answers with the totals, :mod:`workers.dispatcher.fleet`)
and a poll every :data:`POLL_S` re-reads for every counter read in the last
:data:`KEEP_S` (events other dispatchers counted). So a value is at most about a second behind
the tenant's events settled anywhere, plus the events still in flight; a counter this process
has not read yet reads 0 until the next poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

import redis.asyncio as aioredis

from bus.redis.keys import Keyspace
from bus.runtime.retry import every
from bus.session.definitions import BUCKETS, Counter

logger = logging.getLogger("hookbus.dispatcher")

#: How often the counters read lately are read again from Redis.
POLL_S: Final = 1.0
#: A counter not read for this long is no longer polled (nor kept).
KEEP_S: Final = 600.0


class FleetValues:
    """Totals of tenant and agent counters by key, as this process last saw them."""

    def __init__(self, redis: aioredis.Redis | None, keys: Keyspace) -> None:
        self.redis, self.keys = redis, keys
        #: key -> (the counter's bucket width in ms, its total, when it was last read by a decision)
        self._values: dict[str, tuple[int, float, float]] = {}

    def key(self, tenant: str, agent: str, counter: Counter) -> str:
        return self.keys.fleet_counter(tenant, counter.field, agent if counter.scope == "agent" else "")

    def get(self, tenant: str, agent: str, counter: Counter) -> float:
        """The counter's total for ``tenant`` (``agent``) as last seen; 0 before the first poll."""
        key = self.key(tenant, agent, counter)
        width, total, _ = self._values.get(key, (counter.bucket_ms or 1, 0.0, 0.0))
        self._values[key] = (width, total, time.monotonic())
        return total

    def put(self, key: str, width_ms: int, total: float) -> None:
        """A total just read from Redis (an increment's answer, or a poll)."""
        _, _, read = self._values.get(key, (width_ms, 0.0, time.monotonic()))
        self._values[key] = (width_ms, total, read)

    async def refresh(self) -> None:
        """Read every counter read lately again; forget those nobody read for :data:`KEEP_S`."""
        if self.redis is None:
            return
        now = time.monotonic()
        for key in [k for k, (_, _, read) in self._values.items() if now - read > KEEP_S]:
            del self._values[key]
        for key, (width, _, _) in list(self._values.items()):
            raw = await self.redis.hgetall(key)  # type: ignore[misc]
            current = int(time.time() * 1000) // width
            total = sum(int(n) for b, n in raw.items() if int(b) >= current - BUCKETS)
            self.put(key, width, float(total))

    async def poll(self, stop: asyncio.Event) -> None:
        """:meth:`refresh` every :data:`POLL_S` until ``stop`` is set (a Redis fault keeps the old values)."""
        await every(POLL_S, self.refresh, stop, logger, "tenant counters not refreshed")


__all__ = ["KEEP_S", "POLL_S", "FleetValues"]
