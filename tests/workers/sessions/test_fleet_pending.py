"""Tenant counts survive the dispatcher that settled the event, and are never counted twice, on
a real Redis: the settle writes what is to count in the same atomic step as the record
(``fleet:pending``), the count removes it, and a sweep counts what a dead dispatcher left.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio

from bus.hooks.decisions import Decision
from bus.policy.loading import policy_from_text
from bus.redis.connection import connect
from bus.redis.keys import DISPATCH_GROUP, Keyspace
from bus.runtime.metrics import Metrics
from bus.runtime.sessionmetrics import session_families
from bus.session.definitions import BUCKETS, Counter, session_policy
from bus.stream.protocol import LogRecord, Reply, Request, now_ms
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import REPO, BusProbe, async_wait_for, clean_env, pre_tool_use
from workers.dispatcher.fleet import FleetCounts, pending_entry, read_entry
from workers.dispatcher.outbox import Outbox, Settle
from workers.engine.sessions import SessionOutcome

POLICY = """hookbus:
  deadlineSeconds: 30
  session:
    counters:
      pushes:
        scope: tenant
        window: 1h
        count: [{event: PreToolUse, rules: ["Bash(git push *)"]}]
        onLimit: {above: 5, tools: [Bash], for: 10m}
hooks: {}
"""
KEYS = Keyspace()
STREAM = KEYS.blocking_stream()


def pushes() -> Counter:
    return session_policy(policy_from_text(POLICY, "p.yaml")).fleet["pushes"]


def settle(tenant: str, entry_id: bytes, event_id: str) -> Settle:
    """A settled ``git push`` whose session part names the tenant counter, as the engine builds it."""
    payload = orjson.dumps(pre_tool_use("git push origin main", "s-1"))
    request = Request(event_id, "PreToolUse", tenant, payload, now_ms(), now_ms() + 10_000, "gw-test")
    record = LogRecord(
        event_id=event_id,
        event="PreToolUse",
        tenant=tenant,
        session_id="s-1",
        outcome="decided",
        decision="none",
        output={},
        payload=payload,
        received_ms=request.received_ms,
        decided_ms=now_ms(),
    )
    outcome = SessionOutcome(["I n:calls"], None, [], 60_000, 100, [pushes()])
    part = (outcome, KEYS.session_state(tenant, "s-1"), KEYS.session_index(tenant))
    return Settle(STREAM, entry_id, request, record, Reply(event_id, {}, Decision.NONE), 1000, session=part)


@pytest_asyncio.fixture
async def tenant(bus: BusProbe) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    yield name
    await bus.redis.hdel(bus.keys.freezes, name)  # type: ignore[misc]


async def counted(bus: BusProbe, tenant: str) -> int:
    raw = await bus.redis.hgetall(bus.keys.fleet_counter(tenant, pushes().field))  # type: ignore[misc]
    return sum(int(n) for n in raw.values())


async def pending_of(bus: BusProbe, tenant: str) -> list[str]:
    entries = await bus.redis.zrange(KEYS.fleet_pending(), 0, -1)
    return [e.decode() for e in entries if read_entry(e).tenant == tenant]


def test_a_pending_entry_reads_back_as_the_counters_it_names() -> None:
    counter = pushes()
    request = Request("ev-1", "PreToolUse", "acme", b"{}", now_ms(), dialect="codex")
    found = read_entry(pending_entry(request, [counter]))
    assert (found.event_id, found.tenant, found.agent) == ("ev-1", "acme", "codex")
    (back,) = found.counters
    assert (back.name, back.field, back.bucket_ms, back.scope, back.on_limit) == (
        counter.name,
        counter.field,
        counter.bucket_ms,
        counter.scope,
        counter.on_limit,
    )
    assert pending_entry(request, []) == ""


async def test_the_settle_keeps_the_count_until_it_is_sent_and_a_sweep_counts_it_once(
    bus: BusProbe, tenant: str
) -> None:
    await bus.redis.xgroup_create(STREAM, DISPATCH_GROUP, id="$", mkstream=True)
    entry = await bus.redis.xadd(STREAM, {"n": 1})
    await bus.redis.xreadgroup(DISPATCH_GROUP, "test-consumer", {STREAM: ">"})
    box = Outbox(bus.redis, KEYS, metrics=Metrics())  # no on_session: the dispatcher "dies" once it settled
    await box.start()
    try:
        op = settle(tenant, entry, f"ev-{tenant}")
        box.settle(op)
        await box.flushed()
        assert len(await pending_of(bus, tenant)) == 1 and await counted(bus, tenant) == 0
        box.settle(op)  # redelivered: its record is written, so nothing is pending again
        await box.flushed()
    finally:
        await box.stop()
    assert len(await pending_of(bus, tenant)) == 1
    fleet = FleetCounts(bus.redis, bus.keys, session_families(Metrics()))
    await fleet.sweep_once(grace_ms=10_000)  # too fresh: left to the dispatcher that settled it
    assert len(await pending_of(bus, tenant)) == 1 and await counted(bus, tenant) == 0
    await fleet.sweep_once(grace_ms=0)  # a dispatcher started later
    assert await counted(bus, tenant) == 1 and await pending_of(bus, tenant) == []
    fleet.start(op.request, [pushes()], 0)  # the first dispatcher's count, late: already counted
    await async_wait_for(lambda: not fleet._tasks, 5)
    await fleet.sweep_once(grace_ms=0)
    assert await counted(bus, tenant) == 1


async def test_a_count_sent_at_settle_leaves_nothing_pending(bus: BusProbe, tenant: str) -> None:
    fleet = FleetCounts(bus.redis, bus.keys, session_families(Metrics()))
    request = Request(f"ev-{tenant}", "PreToolUse", tenant, b"{}", now_ms())
    await bus.redis.zadd(KEYS.fleet_pending(), {pending_entry(request, [pushes()]): now_ms()})
    fleet.start(request, [pushes()], 0)
    await async_wait_for(lambda: not fleet._tasks, 5)
    assert await counted(bus, tenant) == 1 and await pending_of(bus, tenant) == []


async def test_a_count_redone_late_is_counted_in_its_bucket_against_the_window_as_of_now(
    bus: BusProbe, tenant: str
) -> None:
    """A sweep counts an event settled a window's span ago in that event's bucket, but its total
    (and so an ``onLimit`` freeze) is the window's as of now: events only the old window held
    are no longer in it, and their bucket goes."""
    counter = pushes()
    width_ms = counter.bucket_ms
    assert width_ms
    key = bus.keys.fleet_counter(tenant, counter.field)
    now_bucket = now_ms() // width_ms
    await bus.redis.hset(key, str(now_bucket - BUCKETS - 1), "5")  # type: ignore[misc]  # out of the window now
    settled_ms = now_ms() - width_ms * BUCKETS  # in the oldest bucket of the window now
    request = Request(f"ev-{tenant}", "PreToolUse", tenant, b"{}", settled_ms)
    await bus.redis.zadd(KEYS.fleet_pending(), {pending_entry(request, [counter]): settled_ms})
    fleet = FleetCounts(bus.redis, bus.keys, session_families(Metrics()))
    assert await fleet.sweep_once(grace_ms=0) >= 1
    buckets = {int(b): int(n) for b, n in (await bus.redis.hgetall(key)).items()}  # type: ignore[misc]
    assert buckets in ({settled_ms // width_ms: 1}, {now_bucket - BUCKETS: 1})  # the clock may tick a bucket meanwhile
    assert not await bus.redis.hexists(bus.keys.freezes, tenant)  # type: ignore[misc]  # 1 is not above 5
    await bus.redis.hincrby(key, str(now_ms() // width_ms), 4)  # type: ignore[misc]
    assert await fleet.count(Request(f"ev2-{tenant}", "PreToolUse", tenant, b"{}", now_ms()), [counter]) == [6]
    assert await bus.redis.hexists(bus.keys.freezes, tenant)  # type: ignore[misc]  # 6 is above 5: frozen


@pytest.mark.timeout(120)
async def test_a_dispatcher_killed_before_it_counted_loses_no_count(
    private_redis: EmbeddedRedis, tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    """A real dispatcher settles a ``git push`` but cannot send its tenant count (the counter's key
    is of the wrong type), and is SIGKILLed; once the key is right again, the next dispatcher's
    sweep counts the event once, and the same event delivered again is not counted again."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    redis = connect(private_redis.url, socket_timeout_s=5.0)
    probe = BusProbe(private_redis.url)
    tenant = "default"
    counter_key = KEYS.fleet_counter(tenant, pushes().field)
    log = tmp_path / "dispatcher.log"

    def dispatcher() -> subprocess.Popen[bytes]:
        with log.open("ab") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "hookbus", "dispatcher", "--config", str(policy)],
                env=clean_env(HOOKBUS_REDIS_URL=private_redis.url),
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        children.append(process)
        return process

    try:
        await redis.set(counter_key, "not a hash")  # the count fails: the event is settled, not counted
        first = dispatcher()
        push = Request("ev-killed", "PreToolUse", tenant, orjson.dumps(pre_tool_use("git push", "s-9")), now_ms())
        push.deadline_ms, push.reply_to = now_ms() + 30_000, "hookbus:reply:nobody"
        await redis.xadd(KEYS.blocking_stream(), push.encode())  # type: ignore[arg-type]
        record = await async_wait_for(lambda: probe.record("ev-killed"), timeout_s=30)
        assert record.outcome == "decided"
        await async_wait_for(lambda: "not counted by its tenant counters" in log.read_text(), timeout_s=30)
        first.kill()  # SIGKILL: nothing of it runs again
        first.wait(timeout=10)
        (left,) = await redis.zrange(KEYS.fleet_pending(), 0, -1)
        assert read_entry(left).event_id == "ev-killed"

        await redis.delete(counter_key)
        second = dispatcher()  # its sweep counts what the killed one left, once it is PENDING_GRACE_MS old
        await async_wait_for(lambda: _zero(redis.zcard(KEYS.fleet_pending())), timeout_s=60)
        assert [int(n) for n in (await redis.hgetall(counter_key)).values()] == [1]  # type: ignore[misc]

        # The same event delivered again (a gateway's retry): settled already, counted already.
        again = await redis.xadd(KEYS.blocking_stream(), push.encode())  # type: ignore[arg-type]
        await async_wait_for(lambda: _acknowledged(redis, again), timeout_s=30)
        second.terminate()
        assert second.wait(timeout=30) == 0
        assert [int(n) for n in (await redis.hgetall(counter_key)).values()] == [1]  # type: ignore[misc]
        assert await redis.zcard(KEYS.fleet_pending()) == 0
    finally:
        await probe.close()
        await redis.aclose()


async def _zero(count: Any) -> bool:
    return bool(await count == 0)


async def _acknowledged(redis: Any, entry_id: bytes) -> bool:
    """Whether the dispatchers' group read ``entry_id`` and has nothing pending (it was settled)."""
    (group,) = await redis.xinfo_groups(KEYS.blocking_stream())
    last = group["last-delivered-id"]
    return bool(group["pending"] == 0 and (last.encode() if isinstance(last, str) else last) == entry_id)
