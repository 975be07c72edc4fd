"""The enqueue side of async (fire-and-forget) hooks: how a dispatcher puts a job on arq.

A handler with ``async: true`` is not run by the dispatcher: the dispatcher enqueues a job
(id = event id + handler id, so a re-delivered event does not run it twice) and answers at
once. :mod:`workers.tasks` is the other side, the arq worker that runs the jobs. Jobs are
serialised as JSON, never pickle: Redis content must not become code.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from arq.connections import ArqRedis

from bus import metrics
from bus.connection import redis_errors
from bus.errors import BusUnavailable
from bus.keys import Keyspace
from bus.policy import HandlerEntry
from bus.protocol import Request
from workers.context import HookContext

logger = logging.getLogger("hookbus.queue")

#: The arq function name of an async hook job.
JOB_FUNCTION = "run_async_hook"


def job_id(request: Request, entry: HandlerEntry) -> str:
    return f"{request.event_id}:{entry.handler_id}"


def arq_pool(redis_url: str) -> ArqRedis:
    """An arq connection that (de)serialises jobs as JSON."""
    # from_url, so that the client owns (and closes) its connection pool.
    pool: ArqRedis = ArqRedis.from_url(redis_url, socket_connect_timeout=1.0)
    pool.job_serializer = orjson.dumps
    pool.job_deserializer = orjson.loads
    return pool


def make_enqueue(arq: ArqRedis, keys: Keyspace) -> Any:
    """The dispatcher's ``enqueue`` callback for async handlers."""

    async def enqueue(ctx: HookContext) -> None:
        try:
            with redis_errors():
                await arq.enqueue_job(JOB_FUNCTION, ctx.request.to_job(), ctx.entry.handler_id,
                                      _job_id=job_id(ctx.request, ctx.entry), _queue_name=keys.arq_queue)
            metrics.ASYNC_JOBS.labels("queued").inc()
        except BusUnavailable as exc:
            logger.warning("could not queue async hook %s: %s", ctx.entry.handler_id, exc)
            metrics.ASYNC_JOBS.labels("failed").inc()

    return enqueue


__all__ = ["JOB_FUNCTION", "arq_pool", "job_id", "make_enqueue"]
