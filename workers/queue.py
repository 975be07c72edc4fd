"""The enqueue side of async (fire-and-forget) hooks: how a dispatcher puts a job on arq.

A handler with ``async: true`` is not run by the dispatcher: the dispatcher enqueues a job
(id = event id + handler id, so a re-delivered event does not run it twice) and answers at
once. :mod:`workers.tasks` is the other side, the arq worker that runs the jobs. Jobs are
serialised as JSON, never pickle: Redis content must not become code.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
from arq.connections import ArqRedis
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


def job_id(request: Request, entry: HandlerEntry) -> str:
    return f"{request.event_id}:{entry.handler_id}"


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

    async def enqueue(ctx: HookContext) -> None:
        # The event is settled (logged and acknowledged) right after this: a job not queued
        # now is lost for good. So a Redis that is down or full is retried with backoff; the
        # event's entry stays pending meanwhile (claimed elsewhere if this dispatcher dies).
        request = ctx.request
        patience_s = request.remaining_s() - DECISION_MARGIN_S if request.blocking else ENQUEUE_PATIENCE_S
        give_up_at = time.monotonic() + patience_s
        backoff = Backoff()
        while True:
            try:
                with redis_errors():
                    await arq.enqueue_job(JOB_FUNCTION, request.to_job(), ctx.entry.handler_id,
                                          _job_id=job_id(request, ctx.entry), _queue_name=keys.arq_queue)
                metrics.ASYNC_JOBS.labels("queued").inc()
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


__all__ = ["JOB_FUNCTION", "arq_pool", "job_id", "make_enqueue"]
