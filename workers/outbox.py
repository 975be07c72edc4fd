"""Coalesces a dispatcher's writes (settled events, dead letters, acks) into pipelined round trips.

Under load, everything finished while the previous pipeline was in flight goes out in the
next one; at low load each write leaves at once. Each event is settled by one
:data:`bus.settle.SETTLE` script, which writes its decision-log record, publishes its reply,
queues its async hook jobs (:mod:`workers.queue`) and acknowledges its entry atomically:
nothing is acknowledged before its record is stored, and the jobs are queued once.
A write that fails (Redis down, or refusing writes at ``maxmemory``) is logged and retried
with backoff; its entry stays pending meanwhile, and the script is idempotent by event id.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions

from bus import metrics
from bus.connection import PartitionClients, is_cluster, is_transient, redis_errors
from bus.errors import BusUnavailable
from bus.keys import DISPATCH_GROUP, Keyspace
from bus.protocol import LogRecord, Reply, Request, StreamFields
from bus.retry import BackgroundTask, Backoff
from bus.settle import SETTLE
from workers.queue import JobTally, PreparedJob, queue_script_args

logger = logging.getLogger("hookbus.dispatcher")


@dataclasses.dataclass(slots=True)
class Settle:
    """Write ``record``, answer ``request`` with ``reply`` (if in time), acknowledge the entry."""

    stream: str
    entry_id: bytes
    request: Request
    record: LogRecord
    reply: Reply | None
    log_maxlen: int
    #: The event's async hook jobs, queued by the settle that writes the record (none when the
    #: dispatcher queued them itself, on a queue Redis of its own).
    jobs: Sequence[PreparedJob] = ()
    #: The partition of ``stream`` (its outcome key and decision log are the partition's).
    partition: int = 0


@dataclasses.dataclass(slots=True)
class Write:
    """A plain write: a dead letter (``fields`` set) or an acknowledgement."""

    stream: str
    entry_id: bytes = b""
    fields: StreamFields | None = None
    maxlen: int = 0


class Outbox:
    """Queued Redis writes, flushed by one background task."""

    def __init__(self, redis: aioredis.Redis, keys: Keyspace, redis_url: str = "",
                 on_written: Callable[[str, bytes], None] | None = None,
                 on_refused: Callable[[str, bytes], None] | None = None) -> None:
        """``on_written(stream, entry_id)`` is called once an entry's settlement (or its
        dead letter, or acknowledgement) is stored; ``on_refused`` when Redis refused it for
        good (not a transient error): the entry is left pending for a later claim."""
        self.redis = redis
        self._on_written = on_written
        self._on_refused = on_refused
        self.keys = keys
        self.redis_url = redis_url
        self._settle_sha = redis.register_script(SETTLE).sha
        self.clients = PartitionClients(redis, redis_url, socket_timeout_s=None)
        # The script is sent by its digest (EVALSHA). A single Redis gets it loaded before the
        # first flush and after a NOSCRIPT (a restart). On a cluster each partition's first
        # settle, and its first after a NOSCRIPT (a replica promoted by a failover), is an EVAL,
        # which caches the script on that master only: SCRIPT LOAD would go to every master.
        self._cluster = is_cluster(redis)
        self._load_script = not self._cluster
        self._loaded_partitions: set[int] = set()
        self.job_tally = JobTally()
        self._ops: list[Settle | Write] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task = BackgroundTask(self._run, "hookbus-outbox")
        self._backoff = Backoff()
        #: Writes that failed, waiting for their retry.
        self._deferred = 0
        #: The last error Redis answered a write with.
        self.last_error = ""

    def settle(self, op: Settle) -> None:
        self._push(op)

    def ack(self, stream: str, entry_id: bytes) -> None:
        self._push(Write(stream, entry_id))

    def xadd(self, stream: str, fields: StreamFields, maxlen: int) -> None:
        self._push(Write(stream, fields=fields, maxlen=maxlen))

    def __len__(self) -> int:
        return len(self._ops) + self._deferred

    def _push(self, op: Settle | Write) -> None:
        self._ops.append(op)
        self._idle.clear()
        self._wake.set()

    async def start(self) -> None:
        self._task.start()

    async def flushed(self) -> None:
        await self._idle.wait()

    async def stop(self, timeout_s: float = 5.0) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self.flushed()
        await self._task.stop()
        await self.clients.aclose()
        if self._ops or self._deferred:
            # Their entries stay pending: another dispatcher claims and settles them.
            logger.warning("stopping with %d unflushed writes; their entries stay pending",
                           len(self._ops) + self._deferred)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._ops:
                ops, self._ops = self._ops, []
                error: BusUnavailable | None = None
                try:
                    failed = await self._flush(ops)
                except BusUnavailable as exc:
                    failed, error = ops, exc
                except Exception:
                    # Never let the one writer task die: its entries stay unacknowledged, so
                    # they are claimed again later (and dead-lettered if they keep failing).
                    logger.exception("outbox: %d writes could not be sent; their entries stay pending", len(ops))
                    failed = []
                if failed:
                    # Only the failed writes wait: on a cluster, the other partitions' go on.
                    delay_s = self._backoff.next_delay_s()
                    logger.warning("outbox: %d writes failed (%s); retrying in %.2fs", len(failed),
                                   error or self.last_error, delay_s)
                    self._deferred += len(failed)
                    asyncio.get_running_loop().call_later(delay_s, self._retry, failed)
                else:
                    self._backoff.reset()
            if not self._deferred:
                self._idle.set()

    def _retry(self, ops: list[Settle | Write]) -> None:
        self._deferred -= len(ops)
        self._ops = ops + self._ops
        self._idle.clear()
        self._wake.set()

    def _settle_args(self, op: Settle) -> tuple[list[str], list[Any]]:
        request, reply = op.request, op.reply
        keys = [self.keys.outcome(request.event_id, op.partition), self.keys.decision_log(op.partition), op.stream]
        args: list[Any] = [
            op.entry_id, DISPATCH_GROUP, op.log_maxlen, op.record.meta(), op.record.payload,
            request.deadline_ms if request.blocking else 0,
            reply.encode() if reply is not None else b"",
            op.record.outcome, op.record.fail_open, request.fail_open, request.reply_to,
            # On a cluster the gateway listens on its partition's shard channel (gateway.shardreplies).
            "SPUBLISH" if self._cluster else "PUBLISH",
        ]
        if op.jobs:
            job_keys, job_args = queue_script_args(self.keys.arq_queue, op.jobs)
            keys += job_keys
            args += job_args
        return keys, args

    async def _send_pipelined(self, sent: list[Settle | Write], acks: dict[str, list[bytes]]) -> list[Any]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for op in sent:
                if isinstance(op, Settle):
                    keys, args = self._settle_args(op)
                    pipe.evalsha(self._settle_sha, len(keys), *keys, *args)  # no SCRIPT EXISTS per flush
                else:
                    pipe.xadd(op.stream, op.fields, maxlen=op.maxlen, approximate=True)  # type: ignore[arg-type]
            for stream, ids in acks.items():
                pipe.xack(stream, DISPATCH_GROUP, *ids)
            return await pipe.execute(raise_on_error=False)

    async def _send_each(self, sent: list[Settle | Write], acks: dict[str, list[bytes]]) -> list[Any]:
        """The writes as separate concurrent commands: a cluster pipeline cannot carry scripts
        (each command still goes to its slot's node, following a failover)."""
        calls: list[Awaitable[Any]] = []
        for op in sent:
            if isinstance(op, Settle):
                keys, args = self._settle_args(op)
                client = self.clients.get(op.partition)
                if op.partition in self._loaded_partitions:
                    calls.append(client.evalsha(self._settle_sha, len(keys), *keys, *args))  # type: ignore[arg-type]
                else:
                    calls.append(client.eval(SETTLE, len(keys), *keys, *args))  # type: ignore[arg-type]
            else:
                calls.append(self.redis.xadd(op.stream, op.fields, maxlen=op.maxlen,  # type: ignore[arg-type]
                                             approximate=True))
        calls.extend(self.redis.xack(stream, DISPATCH_GROUP, *ids) for stream, ids in acks.items())
        results = await asyncio.gather(*calls, return_exceptions=True)
        # "No node serves this slot" (mid-failover) is not a RedisError: retried like one.
        return [redis.exceptions.ConnectionError(str(r)) if isinstance(r, redis.exceptions.RedisClusterException)
                else r for r in results]

    async def _flush(self, ops: list[Settle | Write]) -> list[Settle | Write]:
        """One pipeline; returns the writes that Redis refused (to retry)."""
        with redis_errors(self.redis_url):
            if self._load_script:
                await self.redis.script_load(SETTLE)
                self._load_script = False
            acks: dict[str, list[bytes]] = {}
            sent = [op for op in ops if isinstance(op, Settle) or op.fields is not None]
            for op in ops:
                if not isinstance(op, Settle) and op.fields is None:
                    acks.setdefault(op.stream, []).append(op.entry_id)
            if self._cluster:
                results = await self._send_each(sent, acks)
            else:
                results = await self._send_pipelined(sent, acks)
        failed: list[Settle | Write] = []
        for op, result in zip(sent, results, strict=False):
            if isinstance(result, redis.exceptions.NoScriptError):
                self._load_script = not self._cluster
                if isinstance(op, Settle):
                    self._loaded_partitions.discard(op.partition)
                failed.append(op)
            elif isinstance(result, redis.exceptions.RedisError):
                self.last_error = str(result)
                metrics.child(metrics.REDIS_ERRORS, "settle" if isinstance(op, Settle) else "xadd").inc()
                if is_transient(result):
                    failed.append(op)
                else:
                    # Retrying a write Redis will never take would wedge the outbox. The entry
                    # stays pending: it is claimed again and, if it keeps failing, dead-lettered.
                    logger.error("outbox: Redis refused a write for %s %s: %s", op.stream, op.entry_id.decode(),
                                 result)
                    if self._on_refused is not None and op.entry_id:
                        self._on_refused(op.stream, op.entry_id)
            else:
                if isinstance(op, Settle):
                    self._loaded_partitions.add(op.partition)
                if isinstance(op, Settle) and op.jobs and isinstance(result, list) and result[0] == 1:
                    self.job_tally.count(op.request.event_id, op.jobs, int(result[2]), int(result[3]))
                if self._on_written is not None and op.entry_id:
                    self._on_written(op.stream, op.entry_id)
        if any(isinstance(result, redis.exceptions.RedisError) for result in results[len(sent):]):
            failed.extend(Write(stream, entry_id) for stream, ids in acks.items() for entry_id in ids)
        elif self._on_written is not None:
            for stream, ids in acks.items():
                for entry_id in ids:
                    self._on_written(stream, entry_id)
        return failed


__all__ = ["Outbox", "Settle", "Write"]
