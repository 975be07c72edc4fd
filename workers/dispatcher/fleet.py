"""Counters of a whole tenant or agent (``scope: tenant``/``agent``), and their ``onLimit`` freeze.

A session's counters change in the settle script, in its partition's slot. A tenant's sessions
are spread over every partition, so its counters live in a key of their own in the tenant's
slot (:meth:`bus.redis.keys.Keyspace.fleet_counter`) and are counted after the event is settled,
off the reply path: the agent has its answer before the count is sent. One script per event
sets a marker for the event id (``SET NX`` with the window's TTL) and adds one to each counter's
current bucket only when the marker was not there, so a redelivered event is counted once. A
counter is :data:`~bus.session.definitions.BUCKETS` + 1 buckets that expire with the window.

When a count first goes above its ``onLimit.above`` (this event took it there), the tenant is
frozen (:func:`bus.freeze.store.freeze`, ``by="policy"``, the reason naming the counter), and
``hookbus_policy_freezes_total`` counts it. A Redis fault loses the count (logged): it never
changes a decision. The totals each count answers refresh this process's copy that ``when:``
conditions read (:mod:`workers.engine.fleetvalues`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

import redis.asyncio as aioredis

from bus.freeze.store import freeze
from bus.policy.sessionschema import duration_seconds
from bus.redis.keys import Keyspace
from bus.runtime.sessionmetrics import SessionFamilies
from bus.session.definitions import BUCKETS, Counter
from bus.stream.protocol import Request, now_ms
from workers.engine.fleetvalues import FleetValues

logger = logging.getLogger("hookbus.dispatcher")

#: KEYS[1] the event's marker, KEYS[2..] the counters; ARGV[1] now (ms), ARGV[2] the marker's TTL
#: (ms), ARGV[2 + i] counter i's bucket width (ms). Returns false for an event counted already,
#: else each counter's total over its window, this event included.
COUNT_LUA: Final = f"""
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[2]) then
  return false
end
local now = tonumber(ARGV[1])
local totals = {{}}
for i = 2, #KEYS do
  local width = tonumber(ARGV[i + 1])
  local current = math.floor(now / width)
  redis.call('HINCRBY', KEYS[i], current, 1)
  local total = 0
  local all = redis.call('HGETALL', KEYS[i])
  for j = 1, #all, 2 do
    if tonumber(all[j]) < current - {BUCKETS} then
      redis.call('HDEL', KEYS[i], all[j])
    else
      total = total + tonumber(all[j + 1])
    end
  end
  redis.call('PEXPIRE', KEYS[i], width * ({BUCKETS} + 1))
  totals[#totals + 1] = total
end
return totals
"""


class FleetCounts:
    """Counts settled events in their tenant's (agent's) counters; at most once per event id."""

    def __init__(
        self, redis: aioredis.Redis, keys: Keyspace, metrics: SessionFamilies, values: FleetValues | None = None
    ) -> None:
        """``values``: this process's copy that ``when:`` reads, refreshed with each count's totals."""
        self.redis, self.keys, self.metrics, self.values = redis, keys, metrics, values
        self._script = redis.register_script(COUNT_LUA)
        self._tasks: set[asyncio.Task[list[int] | None]] = set()

    def start(self, request: Request, counters: list[Counter]) -> None:
        """Count ``request``'s event in ``counters`` in the background (the reply is sent already)."""
        if not counters:
            return
        task = asyncio.get_running_loop().create_task(self.count(request, counters))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def count(self, request: Request, counters: list[Counter]) -> list[int] | None:
        """Each counter's total once ``request``'s event is counted; None when it was counted before
        (or Redis could not be reached: logged, the decision stands)."""
        tenant = request.tenant
        keys = [self.keys.fleet_counted(tenant, request.event_id)]
        agent = request.agent
        keys += [self.keys.fleet_counter(tenant, c.field, agent if c.scope == "agent" else "") for c in counters]
        widths = [c.bucket_ms or 1 for c in counters]
        marker_ttl_ms = max(widths) * (BUCKETS + 1)
        try:
            found = await self._script(keys=keys, args=[now_ms(), marker_ttl_ms, *widths])
        except Exception as exc:  # a lost count never changes a decision
            logger.warning("tenant %s: event %s not counted by its tenant counters: %s", tenant, request.event_id, exc)
            return None
        if not found:
            return None
        totals = [int(n) for n in found]
        if self.values is not None:
            for key, counter, total in zip(keys[1:], counters, totals, strict=True):
                self.values.put(key, counter.bucket_ms or 1, float(total))
        for counter, total in zip(counters, totals, strict=True):
            limit = counter.on_limit
            if limit is not None and total == limit.above + 1:
                await self._freeze(request, counter, total)
        return totals

    async def _freeze(self, request: Request, counter: Counter, total: int) -> None:
        limit = counter.on_limit
        assert limit is not None
        whose = f"agent {request.agent}'s" if counter.scope == "agent" else "the tenant's"
        window_s = (counter.bucket_ms or 0) * BUCKETS / 1000
        reason = f"policy counter {counter.name!r}: {whose} count {total} in {window_s:g}s is above {limit.above}"
        until_ms = None if limit.for_ is None else now_ms() + int(duration_seconds(limit.for_) * 1000)
        try:
            await freeze(self.redis, self.keys, request.tenant, limit.tools, until_ms, reason, by="policy")
        except Exception as exc:
            logger.error("tenant %s: the freeze of counter %s failed: %s", request.tenant, counter.name, exc)
            return
        self.metrics.policy_freezes.inc()
        logger.warning("tenant %s frozen: %s", request.tenant, reason)


__all__ = ["COUNT_LUA", "FleetCounts"]
