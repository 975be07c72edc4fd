"""Every node's copy of the freezes: what a decision reads, with no Redis call of its own.

Each gateway and dispatcher holds one :class:`FreezeCache`. A background task reads the
freezes hash every :data:`POLL_S` seconds (one HGETALL, as :mod:`bus.policy.registry` reads
the policy versions), so a freeze set or lifted anywhere is obeyed everywhere within
``POLL_S`` plus one round trip; the node that sets or lifts one applies it at once
(:meth:`FreezeCache.put`, :meth:`FreezeCache.drop`). A poll rather than a Pub/Sub notice: it
needs no connection of its own, works alike on a Redis Cluster, and cannot miss a message.
``until`` is checked on every lookup, so a freeze lifts itself on time even between polls.

While Redis cannot be read the cache keeps what it last read: a freeze holds through an
outage (the gateway answers a frozen event itself, without the dispatchers), and one lifted
during it is lifted here once Redis answers again.
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis

from bus.errors import BusUnavailable
from bus.freeze.freezes import FROZEN_EVENTS, Freeze, now_ms
from bus.freeze.store import decode_all
from bus.redis.connection import redis_errors
from bus.redis.keys import Keyspace
from bus.runtime.metrics import Metrics, process_metrics
from bus.runtime.retry import BackgroundTask

logger = logging.getLogger("hookbus.freeze")

#: Seconds between two reads of the freezes.
POLL_S = 0.25


class FreezeCache:
    """The freezes in force, by tenant; see the module docstring."""

    def __init__(
        self, redis: aioredis.Redis | None, keys: Keyspace, redis_url: str = "", metrics: Metrics | None = None
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.redis_url = redis_url
        self.metrics = metrics or process_metrics()
        self._by_tenant: dict[str, Freeze] = {}
        self._raw: dict[bytes, bytes] | None = None
        #: Bumped by :meth:`put` and :meth:`drop`: a read that started before one is not applied.
        self._changes = 0
        #: The last read's error (None: it worked), for ``/readyz``.
        self.last_error: str | None = None
        self._task = BackgroundTask(self._run, "hookbus-freezes")

    def frozen(self, tenant: str, event: str, tool_name: object) -> Freeze | None:
        """The freeze that denies ``event`` of ``tool_name`` for ``tenant``, else None (no I/O)."""
        if event not in FROZEN_EVENTS or not self._by_tenant:
            return None
        found = self._by_tenant.get(tenant)
        if found is None or not found.active() or not found.covers(event, tool_name):
            return None
        return found

    def active(self) -> list[Freeze]:
        """The freezes in force here, oldest first."""
        now = now_ms()
        return sorted((f for f in self._by_tenant.values() if f.active(now)), key=lambda f: (f.since_ms, f.tenant))

    def put(self, freeze: Freeze) -> None:
        """Apply a freeze this node just set (the others read it on their next poll)."""
        self._by_tenant[freeze.tenant] = freeze
        self._raw, self._changes = None, self._changes + 1
        self._report()

    def drop(self, tenant: str) -> None:
        """Lift a freeze this node just lifted."""
        self._by_tenant.pop(tenant, None)
        self._raw, self._changes = None, self._changes + 1
        self._report()

    async def refresh(self) -> None:
        """Read the freezes from Redis (BusUnavailable when it cannot)."""
        assert self.redis is not None
        changes = self._changes
        with redis_errors(self.redis_url):
            raw = await self.redis.hgetall(self.keys.freezes)  # type: ignore[misc]
        if changes != self._changes:  # this node set or lifted one meanwhile: the read may predate it
            return
        if raw == self._raw:  # the same as last time: nothing to decode (the common case)
            self._report()
            return
        self._raw = raw
        found = {f.tenant: f for f in decode_all(raw)}
        if found.keys() != self._by_tenant.keys():
            logger.info("frozen tenants: %s", ", ".join(sorted(found)) or "none")
        self._by_tenant = found
        self._report()

    async def start(self) -> None:
        if self.redis is None:
            return
        if not await self._try_refresh():
            logger.warning("cannot read the freezes yet: %s", self.last_error)
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()

    def _report(self) -> None:
        now = now_ms()
        self.metrics.freezes_active.set(sum(1 for f in self._by_tenant.values() if f.active(now)))

    async def _try_refresh(self) -> bool:
        """:meth:`refresh`, keeping what was read before when Redis cannot answer (False then)."""
        try:
            await self.refresh()
        except BusUnavailable as exc:
            self.last_error = str(exc)
            return False
        self.last_error = None
        return True

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            if not await self._try_refresh():
                logger.debug("freeze refresh: %s", self.last_error)


__all__ = ["POLL_S", "FreezeCache"]
