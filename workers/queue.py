"""The enqueue side of async (fire-and-forget) hooks: how a dispatcher puts a job on arq.

A handler with ``async: true`` is not run by the dispatcher: the dispatcher enqueues a job
and answers at once. :mod:`workers.tasks` is the other side, the arq worker that runs the
jobs. Jobs are serialised as JSON, never pickle: Redis content must not become code.

**Idempotent.** The job id is the event id and the handler id, so an event enqueued twice (a
dispatcher re-delivery after a crash) runs each handler once: arq refuses a job id while the
job is queued or running, and while its result is kept (``hookbus.async.keepResultSeconds``,
default 30 s, a few hundred bytes each). A replay from the dead-letter stream is a new job,
``<id>:r<N>``, with the same ``webhook-id`` (:func:`workers.webhooks.webhook_id`).

**Bounded.** Past ``hookbus.async.maxQueued`` jobs in the queue, new async work is dropped
and counted (``hookbus_async_jobs_total{status="dropped"}``) rather than waited for: the
depth is read with ``ZCARD`` at most every :data:`DEPTH_CACHE_S` per dispatcher, plus what the
dispatcher queued since.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from typing import Any

import orjson
import redis.exceptions
from arq.connections import ArqRedis
from arq.constants import job_key_prefix, result_key_prefix
from redis.asyncio import BlockingConnectionPool

from bus import metrics
from bus.connection import redis_errors
from bus.errors import BusUnavailable
from bus.keys import Keyspace
from bus.policy import HandlerEntry
from bus.protocol import Request
from bus.retry import Backoff
from workers.context import HookContext

logger = logging.getLogger("hookbus.queue")

#: The arq function name of an async hook job.
JOB_FUNCTION = "run_async_hook"
#: How long the async hooks of a non-blocking event wait for a Redis that is down or full
#: (seconds) before they are given up. A blocking event waits until its deadline less
#: :data:`DECISION_MARGIN_S` at most: its decision must not be late.
ENQUEUE_PATIENCE_S = 60.0
DECISION_MARGIN_S = 0.1


#: How long a queued job's definition is kept at least (arq's own default: a day); a longer
#: ``maxAgeSeconds`` keeps it that much longer, so that the worker can still dead-letter it.
MIN_JOB_LIFETIME_S = 86_400.0
#: How long a dispatcher trusts the queue depth it last read, in seconds.
DEPTH_CACHE_S = 0.1
#: Seconds between two warnings about dropped async work.
DROP_LOG_INTERVAL_S = 10.0
_REPLAY_SUFFIX = re.compile(r":r\d+$")


def job_id(request: Request, entry: HandlerEntry) -> str:
    return f"{request.event_id}:{entry.handler_id}"


def replay_job_id(original: str, replay: int) -> str:
    """The arq job id of replay number ``replay`` (1, 2, ...) of a dead-lettered job."""
    return f"{_REPLAY_SUFFIX.sub('', original)}:r{replay}"


def replay_number(job: str) -> int:
    """Which replay a job id is (0: the original job)."""
    found = _REPLAY_SUFFIX.search(job)
    return int(found.group()[2:]) if found else 0


async def put_job(arq: ArqRedis, keys: Keyspace, request: Request, handler_id: str, job: str, max_age_s: float) -> bool:
    """Queue one async job; False when a job with this id is queued, running, or finished within
    ``keepResultSeconds`` (arq's rule: a job id is not reused while its result is kept)."""
    request = dataclasses.replace(request, reply_to="", deadline_ms=0)  # no reply: the worker has no deadline
    try:
        queued = await arq.enqueue_job(JOB_FUNCTION, request.to_job(), handler_id, _job_id=job,
                                       _queue_name=keys.arq_queue, _expires=max(MIN_JOB_LIFETIME_S, max_age_s + 3600))
    except redis.exceptions.WatchError as exc:
        # redis-py's word for "the connection died while the transaction watched the job's key",
        # raised before arq's own handling: a connection problem, retried as one.
        raise redis.exceptions.ConnectionError(f"the job was not queued: {exc}") from exc
    if queued is not None:
        return True
    # arq answers None for "this id exists", and also when the connection died at EXEC (the
    # WatchError it catches there): only the first is a duplicate.
    if await arq.exists(job_key_prefix + job, result_key_prefix + job):
        return False
    raise redis.exceptions.ConnectionError("the job was not queued: the connection dropped during the transaction")


class QueueDepth:
    """The arq queue's depth as a dispatcher sees it: ``ZCARD`` at most every ``cache_s``, plus what it queued since.

    :meth:`reserve` counts a job before it is queued, so that concurrent events of one
    dispatcher cannot all pass the limit at once; :meth:`release` gives back one not queued.
    Several dispatchers each keep their own view: together they may overshoot by what they
    queue within ``cache_s``.
    """

    def __init__(self, arq: ArqRedis, key: str, cache_s: float = DEPTH_CACHE_S) -> None:
        self.arq = arq
        self.key = key
        self.cache_s = cache_s
        self._depth = 0
        self._read_at = -cache_s
        self._reading = asyncio.Lock()

    async def reserve(self, limit: int) -> bool:
        """Count one more job unless the queue holds ``limit`` or more (a Redis error propagates)."""
        if time.monotonic() - self._read_at >= self.cache_s:
            async with self._reading:  # one ZCARD at a time; the others wait for its answer
                if time.monotonic() - self._read_at >= self.cache_s:
                    self._depth = int(await self.arq.zcard(self.key))
                    self._read_at = time.monotonic()
        if self._depth >= limit:
            return False
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1


#: Connections one process may open for arq. arq's enqueue is a WATCH/MULTI transaction that
#: holds a connection for its duration; an unbounded pool grows with every burst.
MAX_CONNECTIONS = 8


def arq_pool(redis_url: str, max_connections: int = MAX_CONNECTIONS) -> ArqRedis:
    """An arq connection that (de)serialises jobs as JSON, over a bounded connection pool."""
    connections = BlockingConnectionPool.from_url(
        redis_url, max_connections=max_connections, timeout=2.0, socket_connect_timeout=1.0, socket_timeout=5.0,
    )
    pool = ArqRedis(connection_pool=connections)
    pool.auto_close_connection_pool = True  # the client owns (and closes) the pool
    pool.job_serializer = orjson.dumps
    pool.job_deserializer = orjson.loads
    return pool


def make_enqueue(arq: ArqRedis, keys: Keyspace) -> Any:
    """The dispatcher's ``enqueue`` callback for async handlers."""
    depth = QueueDepth(arq, keys.arq_queue)
    dropped = [0, 0.0]  # since the last warning, and when that was

    def drop(ctx: HookContext, limit: int) -> None:
        metrics.ASYNC_JOBS.labels("dropped").inc()
        dropped[0] += 1
        now = time.monotonic()
        if now - dropped[1] >= DROP_LOG_INTERVAL_S:
            logger.warning("async queue holds %d jobs or more (hookbus.async.maxQueued): dropped %d async hook "
                           "run(s), the last %s of %s", limit, dropped[0], ctx.entry.handler_id, ctx.request.event_id)
            dropped[:] = [0, now]

    async def enqueue(ctx: HookContext) -> None:
        # The event is settled (logged and acknowledged) right after this: a job not queued
        # now is lost for good. So a Redis that is down or full is retried with backoff; the
        # event's entry stays pending meanwhile (claimed elsewhere if this dispatcher dies).
        request = ctx.request
        settings = ctx.policy.settings.async_
        handler = ctx.entry.handler
        patience_s = request.remaining_s() - DECISION_MARGIN_S if request.blocking else ENQUEUE_PATIENCE_S
        give_up_at = time.monotonic() + patience_s
        backoff = Backoff()
        while True:
            try:
                with redis_errors():
                    if not await depth.reserve(settings.max_queued):
                        drop(ctx, settings.max_queued)
                        return
                    max_age_s = handler.max_age_seconds or settings.max_age_seconds
                    try:
                        queued = await put_job(arq, keys, request, ctx.entry.handler_id, job_id(request, ctx.entry),
                                               max_age_s)
                    except BaseException:
                        depth.release()
                        raise
                    if queued:
                        metrics.ASYNC_JOBS.labels("queued").inc()
                    else:
                        depth.release()  # the same job is already queued (a re-delivered event)
                return
            except BusUnavailable as exc:
                delay_s = backoff.next_delay_s()
                if time.monotonic() + delay_s > give_up_at:
                    logger.warning("could not queue async hook %s of %s (%d tries): %s", ctx.entry.handler_id,
                                   request.event_id, backoff.failures, exc)
                    metrics.ASYNC_JOBS.labels("failed").inc()
                    return
                if backoff.failures == 1:
                    logger.info("queueing async hook %s: %s; retrying", ctx.entry.handler_id, exc)
                await asyncio.sleep(delay_s)

    return enqueue


__all__ = ["JOB_FUNCTION", "QueueDepth", "arq_pool", "job_id", "make_enqueue", "put_job", "replay_job_id",
           "replay_number"]
