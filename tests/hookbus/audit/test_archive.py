"""``hookbus audit archive`` (:mod:`hookbus.audit.archive`): a real Redis, real files, real child processes.

The archiver is an audit follower that acknowledges records only once their Parquet files are in
place: killed at any point it loses nothing and, restarted, writes the same files again rather
than second copies; a write that fails keeps the records pending and is tried again.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.decisionlog.archivesql import ReadOnlyQuery, archive_files
from bus.decisionlog.audit import log_state
from bus.decisionlog.parquet import ArchiveTarget, Rows, Written, day_of
from bus.errors import ArchiveError
from bus.stream.partitions import bus_keyspace
from hookbus.audit.archive import Archiver
from hookbus.audit.query import query
from tests.bus.decisionlog.archive_records import AT_MS, fields_of, log_record
from tests.conftest import REPO, BusProbe, async_wait_for, clean_env
from tests.hookbus.audit.test_command import write_four


async def write(bus: BusProbe, first: int, count: int, tenants: Sequence[str] = ("acme", "globex")) -> None:
    """XADD records ``first`` .. ``first + count - 1``, alternating tenants (auto ids)."""
    async with bus.redis.pipeline(transaction=False) as pipe:
        for i in range(first, first + count):
            pipe.xadd(bus.keys.decision_log(), fields_of(log_record(i, tenant=tenants[i % len(tenants)])))  # type: ignore[arg-type]
        await pipe.execute()


def archived(root: Path) -> list[tuple[str, str]]:
    """``(log_id, id)`` of every archived record."""
    files = archive_files(str(root)) if root.exists() else []
    if not files:
        return []
    with ReadOnlyQuery(files) as db:
        _, rows = db.run("SELECT log_id, id FROM records ORDER BY log_id")
        return [(str(a), str(b)) for a, b in rows]


def archived_count(root: Path) -> int:
    """How many records are archived now, while an archiver runs: -1 when a file it was
    replacing (a compaction at its start) went between listing the files and opening them."""
    try:
        return len(archived(root))
    except ArchiveError:
        return -1


async def lag(bus: BusProbe, group: str = "archive") -> int:
    state = await log_state(bus.redis, bus.keys)
    return next((g.lag for g in state.groups if g.name == group), -1)


async def run_until(archiver: Archiver, done: Any, timeout_s: float = 20) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(archiver.run(stop))
    try:
        await async_wait_for(done, timeout_s=timeout_s)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_every_record_is_archived_once_and_acknowledged_after(bus: BusProbe, tmp_path: Path) -> None:
    await write(bus, 0, 30)
    archiver = Archiver(bus.url, bus.keys, ArchiveTarget(str(tmp_path)), batch=1000, every_s=0.1)
    await run_until(archiver, lambda: archiver.delivered == 30)
    rows = archived(tmp_path)
    assert len(rows) == 30 and len(set(rows)) == 30
    assert await lag(bus) == 0
    assert sorted(p.parent.name for p in tmp_path.rglob("*.parquet")) == ["tenant=acme", "tenant=globex"]
    assert {p.parent.parent.name for p in tmp_path.rglob("*.parquet")} == {f"day={day_of(AT_MS)}"}


class _Crash(Exception):
    pass


class DiesAfterWriting(ArchiveTarget):
    """Puts the files in place, then the process dies before it acknowledges them: the worst moment."""

    def write(self, parts: Any) -> list[Written]:
        super().write(parts)
        raise _Crash


async def test_a_crash_between_writing_and_acknowledging_writes_the_same_files_again(
    bus: BusProbe, tmp_path: Path
) -> None:
    await write(bus, 0, 40)
    with pytest.raises(_Crash):
        await Archiver(bus.url, bus.keys, DiesAfterWriting(str(tmp_path)), batch=1000, every_s=0.1).run(asyncio.Event())
    first_files = sorted(tmp_path.rglob("*.parquet"))
    assert len(archived(tmp_path)) == 40 and await lag(bus) == 40  # written, nothing acknowledged
    await write(bus, 40, 10)
    archiver = Archiver(bus.url, bus.keys, ArchiveTarget(str(tmp_path)), batch=1000, every_s=0.1)
    await run_until(archiver, lambda: archiver.delivered == 50)
    rows = archived(tmp_path)
    assert len(rows) == 50 and len(set(rows)) == 50  # the 40 once: their files were written again, same names
    assert set(first_files) <= set(tmp_path.rglob("*.parquet"))
    assert await lag(bus) == 0


async def test_records_read_ahead_of_a_crash_are_written_once_with_the_flush_before_it(
    bus: BusProbe, tmp_path: Path
) -> None:
    await write(bus, 0, 40)
    with pytest.raises(_Crash):
        await Archiver(bus.url, bus.keys, DiesAfterWriting(str(tmp_path)), batch=1000, every_s=0.1).run(asyncio.Event())
    await write(bus, 40, 10)
    # The next read, taken while the flush was being written: pending too, in no file.
    read = await bus.redis.xreadgroup("archive", "archiver", {bus.keys.decision_log(): ">"}, count=100)
    assert sum(len(entries) for _, entries in read) == 10 and await lag(bus) == 50
    archiver = Archiver(bus.url, bus.keys, ArchiveTarget(str(tmp_path)), batch=1000, every_s=0.1)
    await run_until(archiver, lambda: archiver.delivered == 50)
    rows = archived(tmp_path)
    assert len(rows) == 50 and len(set(rows)) == 50  # the 40 in the first files only, the 10 once
    assert await lag(bus) == 0


async def test_a_write_that_fails_says_so_keeps_the_records_pending_and_resumes(
    bus: BusProbe, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await write(bus, 0, 12)
    blocker = tmp_path / f"day={day_of(AT_MS)}"
    blocker.write_text("not a folder")  # where the day's folder must go
    archiver = Archiver(bus.url, bus.keys, ArchiveTarget(str(tmp_path)), batch=1000, every_s=0.1, max_delay_s=0.2)
    stop = asyncio.Event()
    task = asyncio.create_task(archiver.run(stop))
    try:
        with caplog.at_level(logging.WARNING, logger="hookbus.audit.archive"):
            await async_wait_for(lambda: "cannot write the archive at" in caplog.text, timeout_s=10)
        line = next(r.getMessage() for r in caplog.records if "cannot write the archive" in r.getMessage())
        assert "\n" not in line and "12 records stay pending in Redis (group archive)" in line
        assert (await bus.redis.xpending(bus.keys.decision_log(), "archive"))["pending"] == 12
        assert archiver.delivered == 0
        blocker.unlink()  # room again
        await async_wait_for(lambda: archiver.delivered == 12, timeout_s=15)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert len(archived(tmp_path)) == 12 and await lag(bus) == 0


async def test_records_are_written_by_count_or_by_time(bus: BusProbe, tmp_path: Path) -> None:
    await write(bus, 0, 25, tenants=("acme",))
    by_count = Archiver(bus.url, bus.keys, ArchiveTarget(str(tmp_path / "a")), group="a", batch=10, every_s=3600)
    await run_until(by_count, lambda: by_count.delivered == 20)  # two full batches; the 5 left wait for time...
    assert by_count.delivered == 25 and by_count.files == 3  # ...or the stop, which writes them
    by_time = Archiver(bus.url, bus.keys, ArchiveTarget(str(tmp_path / "b")), group="b", batch=10_000, every_s=0.2)
    stop = asyncio.Event()
    task = asyncio.create_task(by_time.run(stop))
    try:
        await async_wait_for(lambda: by_time.delivered == 25, timeout_s=10)  # a batch never full: time writes it
        await write(bus, 25, 3, tenants=("acme",))
        await async_wait_for(lambda: by_time.delivered == 28, timeout_s=10)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert by_time.files == 2


# -- as a child process ------------------------------------------------------------------------------


def archive_process(
    redis_url: str, root: Path, log: Path, *extra: str, fsize: int | None = None
) -> subprocess.Popen[bytes]:
    def limit() -> None:  # in the child: a file-size limit stands in for a full disk
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.RLIM_INFINITY))

    with log.open("ab") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "hookbus", "audit", "archive", "--redis-url", redis_url, "--to", str(root), *extra],
            cwd=REPO,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=limit if fsize is not None else None,  # no threads in the child yet
        )


@pytest.mark.timeout(120)
async def test_an_archiver_killed_mid_stream_loses_nothing_and_writes_nothing_twice(
    bus: BusProbe, tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    root, log = tmp_path / "archive", tmp_path / "archiver.log"
    first = archive_process(bus.url, root, log, "--batch", "300", "--every", "0.2")
    children.append(first)
    total = 0
    while not any(root.rglob("*.parquet")) or total < 1500:  # records keep coming while it writes
        await write(bus, total, 100)
        total += 100
        await asyncio.sleep(0.01)  # a stream of records, not a synchronisation
    os.kill(first.pid, signal.SIGKILL)
    await asyncio.to_thread(first.wait, 10)
    await write(bus, total, 500)  # while no archiver runs
    total += 500
    second = archive_process(bus.url, root, log, "--batch", "300", "--every", "0.2")
    children.append(second)
    await async_wait_for(lambda: archived_count(root) >= total, timeout_s=60, interval_s=0.2)
    os.kill(second.pid, signal.SIGTERM)
    await asyncio.to_thread(second.wait, 10)
    rows = archived(root)
    assert len(rows) == total and len(set(rows)) == total
    assert await lag(bus) == 0 and second.returncode == 0
    assert not list(root.rglob("*.tmp"))


@pytest.mark.timeout(90)
async def test_a_full_disk_is_said_in_one_line_and_the_archive_resumes_when_there_is_room(
    bus: BusProbe, tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    root, log = tmp_path / "archive", tmp_path / "archiver.log"
    await write(bus, 0, 200)
    child = archive_process(bus.url, root, log, "--every", "0.1", fsize=2000)
    children.append(child)
    await async_wait_for(lambda: b"cannot write the archive" in log.read_bytes(), timeout_s=30)
    [line] = [x for x in log.read_text().splitlines() if "cannot write the archive" in x]
    assert "File too large" in line and "200 records stay pending in Redis (group archive), retrying" in line
    assert (await bus.redis.xpending(bus.keys.decision_log(), "archive"))["pending"] == 200
    assert archived(root) == [] and not list(root.rglob("*.tmp"))  # nothing half-written left behind
    resource.prlimit(child.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    await async_wait_for(lambda: archived_count(root) == 200, timeout_s=60, interval_s=0.2)
    await async_wait_for(lambda: _no_lag(bus), timeout_s=10)
    os.kill(child.pid, signal.SIGTERM)
    await asyncio.to_thread(child.wait, 10)
    assert "wrote the archive at" in log.read_text()


async def _no_lag(bus: BusProbe) -> bool:
    return await lag(bus) == 0


def test_rows_type_is_what_the_writer_takes() -> None:
    assert Rows().table().num_rows == 0


async def test_every_partition_is_archived_and_queried_each_record_once(bus: BusProbe, tmp_path: Path) -> None:
    events = await write_four(bus, 20)  # four partitions; partitions 0 and 1 (2 and 3) share entry ids
    archiver = Archiver(bus.url, bus.keys, ArchiveTarget(str(tmp_path)), batch=1000, every_s=0.1)
    await run_until(archiver, lambda: archiver.delivered == 20)
    rows = archived(tmp_path)
    assert sorted(event for _, event in rows) == events and len(set(rows)) == 20
    assert len({log_id for log_id, _ in rows}) == 10  # the same log_id in two partitions: told apart by id
    out = io.StringIO()
    await write_four(bus, 4, start=20)  # not archived yet: the query reads them from Redis
    await query(
        "SELECT count(*) AS n, count(DISTINCT id) AS d FROM records", str(tmp_path), bus.url, bus.keys, out, fmt="jsonl"
    )
    assert orjson.loads(out.getvalue()) == {"n": 24, "d": 24}
    assert (await bus_keyspace(bus.redis, bus.keys)).partitions == 4
