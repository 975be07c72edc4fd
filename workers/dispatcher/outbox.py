"""Coalesces a dispatcher's writes (settled events, dead letters, acks) into pipelined round trips.

Under load, everything finished while the previous pipeline was in flight goes out in the
next one; at low load each write leaves at once. The events of a flush are settled by one
:data:`bus.stream.settle.SETTLE` call (per partition on a cluster, up to
:data:`bus.stream.settle.SETTLE_MAX_EVENTS` each), which writes each event's decision-log record,
publishes the replies (one message per gateway), queues the async hook jobs
(:mod:`workers.jobs.enqueue`) and acknowledges the entries atomically: nothing is acknowledged
before its record is stored, and the jobs are queued once. A write that fails (Redis down,
or refusing writes at ``maxmemory``) is logged and retried with backoff; its entries stay
pending meanwhile, and the script is idempotent by event id. A call Redis refuses for good
(a key of the wrong type) is re-sent one event per call, so that only the event it cannot
take stays pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as aioredis

from bus.decisionlog.chain import record_digest
from bus.errors import BusUnavailable, RedisCommandError
from bus.redis.connection import hookbus_error, redis_errors
from bus.redis.keys import DISPATCH_GROUP, Keyspace
from bus.redis.lean import LeanLink, framed_alike
from bus.redis.topology import Topology
from bus.runtime.metrics import Metrics, process_metrics
from bus.runtime.replykey import ReplyKey, key_or_process, reply_json
from bus.runtime.retry import BackgroundTask, Backoff
from bus.stream.protocol import LogRecord, Reply, Request, StreamFields
from bus.stream.settle import ANSWER, SETTLE, SETTLE_MAX_EVENTS
from workers.dispatcher.fleet import pending_entry
from workers.engine.sessions import SessionOutcome
from workers.jobs.enqueue import JobTally, PreparedJob, queue_script_args

logger = logging.getLogger("hookbus.dispatcher")

#: Above this many bytes of hook input, a record's digest is computed in a thread (7 ms per MiB).
DIGEST_INLINE_BYTES = 64 * 1024


def _digests(ops: Sequence[Settle]) -> list[str]:
    return [record_digest(op.record) for op in ops]


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
    #: The record's digest for its hash chain (:func:`bus.decisionlog.chain.record_digest`), once computed.
    digest: str = ""
    #: What the event does to its session's state, and the keys of that state and its tenant's sessions.
    session: tuple[SessionOutcome, str, str] | None = None
    #: How many times the event was decided again because its session changed (:class:`Outbox` ``on_session``).
    attempt: int = 0
    #: ``record.meta()`` and ``reply.encode()`` when the dispatcher encoded them already (its checks
    #: that they can be written), for a record and reply no longer changed: each is encoded once.
    record_meta: bytes = b""
    reply_json: bytes = b""


@dataclasses.dataclass(slots=True)
class Write:
    """A plain write: a dead letter (``fields`` set) or an acknowledgement."""

    stream: str
    entry_id: bytes = b""
    fields: StreamFields | None = None
    maxlen: int = 0


class Outbox:
    """Queued Redis writes, flushed by one background task."""

    #: Event-loop turns the writer waits before a flush for more writes to join it, while it
    #: holds fewer than :attr:`linger_events`. Off (0: a write leaves at the writer's next turn):
    #: under load a flush already carries what finished during the previous one, and waiting for
    #: more did not cut the CPU per event measurably (``bench/settle_batch.py`` sets it).
    linger_turns: int = 0
    linger_events: int = SETTLE_MAX_EVENTS

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keyspace,
        redis_url: str = "",
        on_written: Callable[[str, bytes], None] | None = None,
        on_refused: Callable[[str, bytes], None] | None = None,
        metrics: Metrics | None = None,
        *,
        on_session: Callable[[Settle, bool, bytes], None] | None = None,
        topology: Topology | None = None,
        reply_key: ReplyKey | None = None,
    ) -> None:
        """``on_written(stream, entry_id)`` is called once an entry's settlement (or its
        dead letter, or acknowledgement) is stored; ``on_refused`` when Redis refused it for
        good (not a transient error): the entry is left pending for a later claim.
        ``on_session(op, written, state)`` is called for every settle with a session part, with
        its session's state as the script returned it (:mod:`bus.session.script`): written, or
        not (the session changed since the decision: decide it again and settle it anew).
        ``topology``: the bus's (read from ``redis_url`` when not given). ``reply_key`` seals
        every reply (:mod:`bus.runtime.replykey`; the process's own when not given)."""
        self.metrics = metrics or process_metrics()
        self._reply_key = key_or_process(reply_key)
        self.redis = redis
        self._on_written = on_written
        self._on_refused = on_refused
        self._on_session = on_session
        self.keys = keys
        self.redis_url = redis_url
        self._settle_sha = redis.register_script(SETTLE).sha
        self._answer_script = redis.register_script(ANSWER)
        self.topology = topology or Topology.from_url(redis_url)
        self.clients = self.topology.partition_clients(redis, socket_timeout_s=None)
        #: The settle pipeline on a single Redis: one held connection, commands framed by hiredis
        #: (a cluster client has no pool of its own: its writes go by :meth:`_send_each`).
        self._link = None if self.topology.cluster else LeanLink(redis)
        # The script is sent by its digest (EVALSHA). A single Redis gets it loaded before the
        # first flush and after a NOSCRIPT (a restart). On a cluster each partition's first
        # settle, and its first after a NOSCRIPT (a replica promoted by a failover), is an EVAL,
        # which caches the script on that master only: SCRIPT LOAD would go to every master.
        self._preload = self.topology.preloads_scripts
        self._load_script = self._preload
        #: One settle call (and one pipeline) for every partition's events; a call per partition on a cluster.
        self._across_partitions = self.topology.settles_across_partitions
        self._loaded_partitions: set[int] = set()
        self.job_tally = JobTally(self.metrics)
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

    async def answer(self, request: Request, reply: Reply, partition: int = 0) -> bool:
        """Publish ``reply`` to the waiting gateway now, before the event's record is ready
        (:data:`bus.stream.settle.ANSWER`): its settle writes the record later. A direct call, not
        a queued write: it must not wait for a flush in flight. False when it did not answer (the
        event was settled or claimed by the gateway, its deadline passed, or Redis failed): the
        settle answers as it always does."""
        args: list[bytes | str | int] = [
            request.deadline_ms,
            self._reply_key.seal(request.meta(), request.payload, reply.encode()),
            request.reply_to,
            self.topology.reply_publish_command,
        ]
        try:
            async with asyncio.timeout(request.remaining_s()):  # past the deadline the gateway answers
                with redis_errors(self.redis_url):
                    answered = await self._answer_script(
                        [self.keys.outcome(request.event_id, partition)], args, client=self.clients.get(partition)
                    )
        except TimeoutError:  # the deadline passed: the gateway answers, and the settle records it
            return False
        except (BusUnavailable, RedisCommandError) as exc:
            self.metrics.child(self.metrics.redis_errors, "settle").inc()
            logger.warning("could not answer %s before its record (%s); its settle answers", request.event_id, exc)
            return False
        return bool(answered)

    async def answered(self, request: Request, partition: int = 0) -> Reply | None:
        """The reply :meth:`answer` gave ``request`` while its record is not written yet (a
        dispatcher stopped between the two), else None."""
        with redis_errors(self.redis_url):
            stored = await self.clients.get(partition).get(self.keys.outcome(request.event_id, partition))
        if not stored or not stored.startswith(b"P"):
            return None
        return Reply.decode(reply_json(stored[1:]))

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
        if self._link is not None:
            await self._link.aclose()
        await self.clients.aclose()
        if self._ops or self._deferred:
            # Their entries stay pending: another dispatcher claims and settles them.
            logger.warning(
                "stopping with %d unflushed writes; their entries stay pending", len(self._ops) + self._deferred
            )

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._ops:
                for _ in range(self.linger_turns):
                    if len(self._ops) >= self.linger_events:
                        break
                    await asyncio.sleep(0)
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
                    logger.warning(
                        "outbox: %d writes failed (%s); retrying in %.2fs",
                        len(failed),
                        error or self.last_error,
                        delay_s,
                    )
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

    def _settle_call(self, ops: Sequence[Settle]) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of one :data:`bus.stream.settle.SETTLE` call for ``ops``."""
        keys: list[str] = []
        # On a cluster the gateway listens on its partition's shard channel (gateway.replies.sharded).
        args: list[Any] = [DISPATCH_GROUP, self.topology.reply_publish_command]
        for op in ops:
            request, reply = op.request, op.reply
            keys += [
                self.keys.outcome(request.event_id, op.partition),
                self.keys.decision_log(op.partition),
                op.stream,
                self.keys.decision_chain(op.partition),
            ]
            args += [
                op.entry_id,
                op.log_maxlen,
                op.record_meta or op.record.meta(),
                op.record.payload,
                request.deadline_ms if request.blocking else 0,
                self._reply_key.seal(request.meta(), request.payload, op.reply_json or reply.encode())
                if reply is not None
                else b"",
                op.record.outcome,
                op.record.fail_open,
                request.fail_open,
                request.reply_to,
                op.partition,
                op.digest or record_digest(op.record),
                len(op.jobs),
                1 if op.session is not None else 0,
            ]
            if op.jobs:
                job_keys, job_args = queue_script_args(self.keys.arq_queue, op.jobs)
                keys += job_keys
                args += job_args
            if op.session is not None:
                outcome, state_key, index_key = op.session
                keys += [state_key, index_key, self.keys.fleet_pending(op.partition)]
                args += outcome.settle_args(pending_entry(request, outcome.fleet))  # tenant counts, kept until counted
        return keys, args

    def _batches(self, settles: list[Settle], max_events: int) -> list[list[Settle]]:
        """``settles`` in calls of at most ``max_events``; on a cluster, one partition's per call
        (its keys share one slot)."""
        groups: dict[int, list[Settle]] = {}
        for op in settles:
            groups.setdefault(0 if self._across_partitions else op.partition, []).append(op)
        return [
            group[first : first + max_events] for group in groups.values() for first in range(0, len(group), max_events)
        ]

    async def _send_pipelined(
        self, batches: list[list[Settle]], writes: list[Write], acks: dict[str, list[bytes]]
    ) -> list[Any]:
        calls = [self._settle_call(batch) for batch in batches]
        commands: list[list[Any]] = [
            ["EVALSHA", self._settle_sha, len(keys), *keys, *args]
            for keys, args in calls  # no SCRIPT EXISTS per flush
        ]
        for write in writes:
            fields = [part for pair in (write.fields or {}).items() for part in pair]
            commands.append(["XADD", write.stream, "MAXLEN", "~", write.maxlen, "*", *fields])
        commands += [["XACK", stream, DISPATCH_GROUP, *ids] for stream, ids in acks.items()]
        if self._link is not None and all(framed_alike(command) for command in commands):
            return await self._link.execute(commands)
        async with self.redis.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                pipe.evalsha(self._settle_sha, len(keys), *keys, *args)
            for write in writes:
                pipe.xadd(write.stream, write.fields, maxlen=write.maxlen, approximate=True)  # type: ignore[arg-type]
            for stream, ids in acks.items():
                pipe.xack(stream, DISPATCH_GROUP, *ids)
            return await pipe.execute(raise_on_error=False)

    async def _send_each(
        self, batches: list[list[Settle]], writes: list[Write], acks: dict[str, list[bytes]]
    ) -> list[Any]:
        """The writes as separate concurrent commands: a cluster pipeline cannot carry scripts
        (each command still goes to its slot's node, following a failover)."""
        calls: list[Awaitable[Any]] = []
        for batch in batches:
            keys, args = self._settle_call(batch)
            partition = batch[0].partition
            client = self.clients.get(partition)
            if partition in self._loaded_partitions:
                calls.append(client.evalsha(self._settle_sha, len(keys), *keys, *args))  # type: ignore[arg-type]
            else:
                calls.append(client.eval(SETTLE, len(keys), *keys, *args))  # type: ignore[arg-type]
        calls.extend(
            self.redis.xadd(
                write.stream,
                write.fields,  # type: ignore[arg-type]
                maxlen=write.maxlen,
                approximate=True,
            )
            for write in writes
        )
        calls.extend(self.redis.xack(stream, DISPATCH_GROUP, *ids) for stream, ids in acks.items())
        return await asyncio.gather(*calls, return_exceptions=True)

    async def _flush(self, ops: list[Settle | Write], max_events: int = SETTLE_MAX_EVENTS) -> list[Settle | Write]:
        """One pipeline; returns the writes that Redis refused (to retry)."""
        settles = [op for op in ops if isinstance(op, Settle)]
        writes = [op for op in ops if isinstance(op, Write) and op.fields is not None]
        acks: dict[str, list[bytes]] = {}
        for op in ops:
            if isinstance(op, Write) and op.fields is None:
                acks.setdefault(op.stream, []).append(op.entry_id)
        batches = self._batches(settles, max_events)
        if large := [op for op in settles if not op.digest and len(op.record.payload) > DIGEST_INLINE_BYTES]:
            # A large input's digest parses and hashes it: in a thread, not on the loop that reads and answers.
            for op, digest in zip(large, await asyncio.to_thread(_digests, large), strict=True):
                op.digest = digest
        with redis_errors(self.redis_url):
            if self._load_script:
                await self.redis.script_load(SETTLE)
                self._load_script = False
            if self._across_partitions:
                results = await self._send_pipelined(batches, writes, acks)
            else:
                results = await self._send_each(batches, writes, acks)
        # An outage (a cluster's "no node serves this slot" mid-failover too) is retried; a
        # refused command is not.
        errors = [hookbus_error(r, self.redis_url) if isinstance(r, BaseException) else None for r in results]
        failed: list[Settle | Write] = []
        refused: list[Settle] = []
        for batch, result, error in zip(batches, results, errors, strict=False):
            if isinstance(error, RedisCommandError) and error.code == "NOSCRIPT":
                self._load_script = self._preload
                self._loaded_partitions.discard(batch[0].partition)
                failed += batch
            elif error is not None:
                self.last_error = str(result)
                self.metrics.child(self.metrics.redis_errors, "settle").inc()
                if isinstance(error, BusUnavailable):
                    failed += batch
                elif len(batch) > 1:
                    refused += batch  # settled one by one below: only the culprit stays pending
                else:
                    self._refused(batch[0], error)
            else:
                self._loaded_partitions.add(batch[0].partition)
                for n, op in enumerate(batch):
                    wrote, _, queued, dropped, state = result[5 * n : 5 * n + 5]
                    if op.jobs and wrote == 1:
                        self.job_tally.count(op.request.event_id, op.jobs, int(queued), int(dropped))
                    if state and self._on_session is not None:
                        self._on_session(op, wrote != 2, state)
                    if wrote != 2 and self._on_written is not None:
                        self._on_written(op.stream, op.entry_id)
        for write, result, error in zip(writes, results[len(batches) :], errors[len(batches) :], strict=False):
            if error is not None:
                self.last_error = str(result)
                self.metrics.child(self.metrics.redis_errors, "xadd").inc()
                if isinstance(error, BusUnavailable):
                    failed.append(write)
                else:
                    self._refused(write, error)
            elif self._on_written is not None and write.entry_id:
                self._on_written(write.stream, write.entry_id)
        if any(error is not None for error in errors[len(batches) + len(writes) :]):
            failed.extend(Write(stream, entry_id) for stream, ids in acks.items() for entry_id in ids)
        elif self._on_written is not None:
            for stream, ids in acks.items():
                for entry_id in ids:
                    self._on_written(stream, entry_id)
        if refused:
            failed += await self._flush(list(refused), max_events=1)
        return failed

    def _refused(self, op: Settle | Write, error: RedisCommandError) -> None:
        # Retrying a write Redis will never take would wedge the outbox. The entry stays
        # pending: it is claimed again and, if it keeps failing, dead-lettered.
        logger.error("outbox: Redis refused a write for %s %s: %s", op.stream, op.entry_id.decode(), error)
        if self._on_refused is not None and op.entry_id:
            self._on_refused(op.stream, op.entry_id)


__all__ = ["Outbox", "Settle", "Write"]
