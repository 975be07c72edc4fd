"""Reading the partitioned decision log as one log: ranges merged by entry id, and following it live.

The decision log is one stream per partition (:mod:`bus.redis.keys`). Every reader here reads each
partition with commands of its own, never one command naming two partitions' keys (a Redis
Cluster keeps them in different slots), and merges what comes back by entry id
(:func:`bus.redis.entries.entry_order`). Entry ids are unique within a stream only: two
partitions written in the same millisecond both hold ``<ms>-0``, and such ties are merged in
partition order. With one partition each reader is a plain ``XRANGE``, ``XREVRANGE`` or
``XREAD`` loop.

Following (:class:`PartitionReads`) keeps one blocking read in flight per partition and
returns whatever the first ones to answer returned, merged: each partition's entries come in
order, entries of different partitions in the order they were read.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, NamedTuple

import redis.asyncio as aioredis

from bus.redis.connection import read_streams
from bus.redis.entries import MAX_PART, entry_order
from bus.redis.keys import Keyspace

#: Entries per page of a merged range, per partition.
PAGE: Final = 500
#: One stream entry as redis-py returns it (the fields are empty or None for an entry trimmed while pending).
RawEntry = tuple[bytes, Any]
_LAST: Final = f"({MAX_PART}-{MAX_PART}"
_FIRST: Final = "(0-0"


class LogEntry(NamedTuple):
    """One entry of one partition's decision log."""

    partition: int
    entry_id: bytes
    fields: Any

    @property
    def log_id(self) -> str:
        return self.entry_id.decode()


def merge_order(entry: LogEntry) -> tuple[int, int, int]:
    """The order of merged entries: by id, ties in partition order."""
    return (*entry_order(entry.entry_id), entry.partition)


def _per_stream(bound: str | Sequence[str], count: int) -> list[str]:
    bounds = [bound] * count if isinstance(bound, str) else list(bound)
    if len(bounds) != count:
        raise ValueError(f"{len(bounds)} bounds for {count} streams")
    return bounds


async def _pages(
    redis: aioredis.Redis,
    reads: Sequence[tuple[str, str]],
    end: str,
    count: int,
    reverse: bool,
    timeout_s: float | None,
) -> list[list[RawEntry]]:
    """One page of each ``(stream, start)``: one command, or one pipeline of single-stream commands."""
    async with asyncio.timeout(timeout_s):
        if len(reads) == 1:
            stream, start = reads[0]
            if reverse:
                return [await redis.xrevrange(stream, max=start, min=end, count=count)]
            return [await redis.xrange(stream, min=start, max=end, count=count)]
        async with redis.pipeline(transaction=False) as pipe:
            for stream, start in reads:
                if reverse:
                    pipe.xrevrange(stream, max=start, min=end, count=count)
                else:
                    pipe.xrange(stream, min=start, max=end, count=count)
            return list(await pipe.execute())


async def read_merged(
    redis: aioredis.Redis,
    streams: Sequence[str],
    *,
    low: str | Sequence[str] = "-",
    high: str | Sequence[str] = "+",
    page: int = PAGE,
    reverse: bool = False,
    timeout_s: float | None = None,
) -> AsyncGenerator[LogEntry, None]:
    """Every entry of ``streams`` between ``low`` and ``high`` (``XRANGE`` bounds, ``(id`` exclusive),
    oldest first (newest first with ``reverse``), each once; the ``partition`` of an entry is its
    stream's index.

    The start bound (``low``, or ``high`` with ``reverse``) may be one per stream. Each stream is
    read in pages of ``page`` that start just past the last entry read, so entries written
    meanwhile are read once or not at all, never twice; a stream is done at its first short
    page. ``timeout_s`` bounds each page.
    """
    starts = _per_stream(high if reverse else low, len(streams))
    end = low if reverse else high
    if not isinstance(end, str):
        raise ValueError("only the start bound may be given per stream")
    buffers: list[deque[RawEntry]] = [deque() for _ in streams]
    done: set[int] = set()
    heads: list[tuple[tuple[int, ...], int]] = []

    def push(partition: int) -> None:
        ms, seq = entry_order(buffers[partition][0][0])
        heapq.heappush(heads, ((-ms, -seq, -partition) if reverse else (ms, seq, partition), partition))

    # An exclusive start at the very end (the very start, reversed) is past every entry; Redis refuses it.
    refill = [p for p, start in enumerate(starts) if start != (_FIRST if reverse else _LAST)]
    while True:
        if refill:
            pages = await _pages(redis, [(streams[p], starts[p]) for p in refill], end, page, reverse, timeout_s)
            for partition, entries in zip(refill, pages, strict=True):
                if len(entries) < page:
                    done.add(partition)
                if entries:
                    buffers[partition].extend(entries)
                    starts[partition] = f"({entries[-1][0].decode()}"
                    push(partition)
            refill = []
        if not heads:
            return
        _, partition = heapq.heappop(heads)
        entry_id, fields = buffers[partition].popleft()
        yield LogEntry(partition, entry_id, fields)
        if buffers[partition]:
            push(partition)
        elif partition not in done:
            refill.append(partition)  # before the next entry: this stream may hold the next one


async def newest_pages(redis: aioredis.Redis, streams: Sequence[str], count: int) -> list[list[RawEntry]]:
    """Each stream's newest ``count`` entries, newest first (one command per stream, pipelined)."""
    return await _pages(redis, [(stream, "+") for stream in streams], "-", count, True, None)


async def newest_ids(redis: aioredis.Redis, streams: Sequence[str]) -> list[str | None]:
    """The id of each stream's newest entry (None: empty or missing)."""
    return [entries[0][0].decode() if entries else None for entries in await newest_pages(redis, streams, 1)]


async def oldest_ids(redis: aioredis.Redis, streams: Sequence[str]) -> list[str | None]:
    """The id of each stream's oldest entry (None: empty or missing)."""
    pages = await _pages(redis, [(stream, "-") for stream in streams], "+", 1, False, None)
    return [entries[0][0].decode() if entries else None for entries in pages]


class PartitionReads:
    """One ``read(partition)`` in flight per partition; :meth:`next` returns what those that answered
    first returned, merged by id.

    A read that failed is raised by :meth:`next` once the entries already read are returned
    (then that partition is read again). :meth:`aclose` cancels the reads in flight.
    """

    def __init__(self, partitions: Iterable[int], read: Callable[[int], Awaitable[Sequence[RawEntry]]]) -> None:
        self.partitions = tuple(partitions)
        self._read = read
        self._tasks: dict[asyncio.Task[Sequence[RawEntry]], int] = {}
        self._failed: BaseException | None = None

    async def _call(self, partition: int) -> Sequence[RawEntry]:
        return await self._read(partition)

    async def next(self) -> list[LogEntry]:
        """Entries of the partitions that answered first (an empty list when their reads timed out empty)."""
        entries = [
            LogEntry(partition, entry_id, fields)
            for partition, found in await self.next_raw()
            for entry_id, fields in found
        ]
        entries.sort(key=merge_order)
        return entries

    async def next_raw(self, *, read_ahead: bool = False) -> list[tuple[int, Sequence[RawEntry]]]:
        """What the partitions that answered first returned, as they returned it, by partition.

        ``read_ahead``: their next reads are sent at once, before the caller takes these (so one
        read per partition is in flight while the caller works, and its entries stay in order).
        """
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        self._start()
        finished, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
        found: list[tuple[int, Sequence[RawEntry]]] = []
        for task in sorted(finished, key=self._tasks.__getitem__):
            partition = self._tasks.pop(task)
            try:
                found.append((partition, task.result()))
            except Exception as exc:  # raised below, or by the next call
                self._failed = self._failed or exc
        if read_ahead and self._failed is None:
            self._start()
        if not any(entries for _, entries in found) and self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        return found

    def _start(self) -> None:
        """A read of each partition that has none in flight."""
        running = set(self._tasks.values())
        for partition in self.partitions:
            if partition not in running:
                self._tasks[asyncio.create_task(self._call(partition))] = partition

    async def aclose(self) -> None:
        tasks = list(self._tasks)
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class LogFollower:
    """``XREAD`` of every partition's decision log from ``positions`` (one entry id per partition),
    as :class:`PartitionReads`; ``positions`` moves past what each read returned."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keyspace,
        positions: Sequence[str],
        *,
        count: int,
        block_ms: int,
        timeout_s: float | None = None,
    ) -> None:
        if len(positions) != keys.partitions:
            raise ValueError(f"{len(positions)} positions for {keys.partitions} partitions")
        self.redis = redis
        self.keys = keys
        self.positions = list(positions)
        self.count = count
        self.block_ms = block_ms
        self.timeout_s = None if timeout_s is None else block_ms / 1000 + timeout_s
        self._reads = PartitionReads(keys.all_partitions, self._xread)

    async def _xread(self, partition: int) -> list[RawEntry]:
        async with asyncio.timeout(self.timeout_s):
            response = await read_streams(
                self.redis,
                {self.keys.decision_log(partition): self.positions[partition]},
                count=self.count,
                block_ms=self.block_ms,
            )
        found: list[RawEntry] = [entry for _, entries in response or () for entry in entries]
        if found:
            self.positions[partition] = found[-1][0].decode()
        return found

    async def read(self) -> list[LogEntry]:
        """What arrived (after at most about ``block_ms``), merged by id."""
        return await self._reads.next()

    async def aclose(self) -> None:
        await self._reads.aclose()


__all__ = [
    "PAGE",
    "LogEntry",
    "LogFollower",
    "PartitionReads",
    "RawEntry",
    "merge_order",
    "newest_ids",
    "newest_pages",
    "oldest_ids",
    "read_merged",
]
