"""Records trimmed from the decision log before an audit consumer group read them
(:mod:`bus.decisionlog.trimmed`), and the gateway observer's ``hookbus_audit_trimmed_unread_total``.

Counting needs Redis 7's stream counters: these tests run on Debian's ``/usr/bin/redis-server``
(Redis >= 7), started on a free port for the module; on the suite's Redis 6.2 nothing is counted.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis as redis_sync

from bus.decisionlog import trimmed
from bus.decisionlog.audit import log_state
from bus.decisionlog.trimmed import count_trimmed_unread
from bus.redis.keys import Keyspace
from bus.runtime.children import die_with_parent
from bus.runtime.metrics import Metrics
from gateway.observer import Observer
from hookbus.platform.redis_server import free_port
from tests.conftest import BusProbe
from tests.hookbus.audit.test_command import record, write
from tests.redis_sentinel import SentinelUnavailable, find_redis7

FOUR = Keyspace(partitions=4)
pytestmark = pytest.mark.system  # a Redis 7 of its own


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


@pytest.fixture
async def bus7(redis7: str) -> AsyncIterator[BusProbe]:
    probe = BusProbe(redis7)
    await probe.redis.flushall()
    yield probe
    await probe.redis.aclose()


async def test_each_record_trimmed_unread_is_counted_once(bus7: BusProbe) -> None:
    bus = bus7
    log = bus.keys.decision_log()
    await write(bus, *[(i, record(i)) for i in range(10)])
    await bus.redis.xgroup_create(log, "siem", id="0")
    await bus.redis.xgroup_create(log, "late", id="$")
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    await bus.redis.xreadgroup("siem", "c", {log: ">"}, count=3)  # read 3, then it stopped
    await bus.redis.xtrim(log, maxlen=2, approximate=False)  # retention took 8: 5 of them unread
    assert await count_trimmed_unread(bus.redis, bus.keys) == {"siem": 5}
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}  # counted once
    state = {g.name: g for g in (await log_state(bus.redis, bus.keys)).groups}
    assert state["siem"].lag == 5  # 3 pending + the 2 kept: the read counter was set right

    await bus.redis.xreadgroup("siem", "c", {log: ">"}, count=10)
    await write(bus, *[(i, record(i)) for i in range(10, 20)])
    await bus.redis.xtrim(log, maxlen=3, approximate=False)  # 7 trimmed unread by siem, 7 by late...
    await bus.redis.xreadgroup("siem", "c", {log: ">"}, count=10)  # ...and siem reads past the gap before a look
    assert await count_trimmed_unread(bus.redis, bus.keys) == {"siem": 7, "late": 7}


async def test_partitions_add_up_and_the_observer_counts_each_group(bus7: BusProbe) -> None:
    bus = bus7
    for partition in range(4):
        log = FOUR.decision_log(partition)
        for i in range(5):
            await bus.redis.xadd(log, record(i).encode(), id=f"{1000 + i}-0")  # type: ignore[arg-type]
        await bus.redis.xgroup_create(log, "siem", id="0")
        await bus.redis.xreadgroup("siem", "c", {log: ">"}, count=1)
        await bus.redis.xtrim(log, maxlen=1 if partition else 5, approximate=False)  # 3 unread gone, 0 on p0
    m = Metrics()
    observer = Observer(bus.url, FOUR, metrics=m)
    try:
        assert await observer.observe()
        assert m.value("hookbus_audit_trimmed_unread_total", group="siem") == 9
        assert await observer.observe()
    finally:
        await observer.stop()
    assert m.value("hookbus_audit_trimmed_unread_total", group="siem") == 9


async def test_redis_6_counts_nothing_and_changes_nothing(bus: BusProbe) -> None:
    log = bus.keys.decision_log()
    await write(bus, *[(i, record(i)) for i in range(5)])
    await bus.redis.xgroup_create(log, "siem", id="0")
    await bus.redis.xtrim(log, maxlen=1, approximate=False)
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    assert (await bus.redis.xinfo_groups(log))[0]["last-delivered-id"] == b"0-0"


async def test_redis_6_says_it_counts_nothing_and_names_each_group_behind_the_retention_once(
    bus: BusProbe, caplog: pytest.LogCaptureFixture
) -> None:
    log = bus.keys.decision_log()
    await write(bus, *[(i, record(i)) for i in range(6)])
    if "entries-added" in await bus.redis.xinfo_stream(log):
        pytest.skip("the suite's Redis has stream counters")
    trimmed._Without.said, trimmed._Without.behind = False, set()
    await bus.redis.xgroup_create(log, "siem", id="0")
    await bus.redis.xgroup_create(log, "idle", id="0")  # never read: lost nothing it had read
    await bus.redis.xgroup_create(log, "live", id="0")
    await bus.redis.xreadgroup("siem", "c", {log: ">"}, count=2)
    await bus.redis.xreadgroup("live", "c", {log: ">"}, count=5)
    await bus.redis.xtrim(log, maxlen=1, approximate=False)
    caplog.set_level(logging.WARNING, "hookbus.audit.trimmed")
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3 and "no stream counters" in said[0]
    assert {m.split()[2] for m in said[1:]} == {"siem", "live"}
    caplog.clear()
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    assert caplog.records == []  # said once
    await bus.redis.xreadgroup("siem", "c", {log: ">"}, count=10)  # read past the gap: no longer behind
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    assert caplog.records == []
    await write(bus, *[(i, record(i)) for i in range(6, 9)])
    await bus.redis.xtrim(log, maxlen=1, approximate=False)
    assert await count_trimmed_unread(bus.redis, bus.keys) == {}
    assert [r.getMessage().split()[2] for r in caplog.records] == ["siem"]  # behind again: said again
