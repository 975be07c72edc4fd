"""``hookbus audit``: export a window of the decision log, or follow it as a durable consumer group.

``export`` reads ``[--since, --until]`` page by page (:func:`bus.decisionlog.audit.read_window`) and
writes JSON Lines or CSV: every record in the window once, on a live system too.

``follow`` is one audit pipeline: a consumer group of its own on the decision log (created
at the start of the retained log, or at its end with ``--start now``), delivering to a sink
(:mod:`hookbus.audit.sinks`) and acknowledging a record (``XACK``) only once the sink has
accepted it. On start it first re-reads the entries it was given and did not acknowledge
(``XREADGROUP ... 0``), then takes over entries another consumer of the group left pending
for longer than ``claim_idle_s``, then reads new ones (``>``): a pipeline killed at any point
and started again has no gap, and repeats only records it had not acknowledged.

With several partitions the group is one consumer group of that name on each partition's
log (the count is read from Redis, :func:`bus.stream.partitions.bus_keyspace`): each step above runs
on every partition, new records are read with one blocking read in flight per partition
(:class:`bus.decisionlog.reader.PartitionReads`), and each record is acknowledged on its own
partition's log. Records of one partition are delivered in order.

On a Redis without stream counters (6.2) new records are read by :class:`bus.decisionlog.readcount.CountedReads`,
which counts what the group read, for the gateway's count of records trimmed unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import logging
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any, Final

import orjson
import redis.asyncio as aioredis

from bus.decisionlog.audit import RecordFilter, Window, read_window
from bus.decisionlog.ocsf import ocsf_event
from bus.decisionlog.readcount import CountedReads, has_stream_counters
from bus.decisionlog.reader import LogEntry, PartitionReads, RawEntry, merge_order
from bus.errors import BusUnavailable, ConfigError, ProtocolError, RedisCommandError
from bus.redis.connection import connect, read_streams, redis_errors
from bus.redis.entries import entry_ms
from bus.redis.keys import Keyspace
from bus.runtime.auditmetrics import SINK_KINDS, SinkCounters
from bus.runtime.retry import BackgroundTask, Backoff
from bus.stream.partitions import bus_keyspace
from bus.stream.protocol import LogRecord, now_ms
from hookbus.audit.delivery import Item, Sink, Stopping

logger = logging.getLogger("hookbus.audit.command")

#: The columns of ``--format csv``, in this order (docs/audit-formats.md); nested values are JSON text.
#: New columns go at the end, so that a reader taking columns by position keeps working.
CSV_COLUMNS: Final = (
    "log_id",
    "id",
    "time",
    "tenant",
    "session_id",
    "agent",
    "agent_id",
    "agent_type",
    "event",
    "tool_name",
    "tool_use_id",
    "decision",
    "reason",
    "outcome",
    "fail_open",
    "latency_ms",
    "revision",
    "hooks",
    "shadow",
    "masked",
    "input",
    "output",
    "token_id",
    "client_address",
)
_FORMULA_START: Final = ("=", "+", "-", "@", "\t", "\r")
_LINE_BREAK: Final = re.compile(r"(\r\n|\r|\n)")  # kept in the split: the cell keeps its breaks
_READ_BLOCK_MS: Final = 1000
_LAG_EVERY_S: Final = 1.0


def record_json(log_id: str, record: LogRecord) -> dict[str, Any]:
    """A record as exported: its log entry id, then :meth:`LogRecord.to_json`."""
    return {"log_id": log_id, **record.to_json()}


#: How each JSON ``--format`` writes a record: hookbus's own fields, or an OCSF event (:mod:`bus.decisionlog.ocsf`).
RECORD_FORMATS: Final[dict[str, Callable[[str, LogRecord], dict[str, Any]]]] = {
    "jsonl": record_json,
    "ocsf": ocsf_event,
}


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    # A spreadsheet runs a cell, or a line of one, that starts like a formula: agents choose these strings.
    parts = _LINE_BREAK.split(str(value))  # lines at even indices, the breaks between them at odd ones
    return "".join(
        "'" + part if i % 2 == 0 and part.startswith(_FORMULA_START) else part for i, part in enumerate(parts)
    )


async def export(
    redis_url: str, keys: Keyspace, window: Window, passes: RecordFilter, out: IO[str], *, fmt: str = "jsonl"
) -> int:
    """Write every record of ``window`` that ``passes`` to ``out``; returns how many."""
    if fmt not in ("csv", *RECORD_FORMATS):
        raise ConfigError(f"--format must be jsonl, csv or ocsf (got {fmt!r})")
    view = RECORD_FORMATS.get(fmt, record_json)
    client = connect(redis_url, socket_timeout_s=30.0)
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL) if fmt == "csv" else None
    if writer is not None:
        writer.writerow(CSV_COLUMNS)
    written = 0
    try:
        with redis_errors(redis_url):
            keys = await bus_keyspace(client, keys)
            async for log_id, record in read_window(client, keys, window, passes):
                data = view(log_id, record)
                if writer is not None:
                    writer.writerow([_cell(data.get(column)) for column in CSV_COLUMNS])
                else:
                    out.write(orjson.dumps(data).decode() + "\n")
                written += 1
    finally:
        await client.aclose()
    out.flush()
    return written


class Follower:
    """One consumer of group ``group`` on the decision log (every partition's), delivering to ``sink``."""

    def __init__(
        self,
        redis_url: str,
        keys: Keyspace,
        group: str,
        sink: Sink,
        *,
        consumer: str = "follower",
        start: str = "oldest",
        claim_idle_s: float = 60.0,
        fmt: str = "jsonl",
        passes: RecordFilter | None = None,
        counters: SinkCounters | None = None,
        linger_s: float = 0.0,
    ) -> None:
        if not group.strip():
            raise ConfigError("--group must not be empty")
        if fmt not in RECORD_FORMATS:
            raise ConfigError(f"--format must be jsonl or ocsf (got {fmt!r})")
        self.view = RECORD_FORMATS[fmt]
        if start not in ("oldest", "now"):
            raise ConfigError(f"--start must be oldest or now (got {start!r})")
        self.redis_url = redis_url
        self.keys = keys
        self.group = group
        self.consumer = consumer
        self.sink = sink
        self.start = start
        self.claim_idle_ms = int(claim_idle_s * 1000)
        # The live reads block for _READ_BLOCK_MS; a Redis that stops answering is an outage to
        # say and wait out after the socket timeout, not a silent wait.
        self.redis: aioredis.Redis = connect(redis_url)
        #: After a read shorter than a batch, how long to wait for more before delivering.
        self.linger_s = linger_s
        #: Only records that pass go to the sink; the others are acknowledged unsent.
        self.passes = passes
        self.counters = counters
        #: Records acknowledged by this process.
        self.delivered = 0
        #: Records acknowledged unsent: they did not pass ``passes``.
        self.filtered = 0
        #: Write time (epoch ms) of the oldest record in hand that the sink has not accepted.
        self._in_hand_ms: int | None = None
        #: New records' reads where Redis does not count what a group read (None: it does).
        self.counted: CountedReads | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver until ``stop`` is set (then stop after the record in hand); Redis outages are waited out."""
        backoff = Backoff(cap_s=5.0)
        logger.info("following the decision log as group %s (consumer %s)", self.group, self.consumer)
        gauge = BackgroundTask(self._report_lag, "hookbus-audit-lag")
        gauge.start()
        try:
            while not stop.is_set():
                try:
                    with redis_errors(self.redis_url):
                        self.keys = await bus_keyspace(self.redis, self.keys)
                        await self._ensure_groups()
                        await self._count_reads()
                        await self._drain_own_pending(stop)
                        await self._claim_abandoned(stop)
                        await self._follow(stop)
                    return
                except BusUnavailable as exc:
                    if backoff.failures == 0:
                        logger.warning("%s; retrying", exc)
                    await backoff.wait(stop)
                except RedisCommandError as exc:
                    if exc.code != "NOGROUP":
                        raise
                    logger.warning("the decision log or group %s was deleted; creating it again", self.group)
                    await backoff.wait(stop)
                except Stopping:
                    return
        finally:
            await gauge.stop()
            await self.sink.aclose()
            await self.redis.aclose()

    async def _report_lag(self) -> None:
        """Keep ``hookbus_audit_sink_lag_seconds`` current, also while the sink retries."""
        if self.counters is None:
            return
        while True:
            held = self._in_hand_ms
            self.counters.lag_seconds.set(max(0.0, (now_ms() - held) / 1000) if held is not None else 0.0)
            await asyncio.sleep(_LAG_EVERY_S)

    async def _ensure_groups(self) -> None:
        for partition in self.keys.all_partitions:
            try:
                with redis_errors(self.redis_url):
                    await self.redis.xgroup_create(
                        self.keys.decision_log(partition),
                        self.group,
                        id="$" if self.start == "now" else "0",
                        mkstream=True,
                    )
                logger.info(
                    "created consumer group %s at the %s of the log%s",
                    self.group,
                    "end" if self.start == "now" else "start",
                    f" of partition {partition}" if self.keys.partitions > 1 else "",
                )
            except RedisCommandError as exc:
                if exc.code != "BUSYGROUP":
                    raise

    async def _count_reads(self) -> None:
        """Read new records counted (:attr:`counted`) when this Redis does not count them itself."""
        counters = await has_stream_counters(self.redis, self.keys.decision_log(0))
        self.counted = None if counters else CountedReads(self.redis, self.keys, self.group, self.consumer)

    async def _read(self, partition: int, from_id: str, block_ms: int | None) -> list[RawEntry]:
        if from_id == ">" and self.counted is not None:
            return await self.counted.read(partition, self.sink.batch, block_ms)
        response = await read_streams(
            self.redis,
            {self.keys.decision_log(partition): from_id},
            group=self.group,
            consumer=self.consumer,
            count=self.sink.batch,
            block_ms=block_ms,
        )
        return [entry for _, entries in response or () for entry in entries]

    async def _drain_own_pending(self, stop: asyncio.Event) -> None:
        for partition in self.keys.all_partitions:
            after = "0"
            while not stop.is_set():
                entries = await self._read(partition, after, None)
                if not entries:
                    break
                await self._deliver([LogEntry(partition, entry_id, fields) for entry_id, fields in entries], stop)
                after = entries[-1][0].decode()

    async def _claim_abandoned(self, stop: asyncio.Event) -> None:
        """Take over what other consumers of the group left pending (JUSTID: Redis 6.2 answers an
        entry trimmed while pending with a nil that has no id; read each entry by its id instead)."""
        for partition in self.keys.all_partitions:
            if stop.is_set():
                return
            log = self.keys.decision_log(partition)
            ids: list[bytes] = await self.redis.xautoclaim(
                log, self.group, self.consumer, self.claim_idle_ms, "0-0", count=1000, justid=True
            )
            if not ids:
                continue
            logger.info("took over %d records another consumer of %s left unacknowledged", len(ids), self.group)
            for start in range(0, len(ids), self.sink.batch):
                entries: list[LogEntry] = []
                for entry_id in ids[start : start + self.sink.batch]:
                    found = await self.redis.xrange(log, min=entry_id, max=entry_id)
                    entries.append(LogEntry(partition, entry_id, found[0][1] if found else None))
                await self._deliver(entries, stop)

    async def _follow(self, stop: asyncio.Event) -> None:
        reads = PartitionReads(self.keys.all_partitions, lambda partition: self._read(partition, ">", _READ_BLOCK_MS))
        try:
            while not stop.is_set():
                entries = await self._top_up(await reads.next(), stop)
                for start in range(0, len(entries), self.sink.batch):
                    await self._deliver(entries[start : start + self.sink.batch], stop)
        finally:
            # Records a cancelled read was given stay pending for this consumer: read again at the next start.
            await reads.aclose()

    async def _top_up(self, entries: list[LogEntry], stop: asyncio.Event) -> list[LogEntry]:
        """After a short read, wait ``linger_s`` and read what else the partitions that answered
        hold: a trickle goes out in batches, not a request per record. (Those partitions have no
        read in flight, so each one's records stay in order.)"""
        if not entries or len(entries) >= self.sink.batch or self.linger_s <= 0:
            return entries
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.linger_s):
                await stop.wait()
        if stop.is_set():
            return entries
        more = list(entries)
        for partition in sorted({entry.partition for entry in entries}):
            found = await self._read(partition, ">", None)
            more.extend(LogEntry(partition, entry_id, fields) for entry_id, fields in found)
        more.sort(key=merge_order)
        return more

    async def _deliver(self, entries: Sequence[LogEntry], stop: asyncio.Event) -> None:
        items: list[Item] = []
        may_pass = self.passes.entry_filter() if self.passes is not None else None
        for entry in entries:
            if not entry.fields:  # trimmed from the log (retention) while it was pending
                logger.warning("record %s was trimmed from the log before it was delivered", entry.log_id)
                if self.counters is not None:
                    self.counters.trimmed.inc()
                continue
            if may_pass is not None and not may_pass(entry.fields):
                self.filtered += 1
                continue
            try:
                record = LogRecord.decode(entry.fields)
            except ProtocolError as exc:
                logger.warning("skipping %s: %s", entry.log_id, exc)
                continue
            if self.passes is not None and not self.passes.matches(record):
                self.filtered += 1
                continue
            items.append((entry.log_id, self.view(entry.log_id, record)))
        if items:
            self._in_hand_ms = min(entry_ms(entry.entry_id) for entry in entries)
            try:
                await self.sink.deliver(items, stop)  # raises Stopping, and then nothing is acknowledged
            finally:
                self._in_hand_ms = None
            if self.counters is not None:
                self.counters.lag_seconds.set(0.0)
        by_partition: dict[int, list[bytes]] = {}
        for entry in entries:
            by_partition.setdefault(entry.partition, []).append(entry.entry_id)
        for partition, ids in by_partition.items():
            await self.redis.xack(self.keys.decision_log(partition), self.group, *ids)
        self.delivered += len(items)


def _on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)


async def follow(follower: Follower) -> int:
    """Run ``follower`` until SIGINT or SIGTERM; returns how many records it delivered."""
    stop = asyncio.Event()
    _on_signals(stop)
    await follower.run(stop)
    logger.info("stopped following as group %s: %d records delivered", follower.group, follower.delivered)
    return follower.delivered


def export_command(args: Any, redis_url: str, keys: Keyspace) -> int:
    """``hookbus audit export``."""
    window = Window.parse(args.since, args.until)
    passes = RecordFilter.of(
        tenants=args.tenant, sessions=args.session, events=args.event, decisions=args.decision, agents=args.agent
    )
    count = asyncio.run(export(redis_url, keys, window, passes, sys.stdout, fmt=args.format))
    print(f"hookbus: exported {count} records", file=sys.stderr)
    return 0


def follow_command(args: Any, redis_url: str, keys: Keyspace) -> int:
    """``hookbus audit follow``."""
    from bus.runtime.metrics import process_metrics
    from bus.runtime.metrics_server import start_http_server
    from hookbus.audit.options import sink_options
    from hookbus.audit.sinks import open_sink

    options = sink_options(args)
    if args.format == "ocsf" and args.sink.startswith("otlp:"):
        raise ConfigError("--format ocsf writes OCSF events; the otlp sink sends OpenTelemetry log records")
    passes = RecordFilter.of(tenants=args.tenant, events=args.event, decisions=args.decision, agents=args.agent)
    metrics = process_metrics()
    kind = args.sink.partition(":")[0]
    counters = metrics.audit().sink(args.group, kind) if kind in SINK_KINDS else None
    host = args.metrics_host or os.environ.get("HOOKBUS_METRICS_HOST") or "127.0.0.1"
    server = start_http_server(metrics, args.metrics_port, host, os.environ.get("HOOKBUS_METRICS_TOKEN") or None)

    async def main() -> None:  # the sink's HTTP client belongs to the running loop
        sink = open_sink(args.sink, options, counters=counters)
        await follow(
            Follower(
                redis_url,
                keys,
                args.group,
                sink,
                consumer=args.consumer,
                start=args.start,
                claim_idle_s=args.claim_idle,
                fmt=args.format,
                passes=passes if passes != RecordFilter() else None,
                counters=counters,
                linger_s=args.linger,
            )
        )

    try:
        asyncio.run(main())
    finally:
        if server is not None:
            server.shutdown()
    return 0


__all__ = [
    "CSV_COLUMNS",
    "RECORD_FORMATS",
    "Follower",
    "export",
    "export_command",
    "follow",
    "follow_command",
    "record_json",
]
