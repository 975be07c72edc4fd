"""A dispatcher's side of the work streams: read, claim, dead-letter, heartbeat, trim.

The dispatcher (:mod:`workers.dispatcher.answering`) decides what each entry means; this module keeps
the consumer group working under it. It reads new entries with XREADGROUP on a connection of
its own, so that a stop wakes the blocked read at once with CLIENT UNBLOCK. Entries left
pending by a dead dispatcher are claimed with XAUTOCLAIM; entries delivered too often go to
the dead-letter stream. A live dispatcher keeps its own in-flight entries fresh (XCLAIM
JUSTID resets their idle time) so that a slow hook is never claimed, and run twice, by anyone
else. Settled entries are trimmed from the work streams within seconds (they are queues,
not logs), and the decision log is trimmed to its retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis

from bus.errors import BusUnavailable, ConfigError, ProtocolError, RedisCommandError
from bus.policy.schema import DecisionLogSettings
from bus.redis.connection import read_streams, redis_errors
from bus.redis.entries import entry_order
from bus.redis.keys import DEAD_LETTER_MAXLEN, DISPATCH_GROUP, Keyspace
from bus.redis.lean import LeanLink
from bus.redis.topology import Topology
from bus.runtime.metrics import Metrics, process_metrics
from bus.runtime.retry import Backoff
from bus.runtime.settings import Settings
from bus.stream.partitions import claim_layout
from bus.stream.protocol import Request, StreamFields, now_ms
from workers.dispatcher.outbox import Outbox

logger = logging.getLogger("hookbus.dispatcher")

_HEARTBEAT_S = 2.0
_READ_BLOCK_MS = 1000


def _fields(pairs: list[bytes] | None) -> dict[bytes, bytes] | None:
    """An entry's ``[field, value, ...]`` as a dict (None for an entry deleted while pending)."""
    return None if pairs is None else dict(zip(pairs[::2], pairs[1::2], strict=True))


#: How long a stopping dispatcher waits to unregister itself (its heartbeat ages out anyway).
_CLOSE_TIMEOUT_S = 1.0

#: Starts handling one entry (the dispatcher's).
Spawn = Callable[[str, bytes, Mapping[bytes, bytes]], Awaitable[None]]


class WorkStreams:
    """The consumer group's mechanics for one dispatcher (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        keys: Keyspace,
        redis: aioredis.Redis,
        redis_url: str,
        outbox: Outbox,
        consumer: str,
        *,
        spawn: Spawn,
        redact: Callable[[StreamFields], StreamFields],
        retention: Callable[[], DecisionLogSettings],
        metrics: Metrics | None = None,
        topology: Topology | None = None,
    ) -> None:
        """``topology``: the bus's (read from ``redis_url`` when not given)."""
        self.metrics = metrics or process_metrics()
        self.topology = topology or Topology.from_url(redis_url)
        self.settings = settings
        self.keys = keys
        self.redis = redis
        self.redis_url = redis_url
        self.outbox = outbox
        self.consumer = consumer
        self.spawn = spawn
        self.redact = redact
        self.retention = retention
        #: The partitions this dispatcher consumes, and the partition of each of their streams.
        self.partitions = consumed_partitions(settings, keys)
        self.partition = keys.work_streams(self.partitions)
        self.names = tuple(self.partition)
        #: Entry ids being handled right now, per stream (kept fresh until settled).
        self.inflight: dict[str, set[bytes]] = {stream: set() for stream in self.names}
        #: What ended the janitor, if it ended while the dispatcher runs (then it is not ready).
        self.janitor_failed: BaseException | None = None
        self.reader_name = f"hookbus-reader-{uuid.uuid4().hex[:12]}"
        self.reader = self.topology.connect(socket_timeout_s=None, client_name=self.reader_name)
        self.readers = self.topology.partition_clients(self.reader, socket_timeout_s=None, client_name=self.reader_name)
        #: A single Redis: the reads framed by hiredis on the reader's held connection (:mod:`bus.redis.lean`).
        self._link = None if self.topology.cluster else LeanLink(self.reader)
        #: A single Redis: one read group, whose blocked read CLIENT UNBLOCK can end.
        self._unblockable = self.topology.reads_every_stream_at_once
        # One XREADGROUP names streams of one slot only on a cluster: a read per partition there.
        self._read_groups = (
            [list(self.names)]
            if self._unblockable
            else [[keys.blocking_stream(p), keys.events_stream(p)] for p in self.partitions]
        )
        self._reads: dict[int, asyncio.Task[list[Any]]] = {}
        self._groups_ready: set[int] = set()
        self._backoffs = [Backoff(cap_s=1.0) for _ in self._read_groups]
        #: The bound of the read in flight: shortened at stop, in case Redis does not answer.
        self._read_deadline: asyncio.Timeout | None = None

    def settled(self, stream: str, entry_id: bytes) -> None:
        """``entry_id`` is settled (or given up here): stop keeping it fresh."""
        self.inflight[stream].discard(entry_id)

    async def close(self) -> None:
        with contextlib.suppress(Exception):  # TimeoutError too: a Redis that stopped answering
            async with asyncio.timeout(_CLOSE_TIMEOUT_S):  # must not hold the way out
                await self.redis.hdel(self.keys.dispatchers, self.consumer)  # type: ignore[misc]
        if self._link is not None:
            await self._link.aclose()
        await self.readers.aclose()
        await self.reader.aclose()

    async def ensure_groups(self, streams: Sequence[str] | None = None) -> None:
        """Create the consumer group of ``streams`` (all of this dispatcher's by default)."""
        with redis_errors(self.redis_url):
            await claim_layout(self.redis, self.keys)  # ConfigError when the bus has another partition count
        for stream in streams or self.names:
            try:
                with redis_errors(self.redis_url):
                    await self.redis.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True)
            except RedisCommandError as exc:
                if exc.code != "BUSYGROUP":
                    raise

    async def read(self, stop: asyncio.Event) -> list[tuple[str, bytes, Mapping[bytes, bytes]]]:
        """The next batch of new entries (waiting out Redis outages); empty once ``stop`` is set.

        Each read group (all streams on one Redis; one partition's on a cluster) reads, and
        waits out its own outage, on its own: a failed-over master holds up its partitions only.
        """
        if self._unblockable:
            # The read itself, without a task or a stop waiter around it (each turn of those costs
            # more than the read): wake_reader ends a blocked read with CLIENT UNBLOCK.
            while not stop.is_set():
                if found := await self._read_group(0, self._read_groups[0], stop):
                    return self._entries(found)
            return []
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                for index, streams in enumerate(self._read_groups):
                    if index not in self._reads:
                        self._reads[index] = asyncio.create_task(self._read_group(index, streams, stop))
                done, _ = await asyncio.wait([stopping, *self._reads.values()], return_when=asyncio.FIRST_COMPLETED)
                response: list[Any] = []
                for index, task in list(self._reads.items()):
                    if task in done:
                        del self._reads[index]
                        response.extend(task.result())  # ConfigError (another layout) ends the dispatcher
                if response:
                    return self._entries(response)
        finally:
            stopping.cancel()
        # On a cluster CLIENT UNBLOCK cannot find the reads: what they had read stays pending and
        # is claimed by another dispatcher.
        self.cancel_reads()
        return []

    def _entries(self, response: list[Any]) -> list[tuple[str, bytes, Mapping[bytes, bytes]]]:
        self.metrics.dispatch_batch.observe(sum(len(entries) for _, entries in response))
        return [(stream.decode(), entry_id, fields) for stream, entries in response for entry_id, fields in entries]

    async def _read_group(self, index: int, streams: list[str], stop: asyncio.Event) -> list[Any]:
        """One read of one group's streams, retried with backoff until Redis answers (or ``stop``)."""
        backoff = self._backoffs[index]
        while not stop.is_set():
            try:
                if index not in self._groups_ready:
                    await self.ensure_groups(streams)
                    self._groups_ready.add(index)
                with redis_errors(self.redis_url):
                    async with asyncio.timeout(_READ_BLOCK_MS / 1000 + 5) as self._read_deadline:
                        response = await self._read(index, streams)
                backoff.reset()
                return list(response or [])
            except (BusUnavailable, TimeoutError) as exc:
                if backoff.failures == 0:
                    logger.warning("%s; retrying", exc)
                self.metrics.child(self.metrics.redis_errors, "read").inc()
                self._groups_ready.discard(index)
                await backoff.wait(stop)
            except RedisCommandError as exc:
                if exc.code != "NOGROUP":  # else the stream was deleted under us: create it again
                    raise
                self._groups_ready.discard(index)
        return []

    async def _read(self, index: int, streams: list[str]) -> Any:
        """One ``XREADGROUP`` of ``streams``: ``[(stream, [(entry id, fields)])]``, as redis-py reads it."""
        if self._link is None:
            return await read_streams(
                self.readers.get(index),
                dict.fromkeys(streams, ">"),
                group=DISPATCH_GROUP,
                consumer=self.consumer,
                count=self.settings.dispatch_batch,
                block_ms=_READ_BLOCK_MS,
            )
        count, block = self.settings.dispatch_batch, _READ_BLOCK_MS
        group: list[bytes | str | int] = [
            "XREADGROUP",
            "GROUP",
            DISPATCH_GROUP,
            self.consumer,
            "COUNT",
            count,
            "BLOCK",
            block,
        ]
        (reply,) = await self._link.execute([[*group, "STREAMS", *streams, *(">" for _ in streams)]])
        if isinstance(reply, Exception):  # an error reply (NOGROUP): raised as redis-py raises it
            raise reply
        return [
            (stream, [(entry_id, _fields(pairs)) for entry_id, pairs in entries]) for stream, entries in reply or ()
        ]

    def cancel_reads(self) -> None:
        """Stop the reads in flight (on a cluster, where CLIENT UNBLOCK cannot find them: what
        they had read stays pending and is claimed by another dispatcher)."""
        for task in self._reads.values():
            task.cancel()
        self._reads.clear()

    async def wake_reader(self, stop: asyncio.Event) -> None:
        """Once stopping, unblock this dispatcher's XREADGROUP (repeatedly: it may not block yet)."""
        await stop.wait()
        if not self._unblockable:
            self.cancel_reads()
            return
        if self._read_deadline is not None:
            # The read returns what it has once unblocked; one that Redis does not answer (frozen,
            # or the unblock lost) gives up soon, and what it read stays pending for a claim.
            with contextlib.suppress(RuntimeError):  # no read in flight
                grace = asyncio.get_running_loop().time() + _READ_BLOCK_MS / 1000 + 0.5
                self._read_deadline.reschedule(min(self._read_deadline.when() or grace, grace))
        while True:
            with contextlib.suppress(Exception):
                for client in await self.redis.client_list():
                    if client.get("name") == self.reader_name:
                        await self.redis.client_unblock(int(client["id"]))
            await asyncio.sleep(0.05)

    async def dead_letter(self, stream: str, entry_id: bytes, fields: Mapping[bytes, bytes], why: str) -> None:
        logger.warning("dead-lettering %s %s: %s", stream, entry_id.decode(), why)
        self.metrics.dead_letters.labels(stream.rsplit(":", 1)[-1]).inc()
        # Whatever the entry holds (it may not be hookbus's), moving it aside must not fail.
        readable: StreamFields = {k.decode("utf-8", "replace"): v for k, v in fields.items()}
        if b"m" in fields:
            with contextlib.suppress(ProtocolError):  # an event's metadata, spelled out for whoever reads it
                readable = Request.decode(fields).named_fields()
        try:
            dead: StreamFields = self.redact({**readable, "_stream": stream, "_id": entry_id, "_why": why})
        except Exception as exc:  # masking must not keep a poison entry in place: keep a note instead
            logger.error(
                "dead letter %s %s cannot be masked (%s); its payload is not kept",
                stream,
                entry_id.decode(),
                type(exc).__name__,
            )
            dead = {
                "_stream": stream,
                "_id": entry_id,
                "_why": why,
                "_note": f"the entry could not be masked ({type(exc).__name__}); its fields are not kept",
            }
        self.outbox.xadd(self.keys.dead_letter_stream(self.partition[stream]), dead, DEAD_LETTER_MAXLEN)
        self.outbox.ack(stream, entry_id)

    async def heartbeat(self, stop: asyncio.Event) -> None:
        """Say this dispatcher is alive, every few seconds, while its janitor is (``/readyz`` counts them)."""
        while not stop.is_set():
            with contextlib.suppress(BusUnavailable, RedisCommandError):
                with redis_errors():
                    if self.janitor_failed is None:
                        await self.redis.hset(self.keys.dispatchers, self.consumer, str(now_ms()))  # type: ignore[misc]
                    else:  # nothing claims, trims or keeps entries fresh here: not ready
                        await self.redis.hdel(self.keys.dispatchers, self.consumer)  # type: ignore[misc]
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_HEARTBEAT_S):
                    await stop.wait()

    async def janitor(self, stop: asyncio.Event) -> None:
        """Keep in-flight entries fresh; claim entries a dead dispatcher left pending; trim the log.

        Runs until cancelled: once ``stop`` is set it only refreshes the entries still draining.
        An unexpected error is logged and the janitor goes on; should it end anyway, the
        heartbeat stops and the dispatcher no longer counts as ready.
        """
        try:
            await self._janitor(stop)
        except Exception as exc:
            self.janitor_failed = exc
            logger.critical("janitor stopped: %s: %s; this dispatcher is no longer ready", type(exc).__name__, exc)
            raise

    async def _janitor(self, stop: asyncio.Event) -> None:
        interval_s = max(0.05, self.settings.claim_idle_ms / 4000)
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval_s):
                    await stop.wait()
            try:
                await self.refresh_inflight()
                if stop.is_set():
                    await asyncio.sleep(interval_s)
                    continue
                for stream in self.names:
                    await self.claim(stream)
                    await self.trim_acknowledged(stream)
                await self.trim_log()
            except (BusUnavailable, RedisCommandError) as exc:
                logger.debug("janitor: %s", exc)
            except Exception:  # a bug or a poison entry must not end the claiming, trimming and refreshing
                logger.exception("janitor: unexpected error; going on")

    async def refresh_inflight(self) -> None:
        """Reset the idle time of the entries this dispatcher is handling (XCLAIM JUSTID).

        A hook may run far longer than ``claim_idle_ms``; without this its entry would look
        abandoned and be claimed, and run again, by another dispatcher or by this one.
        JUSTID leaves the delivery counter alone.
        """
        with redis_errors(self.redis_url):
            for stream, ids in self.inflight.items():
                if ids:
                    await self.redis.xclaim(stream, DISPATCH_GROUP, self.consumer, 0, list(ids), justid=True)

    async def claim(self, stream: str) -> int:
        """Take over entries idle longer than ``claim_idle_ms``; returns how many.

        XAUTOCLAIM JUSTID moves the idle entries to this consumer; each is then read with an
        XCLAIM of its own, which counts the delivery. One XCLAIM per id because Redis 6.2
        answers an entry deleted (trimmed) while pending with a nil that carries no id; such
        entries are acknowledged here (Redis 7 drops them from the pending list itself).
        """
        with redis_errors(self.redis_url):
            ids: list[bytes] = await self.redis.xautoclaim(
                stream, DISPATCH_GROUP, self.consumer, self.settings.claim_idle_ms, "0-0", count=100, justid=True
            )
            ids = [entry_id for entry_id in ids if entry_id not in self.inflight[stream]]
            if not ids:
                return 0
            async with self.redis.pipeline(transaction=False) as pipe:
                for entry_id in ids:
                    pipe.xclaim(stream, DISPATCH_GROUP, self.consumer, 0, [entry_id])
                answers = await pipe.execute()
            pending = await self.redis.xpending_range(
                stream,
                DISPATCH_GROUP,
                min=min(ids),
                max=max(ids),
                count=len(ids) + 100,
                consumername=self.consumer,
            )
        deliveries = {p["message_id"]: p["times_delivered"] for p in pending}
        for entry_id, answer in zip(ids, answers, strict=True):
            if not answer:  # acknowledged meanwhile, or deleted and dropped from the PEL (Redis 7)
                continue
            fields = answer[0][1]
            if fields is None:  # deleted from the stream (trimmed) while pending (Redis 6.2)
                logger.warning("dropping %s %s: deleted from the stream while pending", stream, entry_id.decode())
                self.outbox.ack(stream, entry_id)
                continue
            if deliveries.get(entry_id, 0) > self.settings.max_deliveries:
                why = f"delivered more than {self.settings.max_deliveries} times"
                await self.dead_letter(stream, entry_id, fields, why)
                continue
            logger.info("claimed %s %s from a dead dispatcher", stream, entry_id.decode())
            await self.spawn(stream, entry_id, fields)
        return len(ids)

    async def trim_acknowledged(self, stream: str) -> None:
        """Drop entries every consumer is done with: work streams are queues, not logs.

        Everything older than the oldest pending entry and already delivered to the group
        has been settled (its record is in the decision log), so it can go.
        """
        with redis_errors(self.redis_url):
            summary = await self.redis.xpending(stream, DISPATCH_GROUP)
            if summary["pending"]:
                min_id = summary["min"]
            else:
                groups = await self.redis.xinfo_groups(stream)
                group = next((g for g in groups if g["name"] == DISPATCH_GROUP.encode()), None)
                if group is None:
                    return
                last = group["last-delivered-id"]
                ms, seq = entry_order(last)
                min_id = f"{ms}-{seq + 1}".encode()
            await self.redis.xtrim(stream, minid=min_id, approximate=False)

    async def trim_log(self) -> None:
        """Enforce ``hookbus.decisionLog`` exactly: each record's XADD trims by length only about
        (whole stream nodes), so the janitor trims to ``maxLength`` and ``maxAgeSeconds`` exactly
        (``maxLength`` is shared by the partitions: each keeps its share)."""
        retention = self.retention()
        with redis_errors(self.redis_url):
            for partition in self.partitions:
                log = self.keys.decision_log(partition)
                await self.redis.xtrim(log, maxlen=log_maxlen(retention, self.keys), approximate=False)
                if retention.max_age_seconds is not None:
                    min_id = f"{now_ms() - int(retention.max_age_seconds * 1000)}-0"
                    await self.redis.xtrim(log, minid=min_id, approximate=False)


def consumed_partitions(settings: Settings, keys: Keyspace) -> tuple[int, ...]:
    """The partitions a dispatcher consumes: ``--partitions``, else every one of the bus's."""
    if settings.dispatch_partitions is None:
        return tuple(keys.all_partitions)
    outside = [p for p in settings.dispatch_partitions if p >= keys.partitions]
    if outside:
        raise ConfigError(
            f"--partitions names {', '.join(map(str, outside))}, but the policy has "
            f"{keys.partitions} partition(s) (0-{keys.partitions - 1}; hookbus.streams.partitions)"
        )
    return settings.dispatch_partitions


def log_maxlen(retention: DecisionLogSettings, keys: Keyspace) -> int:
    """The length each partition's decision log is trimmed to (its share of ``maxLength``)."""
    return max(1, -(-retention.max_length // keys.partitions))


__all__ = ["Spawn", "WorkStreams", "consumed_partitions", "log_maxlen"]
