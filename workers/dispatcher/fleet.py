"""Counters of a whole tenant or agent (``scope: tenant``/``agent``), and their ``onLimit`` freeze.

A session's counters change in the settle script, in its partition's slot. A tenant's sessions
are spread over every partition, so its counters live in a key of their own in the tenant's
slot (:meth:`bus.redis.keys.Keyspace.fleet_counter`) and are counted after the event is settled,
off the reply path: the agent has its answer before the count is sent. One script per event
sets a marker for the event id (``SET NX`` with the window's TTL) and adds one to each counter's
current bucket only when the marker was not there, so an event is counted once however often
it is counted. A counter is :data:`~bus.session.definitions.BUCKETS` + 1 buckets that expire
with the window.

No count is lost with the dispatcher that settled the event: the settle script writes what is
to count (:func:`pending_entry`: the event id, tenant, agent and counters) into its partition's
``fleet:pending`` sorted set in the same atomic step as the event's record
(:mod:`bus.session.script`), and the entry is removed once the count is sent. Every dispatcher
looks for entries older than :data:`PENDING_GRACE_MS` every :data:`SWEEP_S` (:meth:`FleetCounts.sweep`)
and counts them again, at their settle time: one whose count was sent already is not counted
twice (its marker), and one whose window has passed is dropped.

When a count first goes above its ``onLimit.above`` (this event took it there), the tenant is
frozen (:func:`bus.freeze.store.freeze`, ``by="policy"``, the reason naming the counter), and
``hookbus_policy_freezes_total`` counts it. A Redis fault loses the count (logged): it never
changes a decision. The totals each count answers refresh this process's copy that ``when:``
conditions read (:mod:`workers.engine.fleetvalues`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, Final

import orjson
import redis.asyncio as aioredis

from bus.freeze.store import freeze
from bus.policy.sessionschema import OnLimit, duration_seconds
from bus.redis.keys import Keyspace
from bus.runtime.retry import every
from bus.runtime.sessionmetrics import SessionFamilies
from bus.session.definitions import BUCKETS, Counter
from bus.stream.protocol import Request, now_ms
from workers.engine.fleetvalues import FleetValues

logger = logging.getLogger("hookbus.dispatcher")

#: How long a pending count is left to the dispatcher that settled its event before any other counts it.
PENDING_GRACE_MS: Final = 10_000
#: How often a dispatcher looks for pending counts left behind.
SWEEP_S: Final = 5.0
#: The most pending counts one look takes (the rest wait for the next).
SWEEP_BATCH: Final = 200


@dataclasses.dataclass(frozen=True, slots=True)
class Counting:
    """One settled event to count: whose it is, and in what."""

    event_id: str
    tenant: str
    agent: str
    counters: tuple[Counter, ...]


def pending_entry(request: Request, counters: list[Counter]) -> str:
    """What the settle writes for ``request``'s event to be counted in ``counters`` (``''``: none)."""
    if not counters:
        return ""
    wire = [
        [
            c.name,
            c.field,
            c.bucket_ms or 1,
            c.scope,
            None if c.on_limit is None else c.on_limit.model_dump(by_alias=True),
        ]
        for c in counters
    ]
    return orjson.dumps({"id": request.event_id, "t": request.tenant, "a": request.agent, "c": wire}).decode()


def read_entry(entry: str | bytes) -> Counting:
    """A pending entry read back (ValueError, KeyError or TypeError when it is not one)."""
    found: dict[str, Any] = orjson.loads(entry)
    counters = tuple(
        Counter(
            str(name),
            str(field),
            (),
            int(width),
            str(scope),
            frozenset(),
            None if limit is None else OnLimit.model_validate(limit),
        )
        for name, field, width, scope, limit in found["c"]
    )
    return Counting(str(found["id"]), str(found["t"]), str(found["a"]), counters)


#: KEYS[1] the event's marker, KEYS[2..] the counters; ARGV[1] now (ms), ARGV[2] the marker's TTL
#: (ms), ARGV[3] when the event was settled (ms: the bucket it is counted in), ARGV[2 + i] counter
#: i's bucket width (ms). Returns false for an event counted already, else each counter's total
#: over its window as of now, this event included (a count redone late by a sweep adds to its
#: event's bucket, and its total is the same window's as any count sent now). It writes nothing
#: before it knows every write will succeed (a script is not rolled back): the marker comes last.
COUNT_LUA: Final = f"""
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
for i = 2, #KEYS do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind ~= 'hash' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE tenant counter ' .. KEYS[i] .. ' is a ' .. kind)
  end
end
local now = tonumber(ARGV[1])
local at = tonumber(ARGV[3])
local totals = {{}}
for i = 2, #KEYS do
  local width = tonumber(ARGV[i + 2])
  local current = math.floor(now / width)
  redis.call('HINCRBY', KEYS[i], math.min(math.floor(at / width), current), 1)
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
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
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
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, request: Request, counters: list[Counter], partition: int | None = None) -> None:
        """Count ``request``'s event in ``counters`` in the background (the reply is sent already),
        then remove its entry from ``partition``'s pending counts (None: the settle wrote none)."""
        if not counters:
            return
        what = Counting(request.event_id, request.tenant, request.agent, tuple(counters))
        pending = None if partition is None else (self.keys.fleet_pending(partition), pending_entry(request, counters))
        task = asyncio.get_running_loop().create_task(self._count_pending(what, pending))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _count_pending(self, what: Counting, pending: tuple[str, str] | None, at_ms: int | None = None) -> None:
        sent, _ = await self._send(what, at_ms)
        if sent and pending is not None:  # counted now or before: no longer pending
            try:
                await self.redis.zrem(*pending)
            except Exception as exc:  # left pending: a sweep counts it again (once) and removes it
                logger.warning("a pending tenant count stays pending: %s", exc)

    async def count(self, request: Request, counters: list[Counter]) -> list[int] | None:
        """Each counter's total once ``request``'s event is counted; None when it was counted before
        (or Redis could not be reached: logged, the decision stands)."""
        _, totals = await self._send(Counting(request.event_id, request.tenant, request.agent, tuple(counters)))
        return totals

    async def _send(self, what: Counting, at_ms: int | None = None) -> tuple[bool, list[int] | None]:
        """Whether the count reached Redis, and each counter's total (None: counted before, or not sent)."""
        tenant, agent, counters = what.tenant, what.agent, what.counters
        keys = [self.keys.fleet_counted(tenant, what.event_id)]
        keys += [self.keys.fleet_counter(tenant, c.field, agent if c.scope == "agent" else "") for c in counters]
        widths = [c.bucket_ms or 1 for c in counters]
        marker_ttl_ms = max(widths) * (BUCKETS + 1)
        now = now_ms()
        try:
            found = await self._script(keys=keys, args=[now, marker_ttl_ms, now if at_ms is None else at_ms, *widths])
        except Exception as exc:  # a lost count never changes a decision
            logger.warning("tenant %s: event %s not counted by its tenant counters: %s", tenant, what.event_id, exc)
            return False, None
        if not found:
            return True, None
        totals = [int(n) for n in found]
        if self.values is not None:
            for key, counter, total in zip(keys[1:], counters, totals, strict=True):
                self.values.put(key, counter.bucket_ms or 1, float(total))
        for counter, total in zip(counters, totals, strict=True):
            limit = counter.on_limit
            if limit is not None and total == limit.above + 1:
                await self._freeze(what, counter, total)
        return True, totals

    async def sweep_once(self, grace_ms: int = PENDING_GRACE_MS) -> int:
        """Count the pending entries of every partition settled over ``grace_ms`` ago (their
        dispatcher died, or lost Redis, before it counted them); how many were taken."""
        now = now_ms()
        taken = 0
        for partition in self.keys.all_partitions:
            key = self.keys.fleet_pending(partition)
            found = await self.redis.zrangebyscore(
                key, "-inf", now - grace_ms, start=0, num=SWEEP_BATCH, withscores=True
            )
            for raw, score in found:
                try:
                    what = read_entry(raw)
                except (ValueError, KeyError, TypeError) as exc:
                    logger.warning("an unreadable pending tenant count is dropped: %s", exc)
                    await self.redis.zrem(key, raw)
                    continue
                at_ms = int(score)
                widest = max(c.bucket_ms or 1 for c in what.counters) * (BUCKETS + 1)
                if now - at_ms >= widest:  # its window has passed (and its marker with it): nothing to count
                    await self.redis.zrem(key, raw)
                else:
                    await self._count_pending(what, (key, raw), at_ms)
                taken += 1
        return taken

    async def sweep(self, stop: asyncio.Event) -> None:
        """:meth:`sweep_once` every :data:`SWEEP_S` until ``stop`` is set (a Redis fault waits for the next)."""
        await every(SWEEP_S, self.sweep_once, stop, logger, "pending tenant counts not swept")

    async def _freeze(self, what: Counting, counter: Counter, total: int) -> None:
        limit = counter.on_limit
        assert limit is not None
        whose = f"agent {what.agent}'s" if counter.scope == "agent" else "the tenant's"
        window_s = (counter.bucket_ms or 0) * BUCKETS / 1000
        reason = f"policy counter {counter.name!r}: {whose} count {total} in {window_s:g}s is above {limit.above}"
        until_ms = None if limit.for_ is None else now_ms() + int(duration_seconds(limit.for_) * 1000)
        try:
            await freeze(self.redis, self.keys, what.tenant, limit.tools, until_ms, reason, by="policy")
        except Exception as exc:
            logger.error("tenant %s: the freeze of counter %s failed: %s", what.tenant, counter.name, exc)
            return
        self.metrics.policy_freezes.inc()
        logger.warning("tenant %s frozen: %s", what.tenant, reason)


__all__ = ["COUNT_LUA", "PENDING_GRACE_MS", "SWEEP_S", "Counting", "FleetCounts", "pending_entry", "read_entry"]
