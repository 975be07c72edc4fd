"""One tail of the decision log per gateway process, fanned out to every console stream.

However many consoles watch, a gateway reads the log with one blocking ``XREAD`` and decodes
each record once (:class:`LogItem`); each :class:`Subscriber` gets the records its filter
accepts through a bounded queue. The tail runs only while someone subscribes.

A subscriber whose queue is full (its client reads slower than the fleet writes) is not
waited for: the tail marks it *lagging* and stops feeding it. Once it has sent what its queue
holds, the subscriber rejoins the live feed and reads what it missed from the log itself
(:meth:`LogTail.history`, ``XRANGE`` pages from its last entry id), so it loses nothing the
log still holds and costs the other subscribers nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping

import orjson
import redis.asyncio as aioredis
import redis.exceptions

from bus.connection import connect, redis_errors
from bus.errors import BusUnavailable
from bus.keys import Keyspace
from bus.protocol import LogRecord, ProtocolError
from bus.retry import BackgroundTask, Backoff

logger = logging.getLogger("hookbus.gateway")

#: Records one subscriber may have queued before it is marked lagging.
QUEUE_CAPACITY = 1024
#: Entries per ``XREAD`` of the tail and per ``XRANGE`` page of a catch-up.
BATCH = 500
_BLOCK_MS = 1000
_CALL_TIMEOUT_S = 5.0
ENTRY_ID = re.compile(r"^\d{1,20}-\d{1,20}$")


def id_key(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a sortable pair (``"1700000000000-3"`` -> ``(1700000000000, 3)``)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


@dataclasses.dataclass(frozen=True, slots=True)
class LogItem:
    """One decision-log record as the console streams it: the filter fields and its JSON, made once."""

    entry_id: str
    key: tuple[int, int]
    tenant: str
    session_id: str
    event: str
    decision: str
    #: ``fail-open`` when the agent got no decision, else the decision.
    verdict: str
    tool: str
    #: The record as JSON (one line): :meth:`LogRecord.to_json` (``masked`` included), plus ``log_id`` and ``verdict``.
    data: str

    @classmethod
    def decode(cls, entry_id: bytes | str, fields: Mapping[bytes, bytes]) -> LogItem:
        """Raises :class:`ProtocolError` for an entry hookbus did not write."""
        entry = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        record = LogRecord.decode(fields)
        verdict = "fail-open" if record.outcome == "fail-open" else record.decision
        view = record.to_json()
        view.update(log_id=entry, verdict=verdict)
        try:
            data = orjson.dumps(view).decode()
        except TypeError as exc:  # a record whose JSON orjson cannot write (e.g. an integer over 64 bits)
            raise ProtocolError(f"decision-log entry {entry} cannot be sent as JSON: {exc}") from exc
        return cls(entry, id_key(entry), record.tenant, record.session_id, record.event, record.decision, verdict,
                   record.tool_name, data)


@dataclasses.dataclass(eq=False)
class Subscriber:
    """One console stream's place in the fan-out."""

    accept: Callable[[LogItem], bool]
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
        #: The id of the last entry fanned out ("0-0": the log was empty when the tail started).
        self.position = "0-0"
        self._redis: aioredis.Redis | None = None
        self._task = BackgroundTask(self._run, "hookbus-log-tail")
        self._lock = asyncio.Lock()
        #: Entries read by the tail since the process started (all subscribers together).
        self.read_total = 0

    @property
    def running(self) -> bool:
        return self._task.running

    def _client(self) -> aioredis.Redis:
        if self._redis is None:
            self._redis = connect(self.redis_url, socket_timeout_s=None)
        return self._redis

    async def join(self, subscriber: Subscriber) -> str:
        """Add ``subscriber``; returns the tail's position (every later entry reaches it).

        Raises :class:`BusUnavailable` when the tail is not running yet and Redis cannot say
        where the log ends.
        """
        async with self._lock:
            if not self._task.running:
                self.position = await self.newest_id() or "0-0"
                self._task.start()
            self.subscribers.add(subscriber)
            return self.position

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

    async def newest_id(self) -> str | None:
        with redis_errors(self.redis_url):
            async with asyncio.timeout(_CALL_TIMEOUT_S):
                newest = await self._client().xrevrange(self.keys.decision_log, count=1)
        return newest[0][0].decode() if newest else None

    async def oldest_id(self) -> str | None:
        with redis_errors(self.redis_url):
            async with asyncio.timeout(_CALL_TIMEOUT_S):
                oldest = await self._client().xrange(self.keys.decision_log, count=1)
        return oldest[0][0].decode() if oldest else None

    async def history(self, after: str, accept: Callable[[LogItem], bool]) -> AsyncIterator[LogItem]:
        """The accepted records after entry ``after`` (exclusive), oldest first, page by page, to the end."""
        cursor = after
        while True:
            with redis_errors(self.redis_url):
                async with asyncio.timeout(_CALL_TIMEOUT_S):
                    page = await self._client().xrange(self.keys.decision_log, min=f"({cursor}", count=BATCH)
            for entry_id, fields in page:
                cursor = entry_id.decode()
                item = _decode(entry_id, fields)
                if item is not None and accept(item):
                    yield item
            if len(page) < BATCH:
                return

    async def latest(self, count: int, accept: Callable[[LogItem], bool]) -> tuple[list[LogItem], str | None]:
        """Of the newest ``count`` entries, the accepted ones (oldest first), and the newest entry's id."""
        with redis_errors(self.redis_url):
            async with asyncio.timeout(_CALL_TIMEOUT_S):
                entries = await self._client().xrevrange(self.keys.decision_log, count=count)
        items = [_decode(entry_id, fields) for entry_id, fields in reversed(entries)]
        return [item for item in items if item is not None and accept(item)], (
            entries[0][0].decode() if entries else None)

    async def _run(self) -> None:
        backoff = Backoff()
        client = self._client()
        while True:
            try:
                with redis_errors(self.redis_url):
                    async with asyncio.timeout(_BLOCK_MS / 1000 + _CALL_TIMEOUT_S):
                        response = await client.xread({self.keys.decision_log: self.position}, count=BATCH,
                                                      block=_BLOCK_MS)
                backoff.reset()
            except (BusUnavailable, TimeoutError, redis.exceptions.RedisError) as exc:
                if backoff.failures == 0:
                    logger.warning("console log tail: %s; retrying", exc or type(exc).__name__)
                await backoff.wait()
                continue
            for _, entries in response or ():
                for entry_id, fields in entries:
                    self.read_total += 1
                    item = _decode(entry_id, fields)
                    if item is not None:
                        for subscriber in self.subscribers:
                            subscriber.offer(item)
                    self.position = entry_id.decode()


def _decode(entry_id: bytes, fields: Mapping[bytes, bytes]) -> LogItem | None:
    try:
        return LogItem.decode(entry_id, fields)
    except ProtocolError as exc:
        logger.debug("console: skipping decision-log entry %s: %s", entry_id.decode(), exc)
        return None


__all__ = ["BATCH", "ENTRY_ID", "QUEUE_CAPACITY", "LogItem", "LogTail", "Subscriber", "id_key"]
