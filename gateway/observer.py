"""The gateway's periodic look at the platform's Redis state, for Prometheus.

Every ``interval_s`` the observer reads, in one pipelined round trip bounded by
``timeout_s``: the length of the work streams and the decision log, the dispatchers'
consumer group on each work stream (pending entries, lag), the dispatcher heartbeats, the
dead-letter stream, the arq queue and the async dead-letter stream; with several partitions,
those of every partition, added up (lags and pending entries too; the decision log's age is
its oldest record's). The arq queue and the async dead letters live where the worker writes
them, on the queue's Redis: with one of its own (``HOOKBUS_QUEUE_REDIS_URL``, also a Sentinel
URL) they are read there, in a second round trip. It sets the gauges of
:meth:`bus.runtime.metrics.Metrics.observed`, and ``hookbus_redis_up`` to 1, or to 0 when a Redis did not answer
in time (the gauges read there then keep their last values). It also counts, per audit
consumer group, the decision-log records trimmed before the group read them
(:mod:`bus.decisionlog.trimmed`; each record once, whichever gateway sees it first).

Only gateways run it: one process answers for the platform's shared state, and under
``hookbus up`` the gateway is the only one. With several gateways each reports the same
values; the gauges' multiprocess modes (``livemax``, ``livemin`` for ``redis_up``) keep one
series per gateway process group and drop the values of processes that have exited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from bus.decisionlog.audit import log_state
from bus.decisionlog.trimmed import count_trimmed_unread
from bus.errors import BusUnavailable, RedisCommandError
from bus.redis.connection import connect, hookbus_error, redis_errors
from bus.redis.keys import DISPATCH_GROUP, Keyspace
from bus.runtime.metrics import Metrics, process_metrics
from bus.runtime.retry import BackgroundTask
from bus.stream.protocol import now_ms

logger = logging.getLogger("hookbus.gateway")

OBSERVE_INTERVAL_S = 2.0
OBSERVE_TIMEOUT_S = 1.0
#: A dispatcher heartbeats every 2 s; one older than this is gone (as ``/readyz`` counts them).
ALIVE_WITHIN_MS = 10_000


def group_lag(group: Mapping[str, Any] | None, length: int) -> int | None:
    """Entries of a stream of ``length`` not yet delivered to ``group`` (an ``XINFO GROUPS`` item).

    Redis >= 7 reports the lag itself. Redis 6.2 does not: None asks the caller to look
    (:meth:`Observer._lag_without_counter`). A missing group will read the whole stream.
    """
    if group is None:
        return length
    lag = group.get("lag")
    if lag is not None:
        return int(lag)
    return None


def dispatch_group(groups: Any) -> Mapping[str, Any] | None:
    """The dispatchers' group among an ``XINFO GROUPS`` answer (None: no group, or no stream)."""
    if not isinstance(groups, list):
        return None
    name = DISPATCH_GROUP.encode()
    return next((g for g in groups if isinstance(g, Mapping) and g.get("name") in (name, DISPATCH_GROUP)), None)


class Observer:
    """Sets the Redis-state gauges every ``interval_s`` until stopped."""

    def __init__(
        self,
        redis_url: str,
        keys: Keyspace,
        *,
        queue_url: str | None = None,
        interval_s: float = OBSERVE_INTERVAL_S,
        timeout_s: float = OBSERVE_TIMEOUT_S,
        metrics: Metrics | None = None,
    ) -> None:
        self.metrics = metrics or process_metrics()
        self.redis_url = redis_url
        #: The async queue's own Redis (None: the bus's holds the queue).
        self.queue_url = queue_url if queue_url and queue_url != redis_url else None
        self.keys = keys
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.gauges = self.metrics.observed()
        #: Each work stream's label and its stream in every partition.
        self.streams = {
            "blocking": [keys.blocking_stream(p) for p in keys.all_partitions],
            "events": [keys.events_stream(p) for p in keys.all_partitions],
        }
        self._redis = connect(redis_url, connect_timeout_s=timeout_s, socket_timeout_s=timeout_s)
        self._queue = (
            connect(self.queue_url, connect_timeout_s=timeout_s, socket_timeout_s=timeout_s) if self.queue_url else None
        )
        self._task = BackgroundTask(self._run, "hookbus-observer")
        #: Whether the last look reached Redis (None before the first).
        self.up: bool | None = None

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()
        await self._redis.aclose()
        if self._queue is not None:
            await self._queue.aclose()

    async def _run(self) -> None:
        while True:
            await self.observe()
            await asyncio.sleep(self.interval_s)

    async def observe(self) -> bool:
        """One look; returns whether Redis answered (``hookbus_redis_up``): the bus's, and the
        queue's when it has its own."""
        looks = [(self.redis_url, self._observe)]
        if self.queue_url is not None:
            looks.append((self.queue_url, self._observe_queue))
        failures = []
        for url, look in looks:
            try:
                async with asyncio.timeout(self.timeout_s):
                    with redis_errors(url):
                        await look()
            except (BusUnavailable, TimeoutError, RedisCommandError) as exc:
                where = "" if url == self.redis_url else " (the async queue's)"
                failures.append(f"{str(exc) or 'timed out'}{where}")
        if failures:
            if self.up is not False:  # once per outage, not every round
                logger.warning("observer: cannot read the platform's state from Redis: %s", "; ".join(failures))
            self.metrics.child(self.metrics.redis_errors, "observe").inc()
            self.up = False
            self.gauges.redis_up.set(0)
            return False
        if self.up is False:
            logger.info("observer: Redis answers again")
        self.up = True
        self.gauges.redis_up.set(1)
        return True

    async def _observe(self) -> None:
        keys = self.keys
        async with self._redis.pipeline(transaction=False) as pipe:
            for streams in self.streams.values():
                for stream in streams:
                    pipe.xlen(stream)
                    pipe.xinfo_groups(stream)
            for partition in keys.all_partitions:
                pipe.xlen(keys.decision_log(partition))
                pipe.xlen(keys.dead_letter_stream(partition))
            pipe.hgetall(keys.dispatchers)
            if self._queue is None:
                pipe.zcard(keys.arq_queue)
                pipe.xlen(keys.async_dead_letters)
            answers: Sequence[Any] = await pipe.execute(raise_on_error=False)
        for answer in answers:  # a missing stream answers XINFO GROUPS with an error, which is no outage
            if isinstance(answer, Exception) and not isinstance(hookbus_error(answer), RedisCommandError):
                raise answer
        it = iter(answers)
        for label, streams in self.streams.items():
            total_length = total_pending = total_lag = 0
            for stream in streams:
                length, groups = _count(next(it)), next(it)
                group = dispatch_group(groups)
                pending = int(group.get("pending") or 0) if group is not None else 0
                lag = group_lag(group, length)
                if lag is None:
                    assert group is not None
                    lag = await self._lag_without_counter(stream, group, length, pending)
                total_length, total_pending, total_lag = total_length + length, total_pending + pending, total_lag + lag
            self.gauges.stream_length.labels(label).set(total_length)
            self.gauges.stream_pending.labels(label, DISPATCH_GROUP).set(total_pending)
            self.gauges.stream_lag.labels(label, DISPATCH_GROUP).set(total_lag)
        decisions = dead = 0
        for _ in keys.all_partitions:
            decisions, dead = decisions + _count(next(it)), dead + _count(next(it))
        self.gauges.stream_length.labels("decisions").set(decisions)
        self.gauges.dlq_size.set(dead)
        beats = next(it)
        now = now_ms()
        alive = sum(1 for ms in (beats.values() if isinstance(beats, dict) else ()) if _fresh(ms, now))
        self.gauges.dispatchers_alive.set(alive)
        if self._queue is None:
            self.gauges.async_queue_depth.set(_count(next(it)))
            self.gauges.async_dead_letters.set(_count(next(it)))
        await self._observe_log()

    async def _observe_queue(self) -> None:
        """The arq queue's depth and the async dead letters, on the queue's own Redis."""
        assert self._queue is not None
        async with self._queue.pipeline(transaction=False) as pipe:
            pipe.zcard(self.keys.arq_queue)
            pipe.xlen(self.keys.async_dead_letters)
            depth, dead = await pipe.execute()
        self.gauges.async_queue_depth.set(_count(depth))
        self.gauges.async_dead_letters.set(_count(dead))

    async def _observe_log(self) -> None:
        """The decision log's length and age, and the lag of each audit consumer group on it."""
        state = await log_state(self._redis, self.keys)
        self.gauges.decision_log_length.set(state.length)
        self.gauges.decision_log_age.set(state.age_s)
        trimmed = await count_trimmed_unread(self._redis, self.keys)
        families = self.metrics.audit()
        for group in state.groups:
            self.gauges.audit_lag.labels(group.name).set(group.lag)
            self.gauges.audit_lag_seconds.labels(group.name).set(group.lag_s)
            families.trimmed(group.name).inc(trimmed.get(group.name, 0))
            if trimmed.get(group.name):
                logger.warning(
                    "audit group %s: %d decision-log records were trimmed (retention) before it read them",
                    group.name,
                    trimmed[group.name],
                )

    async def _lag_without_counter(self, stream: str, group: Mapping[str, Any], length: int, pending: int) -> int:
        """Redis 6.2: 0 when nothing follows the last delivered entry, else at least 1.

        Beyond that the stream length less the pending entries is an upper bound (entries
        acknowledged but not yet trimmed by a dispatcher count too).
        """
        last = group.get("last-delivered-id") or b"0-0"
        last = last.decode() if isinstance(last, bytes) else str(last)
        after = await self._redis.xrange(stream, min=f"({last}", max="+", count=1)
        if not after:
            return 0
        return max(1, length - pending)


def _count(answer: Any) -> int:
    return int(answer) if isinstance(answer, int) else 0


def _fresh(ms: Any, now: int) -> bool:
    try:
        return now - int(ms) < ALIVE_WITHIN_MS
    except (TypeError, ValueError):
        return False


__all__ = ["ALIVE_WITHIN_MS", "OBSERVE_INTERVAL_S", "Observer", "dispatch_group", "group_lag"]
