"""One tail of the decision log per gateway process, fanned out to every console stream.

However many consoles watch, a gateway reads the log with one blocking ``XREAD`` and decodes
each record once (:class:`LogItem`); each :class:`Subscriber` gets the records its filter
accepts through a bounded queue. The tail runs only while someone subscribes.

A subscriber whose queue is full (its client reads slower than the fleet writes) is not
waited for: the tail marks it *lagging* and stops feeding it. Once it has sent what its queue
holds, the subscriber rejoins the live feed and reads what it missed from the log itself
(:meth:`LogTail.history`, ``XRANGE`` pages from its last entry id), so it loses nothing the
log still holds and costs the other subscribers nothing.

With several partitions the tail keeps one blocking ``XREAD`` in flight per partition's log
(:class:`bus.decisionlog.reader.LogFollower`) and fans out what each answer brings, merged by id.
Each partition's records come in order; records of different partitions come in the order
they were read, which is their id order only roughly, and two partitions may hold the same
id. So a stream remembers how far it got in each partition (:class:`Cursor`), not one id.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import orjson
import redis.asyncio as aioredis

from bus.decisionlog.reader import LogEntry, LogFollower, merge_order, newest_ids, newest_pages, oldest_ids, read_merged
from bus.errors import BusUnavailable, ProtocolError, RedisCommandError
from bus.hooks.decisions import RecordOutcome
from bus.redis.connection import connect, redis_errors
from bus.redis.entries import entry_order
from bus.redis.keys import Keyspace
from bus.runtime.retry import BackgroundTask, Backoff
from bus.stream.protocol import LogRecord

logger = logging.getLogger("hookbus.gateway")

#: Records one subscriber may have queued before it is marked lagging.
QUEUE_CAPACITY = 1024
#: Entries per ``XREAD`` of the tail and per ``XRANGE`` page of a catch-up.
BATCH = 500
_BLOCK_MS = 1000
_CALL_TIMEOUT_S = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class LogItem:
    """One decision-log record as the console streams it: what its filter reads
    (:class:`bus.decisionlog.audit.RecordFilter`) and its JSON, made once."""

    entry_id: str
    key: tuple[int, int]
    #: The partition whose log holds it.
    partition: int
    tenant: str
    session_id: str
    event: str
    decision: str
    outcome: str
    tool_name: str
    agent: str
    #: The record as JSON (one line): :meth:`LogRecord.to_json` (``masked`` included), plus ``log_id`` and ``verdict``.
    data: str

    @classmethod
    def decode(cls, entry_id: bytes | str, fields: Mapping[bytes, bytes], partition: int = 0) -> LogItem:
        """Raises :class:`ProtocolError` for an entry hookbus did not write."""
        entry = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        record = LogRecord.decode(fields)
        verdict = RecordOutcome.FAIL_OPEN if record.outcome == RecordOutcome.FAIL_OPEN else record.decision
        view = record.to_json()
        view.update(log_id=entry, verdict=verdict)
        try:
            data = orjson.dumps(view).decode()
        except TypeError as exc:  # a record whose JSON orjson cannot write (e.g. an integer over 64 bits)
            raise ProtocolError(f"decision-log entry {entry} cannot be sent as JSON: {exc}") from exc
        return cls(
            entry,
            entry_order(entry),
            partition,
            record.tenant,
            record.session_id,
            record.event,
            record.decision,
            record.outcome,
            record.tool_name,
            record.agent,
            data,
        )


@dataclasses.dataclass(slots=True)
class Cursor:
    """How far one stream got: per partition, the newest entry it sent or does not want (older
    ones are skipped), and ``last_id``, the id of the last entry it sent (its ``Last-Event-ID``)."""

    marks: list[tuple[int, int]]
    last_id: str

    @classmethod
    def after(cls, entry_id: str, partitions: int) -> Cursor:
        """Resuming after ``entry_id``: every partition from just past that id."""
        return cls([entry_order(entry_id)] * partitions, entry_id)

    @classmethod
    def at(cls, positions: list[str]) -> Cursor:
        """At one entry id per partition; ``last_id`` is the newest of them."""
        marks = [entry_order(position) for position in positions]
        return cls(marks, max(positions, key=entry_order) if positions else "0-0")

    def has(self, item: LogItem) -> bool:
        """Whether ``item`` was sent already (or is older than what the stream wants)."""
        return item.key <= self.marks[item.partition]

    def sent(self, item: LogItem) -> None:
        self.marks[item.partition] = max(self.marks[item.partition], item.key)
        self.last_id = item.entry_id

    def skip_to(self, positions: list[str | None]) -> None:
        """Want nothing up to ``positions`` (one per partition; None: leave that one)."""
        for partition, position in enumerate(positions):
            if position is not None:
                self.marks[partition] = max(self.marks[partition], entry_order(position))
        known = [position for position in positions if position is not None]
        if known and entry_order(newest := max(known, key=entry_order)) > entry_order(self.last_id):
            self.last_id = newest

    @property
    def starts(self) -> list[str]:
        """Exclusive ``XRANGE`` starts just past each partition's mark."""
        return [f"({ms}-{seq}" for ms, seq in self.marks]


@dataclasses.dataclass(eq=False)
class Subscriber:
    """One console stream's place in the fan-out."""

    accept: Callable[[LogItem], bool]
    #: A test of a raw entry before it is decoded (:meth:`bus.decisionlog.audit.RecordFilter.entry_filter`),
    #: for what the stream reads from the log itself; None: decode every entry.
    may_pass: Callable[[Any], bool] | None = None
    queue: asyncio.Queue[LogItem] = dataclasses.field(default_factory=lambda: asyncio.Queue(QUEUE_CAPACITY))
    #: Set by the tail when the queue was full: records after the queued ones must come from the log.
    lagging: bool = False
    #: How many times it fell behind (for the stream's own accounting).
    lags: int = 0

    def offer(self, item: LogItem) -> None:
        if self.lagging or not self.accept(item):
            return
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.lagging = True
            self.lags += 1


class LogTail:
    """The shared tail of one gateway process (see the module docstring)."""

    def __init__(self, redis_url: str, keys: Keyspace) -> None:
        self.redis_url = redis_url
        self.keys = keys
        self.subscribers: set[Subscriber] = set()
        #: Per partition, the id of the last entry fanned out ("0-0": that log was empty when the tail started).
        self.positions = ["0-0"] * keys.partitions
        self._redis: aioredis.Redis | None = None
        self._task = BackgroundTask(self._run, "hookbus-log-tail")
        self._lock = asyncio.Lock()
        #: Entries read by the tail since the process started (all subscribers together).

    @property
    def running(self) -> bool:
        return self._task.running

    def _client(self) -> aioredis.Redis:
        if self._redis is None:
            self._redis = connect(self.redis_url, socket_timeout_s=None)
        return self._redis

    async def join(self, subscriber: Subscriber) -> Cursor:
        """Add ``subscriber``; returns the tail's position (every later entry reaches it).

        Raises :class:`BusUnavailable` when the tail is not running yet and Redis cannot say
        where the logs end.
        """
        async with self._lock:
            if not self._task.running:
                self.positions = [newest or "0-0" for newest in await self.newest_ids()]
                self._task.start()
            self.subscribers.add(subscriber)
            return Cursor.at(self.positions)

    async def leave(self, subscriber: Subscriber) -> None:
        """Remove ``subscriber``; the last one to leave stops the tail and closes its connection."""
        async with self._lock:
            self.subscribers.discard(subscriber)
            if self.subscribers:
                return
            await self._task.stop()
            if self._redis is not None:
                client, self._redis = self._redis, None
                with contextlib.suppress(Exception):
                    await client.aclose()

    async def newest_ids(self) -> list[str | None]:
        """Each partition's newest entry id (None: that log is empty)."""
        with redis_errors(self.redis_url):
            async with asyncio.timeout(_CALL_TIMEOUT_S):
                return await newest_ids(self._client(), self.keys.decision_logs)

    async def trimmed(self, cursor: Cursor) -> str | None:
        """Where the log resumes if some partition's log no longer holds what follows ``cursor``
        (its oldest entry is past the cursor's mark: retention trimmed it), else None."""
        with redis_errors(self.redis_url):
            async with asyncio.timeout(_CALL_TIMEOUT_S):
                oldest = await oldest_ids(self._client(), self.keys.decision_logs)
        past = [
            first
            for first, mark in zip(oldest, cursor.marks, strict=True)
            if first is not None and mark != (0, 0) and entry_order(first) > mark
        ]
        return max(past, key=entry_order) if past else None

    async def history(
        self, cursor: Cursor, accept: Callable[[LogItem], bool], may_pass: Callable[[Any], bool] | None = None
    ) -> AsyncIterator[LogItem]:
        """The accepted records past ``cursor``'s marks, oldest first (merged by id), page by page, to the end;
        entries ``may_pass`` refuses are skipped before they are decoded."""
        entries = read_merged(
            self._client(), self.keys.decision_logs, low=cursor.starts, page=BATCH, timeout_s=_CALL_TIMEOUT_S
        )
        try:
            while True:
                with redis_errors(self.redis_url):
                    entry = await anext(entries, None)
                if entry is None:
                    return
                if may_pass is not None and not may_pass(entry.fields):
                    continue
                item = _decode(entry.entry_id, entry.fields, entry.partition)
                if item is not None and accept(item):
                    yield item
        finally:
            await entries.aclose()

    async def latest(
        self, count: int, accept: Callable[[LogItem], bool], may_pass: Callable[[Any], bool] | None = None
    ) -> tuple[list[LogItem], list[str | None]]:
        """Of the newest ``count`` entries (all partitions merged), the accepted ones (oldest
        first), and each partition's newest entry id (None: empty) as they were read."""
        with redis_errors(self.redis_url):
            async with asyncio.timeout(_CALL_TIMEOUT_S):
                pages = await newest_pages(self._client(), self.keys.decision_logs, count)
        newest = [page[0][0].decode() if page else None for page in pages]
        entries = sorted(
            (
                LogEntry(partition, entry_id, fields)
                for partition, page in enumerate(pages)
                for entry_id, fields in page
            ),
            key=merge_order,
        )[-count:]
        items = [
            _decode(entry.entry_id, entry.fields, entry.partition)
            for entry in entries
            if may_pass is None or may_pass(entry.fields)
        ]
        return [item for item in items if item is not None and accept(item)], newest

    async def _run(self) -> None:
        backoff = Backoff()
        follower = LogFollower(
            self._client(), self.keys, self.positions, count=BATCH, block_ms=_BLOCK_MS, timeout_s=_CALL_TIMEOUT_S
        )
        try:
            while True:
                try:
                    with redis_errors(self.redis_url):
                        entries = await follower.read()
                    backoff.reset()
                except (BusUnavailable, TimeoutError, RedisCommandError) as exc:
                    if backoff.failures == 0:
                        logger.warning("console log tail: %s; retrying", exc or type(exc).__name__)
                    await backoff.wait()
                    continue
                for entry in entries:
                    item = _decode(entry.entry_id, entry.fields, entry.partition)
                    if item is not None:
                        for subscriber in self.subscribers:
                            subscriber.offer(item)
                    self.positions[entry.partition] = entry.log_id
        finally:
            await follower.aclose()


def _decode(entry_id: bytes, fields: Mapping[bytes, bytes], partition: int) -> LogItem | None:
    try:
        return LogItem.decode(entry_id, fields, partition)
    except ProtocolError as exc:
        logger.debug("console: skipping decision-log entry %s: %s", entry_id.decode(), exc)
        return None


__all__ = ["BATCH", "QUEUE_CAPACITY", "Cursor", "LogItem", "LogTail", "Subscriber"]
