"""The enqueue side of async (fire-and-forget) hooks: how a dispatcher puts a job on arq.

A handler with ``async: true`` is not run by the dispatcher: the engine prepares a job for it
(:func:`prepare_job`: the record arq's own enqueue would write) and the dispatcher answers at
once. :mod:`workers.jobs.worker` is the other side, the arq worker that runs the jobs. Jobs are
serialised as JSON, never pickle: Redis content must not become code.

**Queued with the settlement.** An event's jobs are queued by the script that settles it
(:data:`bus.stream.settle.SETTLE`), in the same atomic step as its decision-log record and its
acknowledgement, and only by the settle that writes the record: a re-delivered event (a
dispatcher that died before acknowledging it) queues nothing again, and a crash leaves
either the record and the jobs or neither. The script queues a job as arq's enqueue does
(skipped while ``arq:job:<id>`` or ``arq:result:<id>`` exists). No arq result needs to be kept
to refuse a duplicate, so ``hookbus.async.keepResultSeconds`` defaults to 0: a finished job
leaves nothing behind.

**A queue on a Redis of its own.** When arq's Redis is not the bus's (a bus on a Redis
Cluster), the settle script cannot reach the queue. The dispatcher then queues an event's jobs
itself just before settling it, in one round trip (:class:`JobQueue`, the script
:data:`bus.stream.settle.QUEUE_JOBS`), retried with backoff for as long as the event allows
(:data:`ENQUEUE_PATIENCE_S`; a blocking event until its deadline less
:data:`DECISION_MARGIN_S`). That is at least once: a dispatcher that dies between the two
steps leaves its entry pending, and the event's next delivery queues the jobs again, which
runs one a second time if it has already finished, unless ``keepResultSeconds`` > 0 keeps its
result that long. Receivers de-duplicate on ``webhook-id`` (:func:`workers.outbound.webhooks.webhook_id`),
which the two runs share.

**Ids.** The job id is the event id and the handler id. A replay from the dead-letter stream
(``hookbus dlq replay``, :func:`put_job`: arq's own enqueue) is a new job, ``<id>:r<N>``, with
the same ``webhook-id``.

**Bounded.** Past ``hookbus.async.maxQueued`` jobs in the queue (its ``ZCARD``, read by the
same script), new async work is dropped and counted (``hookbus_async_jobs_total{status="dropped"}``)
rather than waited for.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Sequence
from typing import Any

import orjson
from arq.connections import ArqRedis
from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms, to_ms
from redis.asyncio import BlockingConnectionPool

from bus.errors import BusUnavailable, RedisCommandError
from bus.redis.connection import hiredis_packing, keepalive_options, redis_errors, sentinel_pool
from bus.redis.keys import Keyspace
from bus.redis.urls import is_sentinel_url, parse_sentinel_url
from bus.runtime.metrics import Metrics, process_metrics
from bus.runtime.retry import Backoff
from bus.stream.protocol import Request
from bus.stream.settle import QUEUE_JOBS

logger = logging.getLogger("hookbus.queue")

#: The arq function name of an async hook job.
JOB_FUNCTION = "run_async_hook"
#: How long the async hooks of a non-blocking event wait for a queue Redis that is down or full
#: (seconds) before they are given up. A blocking event waits until its deadline less
#: :data:`DECISION_MARGIN_S` at most: its decision must not be late. (Only with a queue on a
#: Redis of its own: otherwise the jobs are part of the settlement, retried with it.)
ENQUEUE_PATIENCE_S = 60.0
DECISION_MARGIN_S = 0.1


#: How long a queued job's definition is kept at least (arq's own default: a day); a longer
#: ``maxAgeSeconds`` keeps it that much longer, so that the worker can still dead-letter it.
MIN_JOB_LIFETIME_S = 86_400.0
#: Seconds between two warnings about dropped async work.
DROP_LOG_INTERVAL_S = 10.0
_REPLAY_SUFFIX = re.compile(r":r\d+$")


def job_id(request: Request, handler_id: str) -> str:
    """The arq job id of one async handler on one event."""
    return f"{request.event_id}:{handler_id}"


def replay_job_id(original: str, replay: int) -> str:
    """The arq job id of replay number ``replay`` (1, 2, ...) of a dead-lettered job."""
    return f"{_REPLAY_SUFFIX.sub('', original)}:r{replay}"


def replay_number(job: str) -> int:
    """Which replay a job id is (0: the original job)."""
    found = _REPLAY_SUFFIX.search(job)
    return int(found.group()[2:]) if found else 0


def job_lifetime_s(max_age_s: float) -> float:
    """How long a job's definition lives in Redis (arq's ``_expires``)."""
    return max(MIN_JOB_LIFETIME_S, max_age_s + 3600)


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedJob:
    """One async job, ready to queue: what arq's ``enqueue_job`` would write for it."""

    job_id: str
    #: arq's job record (:func:`arq.jobs.serialize_job`, as JSON).
    record: bytes
    lifetime_ms: int
    #: ``hookbus.async.maxQueued`` of the policy that selected it.
    max_queued: int


def prepare_job(
    request: Request, handler_id: str, max_age_s: float, max_queued: int, job: str | None = None
) -> PreparedJob:
    """The job of ``handler_id`` on ``request`` (id :func:`job_id` unless ``job`` is given)."""
    request = dataclasses.replace(request, reply_to="", deadline_ms=0)  # no reply: the worker has no deadline
    record = serialize_job(
        JOB_FUNCTION, (request.to_job(), handler_id), {}, None, timestamp_ms(), serializer=orjson.dumps
    )
    return PreparedJob(job or job_id(request, handler_id), record, to_ms(job_lifetime_s(max_age_s)) or 0, max_queued)


def queue_script_args(queue: str, jobs: Sequence[PreparedJob]) -> tuple[list[str], list[Any]]:
    """The KEYS and ARGV that queue ``jobs`` on ``queue`` (:data:`bus.stream.settle.QUEUE_JOBS_LUA`):
    the queue, then each job's record key and result key; each job's id, lifetime, limit, record."""
    keys = [queue]
    args: list[Any] = []
    for job in jobs:
        keys += [job_key_prefix + job.job_id, result_key_prefix + job.job_id]
        args += [job.job_id, job.lifetime_ms, job.max_queued, job.record]
    return keys, args


class JobTally:
    """Counts queued and dropped jobs; warns about drops at most every :data:`DROP_LOG_INTERVAL_S`."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics = metrics or process_metrics()
        self._dropped = 0
        self._warned_at = -DROP_LOG_INTERVAL_S

    def count(self, event_id: str, jobs: Sequence[PreparedJob], queued: int, dropped: int) -> None:
        """``queued`` and ``dropped`` of ``jobs`` (an event's), as the queueing script answered."""
        if queued:
            self.metrics.async_jobs.labels("queued").inc(queued)
        if not dropped:
            return
        self.metrics.async_jobs.labels("dropped").inc(dropped)
        self._dropped += dropped
        now = time.monotonic()
        if now - self._warned_at >= DROP_LOG_INTERVAL_S:
            limit = min(job.max_queued for job in jobs) if jobs else 0
            logger.warning(
                "async queue holds %d jobs or more (hookbus.async.maxQueued): dropped %d async hook "
                "run(s), the last of event %s",
                limit,
                self._dropped,
                event_id,
            )
            self._dropped, self._warned_at = 0, now


async def put_job(arq: ArqRedis, keys: Keyspace, request: Request, handler_id: str, job: str, max_age_s: float) -> bool:
    """Queue one async job with arq's own enqueue (``hookbus dlq replay``); False when a job with
    this id is queued, running, or its result is kept (``keepResultSeconds``)."""
    request = dataclasses.replace(request, reply_to="", deadline_ms=0)  # no reply: the worker has no deadline
    try:
        with redis_errors():
            queued = await arq.enqueue_job(
                JOB_FUNCTION,
                request.to_job(),
                handler_id,
                _job_id=job,
                _queue_name=keys.arq_queue,
                _expires=job_lifetime_s(max_age_s),
            )
    except RedisCommandError as exc:
        if exc.code != "WATCH":
            raise
        # redis-py's word for "the connection died while the transaction watched the job's key",
        # raised before arq's own handling: a connection problem, retried as one.
        raise BusUnavailable(f"the job was not queued: {exc}") from exc
    if queued is not None:
        return True
    # arq answers None for "this id exists", and also when the connection died at EXEC (the
    # WatchError it catches there): only the first is a duplicate.
    with redis_errors():
        if await arq.exists(job_key_prefix + job, result_key_prefix + job):
            return False
    raise BusUnavailable("the job was not queued: the connection dropped during the transaction")


class JobQueue:
    """Queues an event's jobs on a queue Redis that is not the bus's (see the module docstring)."""

    def __init__(self, arq: ArqRedis, keys: Keyspace, redis_url: str = "", metrics: Metrics | None = None) -> None:
        self.arq = arq
        self.keys = keys
        self.redis_url = redis_url
        self.metrics = metrics or process_metrics()
        self.tally = JobTally(self.metrics)
        self._script = arq.register_script(QUEUE_JOBS)

    async def put(self, request: Request, jobs: Sequence[PreparedJob]) -> None:
        """Queue ``jobs`` (one round trip), retrying a Redis that is down or full as long as
        ``request`` allows; what cannot be queued by then is counted as failed."""
        if not jobs:
            return
        patience_s = request.remaining_s() - DECISION_MARGIN_S if request.blocking else ENQUEUE_PATIENCE_S
        give_up_at = time.monotonic() + patience_s
        keys, args = queue_script_args(self.keys.arq_queue, jobs)
        backoff = Backoff()
        while True:
            try:
                with redis_errors(self.redis_url):
                    queued, dropped = await self._script(keys=keys, args=args)
                self.tally.count(request.event_id, jobs, int(queued), int(dropped))
                return
            except BusUnavailable as exc:
                delay_s = backoff.next_delay_s()
                if time.monotonic() + delay_s > give_up_at:
                    logger.warning(
                        "could not queue %d async hook job(s) of %s (%d tries): %s",
                        len(jobs),
                        request.event_id,
                        backoff.failures,
                        exc,
                    )
                    self.metrics.async_jobs.labels("failed").inc(len(jobs))
                    return
                if backoff.failures == 1:
                    logger.info("queueing the async hooks of %s: %s; retrying", request.event_id, exc)
                await asyncio.sleep(delay_s)


#: Connections one process may open for arq (the worker's jobs, ``hookbus dlq replay``, the
#: dispatcher's :class:`JobQueue`); an unbounded pool grows with every burst.
MAX_CONNECTIONS = 8


def arq_pool(redis_url: str, max_connections: int = MAX_CONNECTIONS) -> ArqRedis:
    """An arq connection that (de)serialises jobs as JSON, over a bounded connection pool.

    ``redis_url`` is a single Redis's (``redis://``, ``rediss://``, ``unix://``) or a Sentinel
    URL (``redis+sentinel://``, :mod:`bus.redis.urls`): then the master its Sentinels name.
    """
    # No socket timeout: it would cost a task and two timers per command (one worker drains 24-40 %
    # more jobs/s without it, ``bench/async_burst.py``); TCP keepalive notices a vanished Redis.
    options: dict[str, Any] = {
        "max_connections": max_connections,
        "timeout": 2.0,
        "socket_connect_timeout": 1.0,
        "socket_timeout": None,
        **keepalive_options(redis_url),
    }
    connections: BlockingConnectionPool
    if is_sentinel_url(redis_url):
        connections = sentinel_pool(parse_sentinel_url(redis_url), **options)
    else:
        connections = BlockingConnectionPool.from_url(redis_url, **options)
    connections.connection_class = hiredis_packing(connections.connection_class)
    pool = ArqRedis(connection_pool=connections)
    pool.auto_close_connection_pool = True  # the client owns (and closes) the pool
    pool.job_serializer = orjson.dumps
    pool.job_deserializer = orjson.loads
    return pool


__all__ = [
    "DECISION_MARGIN_S",
    "ENQUEUE_PATIENCE_S",
    "JOB_FUNCTION",
    "JobQueue",
    "JobTally",
    "PreparedJob",
    "arq_pool",
    "job_id",
    "job_lifetime_s",
    "prepare_job",
    "put_job",
    "queue_script_args",
    "replay_job_id",
    "replay_number",
]
