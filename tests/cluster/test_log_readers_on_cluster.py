"""The decision-log readers on a real Redis Cluster: four partitions' logs in different slots,
each read with commands of its own (a command naming two of them would be refused: CROSSSLOT)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import orjson
import pytest

from bus.decisionlog.archivesql import ReadOnlyQuery, archive_files
from bus.decisionlog.audit import RecordFilter, Window, log_state, read_window
from bus.decisionlog.chain import record_digest
from bus.decisionlog.parquet import ArchiveTarget
from bus.decisionlog.readcount import CountedReads
from bus.redis.connection import connect
from bus.redis.keys import WORK_STREAM_MAXLEN, Keyspace
from bus.redis.urls import cluster_url
from bus.runtime.metrics import Metrics
from bus.stream.partitions import claim_layout
from bus.stream.protocol import LogRecord
from bus.stream.settle import APPEND_RECORD
from gateway.decisionlog.tail import Cursor, LogTail, Subscriber
from gateway.observer import Observer
from hookbus.audit.archive import Archiver
from hookbus.audit.command import Follower, export
from hookbus.audit.query import query
from hookbus.audit.sinks import JsonlSink
from hookbus.tail import tail
from tests.conftest import async_wait_for

FOUR = Keyspace(partitions=4)
AT_MS = 1_700_000_000_000


def record(i: int) -> LogRecord:
    return LogRecord(
        event_id=f"ev-{i:03d}",
        event="PreToolUse",
        tenant="acme",
        session_id=f"s-{i % 4}",
        outcome="decided",
        decision="none",
        output={},
        payload=orjson.dumps({"n": i}),
        received_ms=AT_MS + i,
        decided_ms=AT_MS + i,
        tool_name="Bash",
    )


@pytest.mark.timeout(60)
async def test_every_reader_reads_four_partitions_of_a_cluster(
    redis_cluster_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = cluster_url(redis_cluster_url)
    redis = connect(url)
    try:
        await claim_layout(redis, FOUR)
        for i in range(40):  # record i in partition i % 4, ids shared by pairs of partitions
            await redis.xadd(FOUR.decision_log(i % 4), record(i).encode(), id=f"{AT_MS + i // 2}-0")  # type: ignore[arg-type]
        events = [f"ev-{i:03d}" for i in range(40)]

        window = [r.event_id async for _, r in read_window(redis, FOUR, Window(), RecordFilter(), page=3)]
        assert window == events
        out = io.StringIO()
        assert await export(url, Keyspace(), Window(), RecordFilter(), out) == 40
        assert [json.loads(line)["id"] for line in out.getvalue().splitlines()] == events

        path = tmp_path / "audit.jsonl"
        stop = asyncio.Event()
        following = asyncio.create_task(Follower(url, Keyspace(), "siem", JsonlSink(str(path))).run(stop))
        await async_wait_for(lambda: path.exists() and len(path.read_text().splitlines()) == 40, timeout_s=20)
        stop.set()
        await asyncio.wait_for(following, 10)
        assert sorted(json.loads(line)["id"] for line in path.read_text().splitlines()) == events
        state = await log_state(redis, FOUR)
        assert state.length == 40 and [(g.name, g.pending, g.lag) for g in state.groups] == [("siem", 0, 0)]

        async with asyncio.timeout(20):
            await tail(url, Keyspace(), from_start=True, count=40, as_json=True)
        assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == events

        log_tail = LogTail(url, FOUR)
        subscriber = Subscriber(lambda item: True)
        cursor = await log_tail.join(subscriber)
        try:
            assert cursor == Cursor.at([f"{AT_MS + 18 + p // 2}-0" for p in range(4)])
            history = [
                item.entry_id async for item in log_tail.history(Cursor.after(f"{AT_MS + 17}-0", 4), lambda item: True)
            ]
            assert history == [f"{AT_MS + 18}-0"] * 2 + [f"{AT_MS + 19}-0"] * 2
            for i in range(40, 44):
                await redis.xadd(FOUR.decision_log(i % 4), record(i).encode())  # type: ignore[arg-type]
            await async_wait_for(lambda: subscriber.queue.qsize() == 4, timeout_s=10)
        finally:
            await log_tail.leave(subscriber)

        m = Metrics()
        observer = Observer(url, FOUR, metrics=m)
        try:
            assert await observer.observe()
        finally:
            await observer.stop()
        assert m.value("hookbus_decision_log_length") == 44
    finally:
        await redis.aclose()


@pytest.mark.timeout(60)
async def test_the_archiver_archives_four_partitions_of_a_cluster_once(redis_cluster_url: str, tmp_path: Path) -> None:
    url = cluster_url(redis_cluster_url)
    redis = connect(url)
    try:
        await claim_layout(redis, FOUR)
        for i in range(40):  # record i in partition i % 4, ids shared by pairs of partitions
            await redis.xadd(FOUR.decision_log(i % 4), record(i).encode(), id=f"{AT_MS + i // 2}-0")  # type: ignore[arg-type]
        archiver = Archiver(url, Keyspace(), ArchiveTarget(str(tmp_path)), batch=1000, every_s=0.1)
        stop = asyncio.Event()
        archiving = asyncio.create_task(archiver.run(stop))
        try:
            await async_wait_for(lambda: archiver.delivered == 40, timeout_s=20)
        finally:
            stop.set()
            await asyncio.wait_for(archiving, 10)
        with ReadOnlyQuery(archive_files(str(tmp_path))) as db:
            _, rows = db.run("SELECT id FROM records ORDER BY id")
            assert [str(event) for (event,) in rows] == [f"ev-{i:03d}" for i in range(40)]
        state = await log_state(redis, FOUR)
        assert [(g.name, g.pending, g.lag) for g in state.groups] == [("archive", 0, 0)]

        for i in range(40, 44):  # not archived: the query reads them from the cluster
            await redis.xadd(FOUR.decision_log(i % 4), record(i).encode())  # type: ignore[arg-type]
        out = io.StringIO()
        await query(
            "SELECT count(*) AS n, count(DISTINCT id) AS d FROM records",
            str(tmp_path),
            url,
            Keyspace(),
            out,
            fmt="jsonl",
        )
        assert orjson.loads(out.getvalue()) == {"n": 44, "d": 44}
    finally:
        await redis.aclose()


@pytest.mark.timeout(60)
async def test_counted_reads_count_each_partition_of_a_cluster(redis_cluster_url: str) -> None:
    """What a follower does on a Redis without stream counters, here on a cluster (of Redis 7, made to
    read that way): each partition's read is a transaction on its slot's node, its count in that slot."""
    url = cluster_url(redis_cluster_url)
    redis = connect(url)

    async def append(partition: int, i: int) -> None:
        entry = record(i)
        keys = [FOUR.decision_log(partition), FOUR.decision_chain(partition)]
        args = [WORK_STREAM_MAXLEN, entry.meta(), entry.payload, entry.outcome, entry.fail_open]
        await redis.eval(APPEND_RECORD, 2, *keys, *args, partition, record_digest(entry))  # type: ignore[misc, arg-type]

    try:
        await claim_layout(redis, FOUR)
        for partition in range(4):
            for i in range(3):
                await append(partition, i)
            await redis.xgroup_create(FOUR.decision_log(partition), "siem", id="0")
        reads = CountedReads(redis, FOUR, "siem", "c")
        for partition in range(4):
            assert len(await reads.read(partition, 2, None)) == 2
            (last,) = await reads.read(partition, 10, None)
            assert await redis.hget(FOUR.decision_reads(partition), "siem") == b"3 " + last[0]  # type: ignore[misc]
        waiting = asyncio.create_task(reads.read(2, 10, 10_000))  # found at once, or woken from its XREAD
        await append(2, 3)
        (woken,) = await asyncio.wait_for(waiting, 10)
        assert await redis.hget(FOUR.decision_reads(2), "siem") == b"4 " + woken[0]  # type: ignore[misc]
    finally:
        await redis.aclose()
