"""``hookbus audit archive``: the decision log into Parquet files, as a durable consumer group.

The archiver is an audit follower (:class:`hookbus.audit.command.Follower`, group ``archive`` by
default) that gathers records and writes them in flushes: when ``batch`` records are gathered or
the oldest gathered one was read ``every_s`` ago, one file per (day, tenant) of the flush
(:mod:`hookbus.audit.parquet`). Records are acknowledged in Redis (``XACK``) only after their
files are synced and renamed into place, so a crash loses nothing: what it had gathered or
written but not acknowledged stays pending in the group and is read again at the next start.
A flush is written (in a thread) while the next records are read and made into rows, one flush
at a time; each read is made into rows column by column (:func:`bus.decisionlog.parquet.add_read`).
Those pending records are flushed before anything new is read, less those a file holds already
(looked up by ``log_id`` and ``id`` in the files changed since they were logged): the flush that
wrote them may have held others than those read again (a read ahead of it, or reads since), so a
restart writes each record once, never a second copy.

A write that fails (a full disk, a file that reads back cut short, a folder that is a symbolic
link, an object store that refuses) says so in one line, keeps the records pending and tries
again with backoff until it succeeds or the archiver is stopped. A file left under its
temporary name by a crash is removed at the start (one line each).

At the start and then hourly the archiver compacts the days before yesterday (UTC): the files of
each day and tenant are merged into one (:meth:`~bus.decisionlog.parquet.ArchiveTarget.compact`),
since a year of small files is slow to query.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Sequence
from typing import Any, Final

import pyarrow as pa

from bus.decisionlog.parquet import ArchiveTarget, Rows, add_read, day_of
from bus.decisionlog.reader import LogEntry, PartitionReads, RawEntry
from bus.errors import ArchiveError, ConfigError
from bus.redis.connection import is_cluster
from bus.redis.keys import Keyspace
from bus.redis.lean import LeanLink
from bus.runtime.retry import Backoff
from bus.stream.protocol import now_ms
from hookbus.audit.command import Follower, follow
from hookbus.audit.delivery import Item, Stopping

logger = logging.getLogger("hookbus.audit.archive")

#: The consumer group of ``hookbus audit archive`` unless ``--group`` names another.
ARCHIVE_GROUP: Final = "archive"
#: Entries one read of one partition takes at most.
READ_COUNT: Final = 10_000
_READ_BLOCK_MS: Final = 1000
DAY_MS: Final = 86_400_000


class _Reads:
    """The follower's sink slot: its ``batch`` is how many entries one read takes; the archiver
    writes in flushes of its own (:meth:`Archiver._flush`)."""

    kind = "parquet"

    def __init__(self, count: int) -> None:
        self.batch = count

    async def deliver(self, items: list[Item], stop: asyncio.Event) -> None:
        raise NotImplementedError("the archiver writes in its own flushes")

    async def aclose(self) -> None:
        return None


def _reason(exc: BaseException) -> str:
    """One line for why a write failed."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    return " ".join(str(exc).split()) or type(exc).__name__


class Archiver(Follower):
    """One consumer of group ``group`` writing every record to ``target`` in flushes."""

    def __init__(
        self,
        redis_url: str,
        keys: Keyspace,
        target: ArchiveTarget,
        *,
        group: str = ARCHIVE_GROUP,
        consumer: str = "archiver",
        start: str = "oldest",
        claim_idle_s: float = 60.0,
        batch: int = 100_000,
        every_s: float = 300.0,
        max_delay_s: float = 30.0,
        compact_every_s: float = 3600.0,
    ) -> None:
        if batch < 1:
            raise ConfigError(f"--batch must be at least 1 (got {batch})")
        if every_s <= 0:
            raise ConfigError(f"--every must be more than 0 seconds (got {every_s:g})")
        super().__init__(
            redis_url,
            keys,
            group,
            _Reads(min(batch, READ_COUNT)),
            consumer=consumer,
            start=start,
            claim_idle_s=claim_idle_s,
        )
        self.target = target
        self.batch = batch
        self.every_s = every_s
        self.max_delay_s = max_delay_s
        self.compact_every_s = compact_every_s
        self._compact_at = 0.0  # at the start, then every compact_every_s
        #: Files this process put in place.
        self.files = 0
        #: What was gathered: the rows of each (day, tenant), the entries to acknowledge, how many records.
        self._parts: dict[tuple[str, str], Rows] = {}
        self._acks: dict[int, list[bytes]] = {}
        self._gathered = 0
        #: Entries read and not yet made into rows: a read's rows are made at once when enough
        #: have come (DuckDB's fixed cost per query would dominate a trickle's small reads).
        self._unmade: tuple[list[bytes], list[Any]] = ([], [])
        self._first_at = 0.0
        self._holding = False
        #: A single Redis: each partition's reads framed by hiredis on a connection of its own
        #: (:mod:`bus.redis.lean`; a blocked read of one partition must not hold up another's).
        self._links: dict[int, LeanLink] = {}
        #: The connection acknowledging flushed records (a single Redis; the reads' block).
        self._ack_link: LeanLink | None = None
        #: The flush under way while the next records are read and made into rows.
        self._flushing: asyncio.Task[None] | None = None

    async def run(self, stop: asyncio.Event) -> None:
        for path in await asyncio.to_thread(self.target.remove_partials):
            logger.warning("removed %s, a file cut short by a crash: its records are written again", path)
        await self._compact()
        try:
            await super().run(stop)
        finally:
            links, self._links = list(self._links.values()), {}
            if self._ack_link is not None:
                links.append(self._ack_link)
                self._ack_link = None
            for link in links:
                await link.aclose()

    async def _read(self, partition: int, from_id: str, block_ms: int | None) -> list[RawEntry]:
        """One ``XREADGROUP`` of a partition: ``[(entry id, fields)]`` (fields None: trimmed while pending;
        on a single Redis ``[name, value, name, value...]`` as Redis sends them, no dict made)."""
        if is_cluster(self.redis):
            return await super()._read(partition, from_id, block_ms)
        if from_id == ">" and self.counted is not None:  # a Redis without stream counters
            return await self.counted.read(partition, self.sink.batch, block_ms)
        link = self._link(partition)
        command: list[bytes | str | int] = ["XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", self.sink.batch]
        if block_ms is not None:
            command += ["BLOCK", block_ms]
        (reply,) = await link.execute([[*command, "STREAMS", self.keys.decision_log(partition), from_id]])
        if isinstance(reply, Exception):  # an error reply (NOGROUP): raised as redis-py raises it
            raise reply
        return [entry for _, entries in reply or () for entry in entries]

    def _link(self, partition: int) -> LeanLink:
        link = self._links.get(partition)
        if link is None:
            link = self._links[partition] = LeanLink(self.redis)
        return link

    async def _count_reads(self) -> None:
        await super()._count_reads()
        if self.counted is not None and not is_cluster(self.redis):
            self.counted.link = self._link

    async def _compact(self) -> None:
        """Merge the files of each day before yesterday (UTC) into one per tenant (a day of grace
        for late records); a failure is said and tried again at the next turn."""
        self._compact_at = time.monotonic() + self.compact_every_s
        before = day_of(now_ms() - DAY_MS)
        try:
            merged = await asyncio.to_thread(self.target.compact, before)
        except (OSError, ArchiveError, pa.ArrowException) as exc:
            logger.warning("cannot compact the archive at %s: %s; trying again later", self.target.target, _reason(exc))
            return
        if merged:
            logger.info("compacted %d folders of days before %s into one file each", len(merged), before)

    async def _drain_own_pending(self, stop: asyncio.Event) -> None:
        # What was gathered is pending in Redis and is read again here: gather it once.
        self._parts, self._acks, self._gathered, self._unmade = {}, {}, 0, ([], [])
        await self._gather_then_flush(super()._drain_own_pending(stop), stop)

    async def _claim_abandoned(self, stop: asyncio.Event) -> None:
        await self._gather_then_flush(super()._claim_abandoned(stop), stop)

    async def _gather_then_flush(self, reading: Any, stop: asyncio.Event) -> None:
        """Gather all that ``reading`` reads, then flush it as one, less what a file holds already."""
        self._holding = True
        try:
            await reading
        finally:
            self._holding = False
        await self._flush(stop, read_again=True)

    async def _follow(self, stop: asyncio.Event) -> None:
        reads = PartitionReads(self.keys.all_partitions, lambda partition: self._read(partition, ">", _READ_BLOCK_MS))
        try:
            while not stop.is_set():
                # A partition's next read is sent as soon as its last one answered (read_ahead):
                # Redis makes the next reply while this one's rows are made and the last flush written.
                for partition, entries in await reads.next_raw(read_ahead=True):
                    await self._gather(partition, entries, stop)
                if self._flushing is not None and self._flushing.done():
                    await self._flushed()  # raises what the flush raised
                if self._acks and time.monotonic() - self._first_at >= self.every_s:
                    await self._start_flush(stop)
        finally:
            # Records a cancelled read was given stay pending for this consumer: read again at the next start.
            await reads.aclose()
            await self._flushed()
        await self._flush(stop)  # stopping: what was gathered, once more

    async def _deliver(self, entries: Sequence[LogEntry], stop: asyncio.Event) -> None:
        """Gather ``entries`` (records pending at a start, or taken over)."""
        for partition, group in itertools.groupby(entries, key=lambda entry: entry.partition):
            await self._gather(partition, [(entry.entry_id, entry.fields) for entry in group], stop)

    async def _gather(self, partition: int, entries: Sequence[RawEntry], stop: asyncio.Event) -> None:
        """Gather the entries of one read of ``partition``: made into rows as they come (in a thread:
        the next read is answered meanwhile), written when a batch is gathered."""
        if not entries:
            return
        if not self._acks:
            self._first_at = time.monotonic()
        self._acks.setdefault(partition, []).extend([entry_id for entry_id, _ in entries])
        live = [entry for entry in entries if entry[1]]
        if len(live) < len(entries):  # trimmed from the log (retention) while they were pending
            for entry_id, _ in (entry for entry in entries if not entry[1]):
                logger.warning("record %s was trimmed from the log before it was archived", entry_id.decode())
        ids, pairs = self._unmade
        ids.extend([entry_id for entry_id, _ in live])
        pairs.extend([fields if isinstance(fields, list) else _flat(fields) for _, fields in live])
        if len(ids) >= READ_COUNT:
            await self._make_rows()
        self._gathered += len(entries)
        if not self._holding and self._gathered >= self.batch:
            await self._start_flush(stop)

    async def _make_rows(self) -> None:
        """Make the rows of the entries read since the last time (in a thread: the next read is answered meanwhile)."""
        (ids, pairs), self._unmade = self._unmade, ([], [])
        if ids:
            for log_id in await asyncio.to_thread(add_read, self._parts, ids, pairs):
                logger.warning("skipping %s: not a decision-log record", log_id)

    async def _start_flush(self, stop: asyncio.Event) -> None:
        """Write what was gathered while the next records are read (one flush at a time)."""
        await self._make_rows()
        await self._flushed()
        if not self._acks:
            return
        parts, acks, self._parts, self._acks, self._gathered = self._parts, self._acks, {}, {}, 0
        self._flushing = asyncio.create_task(self._write_and_ack(parts, acks, stop))

    async def _flushed(self) -> None:
        """Wait for the flush under way (its failure raised here)."""
        flushing, self._flushing = self._flushing, None
        if flushing is not None:
            await flushing

    async def _flush(self, stop: asyncio.Event, *, read_again: bool = False) -> None:
        """Write what was gathered, then acknowledge it (after the flush under way, if any).

        ``read_again``: the records were pending at a start (or claimed); those a file holds are not written again.
        """
        await self._make_rows()
        await self._flushed()
        if not self._acks:
            return
        parts, acks, self._parts, self._acks, self._gathered = self._parts, self._acks, {}, {}, 0
        await self._write_and_ack(parts, acks, stop, read_again=read_again)

    async def _write_and_ack(
        self,
        parts: dict[tuple[str, str], Rows],
        acks: dict[int, list[bytes]],
        stop: asyncio.Event,
        *,
        read_again: bool = False,
    ) -> None:
        """Write ``parts``, then acknowledge ``acks``; on failure say so, keep them pending and retry."""
        records = sum(len(rows) for rows in parts.values())
        backoff = Backoff(base_s=0.5, cap_s=self.max_delay_s)
        while True:
            try:
                writing = await asyncio.to_thread(self.target.unwritten, parts) if read_again else parts
                written = await asyncio.to_thread(self.target.write, writing)
                break
            except (OSError, ArchiveError, pa.ArrowException) as exc:
                if backoff.failures == 0 or backoff.failures % 10 == 0:
                    logger.warning(
                        "cannot write the archive at %s: %s; %d records stay pending in Redis (group %s), retrying",
                        self.target.target,
                        _reason(exc),
                        records,
                        self.group,
                    )
                if stop.is_set():
                    raise Stopping from exc
                await backoff.wait(stop)
        if backoff.failures:
            logger.info("wrote the archive at %s again after %d failures", self.target.target, backoff.failures)
        for replaced in (w for w in written if w.replaced):
            logger.warning("replaced %s, which was cut short or corrupt", replaced.path)
        await self._ack(acks)
        self.delivered += sum(len(ids) for ids in acks.values())
        self.files += len(written)
        logger.debug("archived %d records in %d files", records, len(written))
        if time.monotonic() >= self._compact_at:
            await self._compact()

    async def _ack(self, acks: dict[int, list[bytes]]) -> None:
        """``XACK`` the entries of each partition, in commands of :data:`READ_COUNT` ids."""
        if is_cluster(self.redis):
            for partition, ids in acks.items():
                await self.redis.xack(self.keys.decision_log(partition), self.group, *ids)
            return
        if self._ack_link is None:
            self._ack_link = LeanLink(self.redis)
        commands: list[list[bytes | str | int]] = [
            ["XACK", self.keys.decision_log(partition), self.group, *ids[start : start + READ_COUNT]]
            for partition, ids in acks.items()
            for start in range(0, len(ids), READ_COUNT)
        ]
        for reply in await self._ack_link.execute(commands):
            if isinstance(reply, Exception):
                raise reply


def _flat(fields: Any) -> list[bytes]:
    """A record's stream fields as Redis sends them: ``[name, value, name, value...]``."""
    return list(itertools.chain.from_iterable(fields.items()))


def archive_command(args: Any, redis_url: str, keys: Keyspace) -> int:
    """``hookbus audit archive``."""

    async def main() -> None:
        archiver = Archiver(
            redis_url,
            keys,
            ArchiveTarget(args.to),
            group=args.group,
            consumer=args.consumer,
            start=args.start,
            claim_idle_s=args.claim_idle,
            batch=args.batch,
            every_s=args.every,
        )
        await follow(archiver)

    asyncio.run(main())
    return 0


__all__ = ["ARCHIVE_GROUP", "READ_COUNT", "Archiver", "archive_command"]
