"""The settle scripts: one record per event, and it says what the agent received.

Driven through the dispatcher's :class:`workers.dispatcher.outbox.Outbox` (the real writer) and the
gateway's claim script, on a real Redis.
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from bus.redis.connection import connect
from bus.redis.keys import DISPATCH_GROUP, Keyspace
from bus.runtime.replykey import key_or_process, reply_json, verify
from bus.stream.protocol import LogRecord, Reply, Request, now_ms
from bus.stream.settle import CLAIM_FAIL_OPEN
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import BusProbe, async_wait_for
from workers.dispatcher.outbox import Outbox, Settle

DENY = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny"}}


def sent_to(request: Request) -> hashlib.blake2b:
    """What a gateway checks the replies to ``request`` with (the outbox seals with the process's key)."""
    return key_or_process(None).bind(request.meta(), request.payload)


class Harness:
    def __init__(self, bus: BusProbe) -> None:
        self.bus = bus
        self.keys = Keyspace(f"t{uuid.uuid4().hex[:8]}:")
        self.outbox = Outbox(bus.redis, self.keys)
        self.claim_script = bus.redis.register_script(CLAIM_FAIL_OPEN)
        self.channel = f"{self.keys.prefix}reply:test"

    async def entry(
        self, *, blocking: bool = True, deadline_in_ms: int = 5000, fail_open: str = "", appended_ms: int = 0
    ) -> tuple[Request, bytes]:
        request = Request(
            event_id=uuid.uuid4().hex,
            event="PreToolUse" if blocking else "Notification",
            tenant="default",
            payload=b'{"session_id":"s"}',
            received_ms=now_ms(),
            deadline_ms=now_ms() + deadline_in_ms if blocking else 0,
            reply_to=self.channel if blocking else "",
            fail_open=fail_open,
        )
        stream = self.keys.blocking_stream()
        await self.bus.redis.xgroup_create(
            stream, DISPATCH_GROUP, id="0", mkstream=True
        ) if not await self.bus.redis.exists(stream) else None
        return request, await self._append(request, appended_ms)

    async def resent(self, request: Request, reason: str = "timeout") -> tuple[Request, bytes]:
        """``request`` sent again by a gateway that answered it fail-open without settling its key."""
        again = dataclasses.replace(request, fail_open=reason)
        return again, await self._append(again)

    async def _append(self, request: Request, appended_ms: int = 0) -> bytes:
        """``request`` appended (at ``appended_ms``, its entry id's time, in a new stream; default now) and read."""
        stream = self.keys.blocking_stream()
        entry_id = f"{appended_ms}-1" if appended_ms else "*"
        await self.bus.redis.xadd(stream, request.encode(), id=entry_id)  # type: ignore[arg-type]
        read = await self.bus.redis.xreadgroup(DISPATCH_GROUP, "c", {stream: ">"}, count=1)
        return bytes(read[0][1][0][0])

    async def settle(
        self, request: Request, entry_id: bytes, reply: Reply | None, outcome: str = "decided", reason: str = ""
    ) -> None:
        record = LogRecord(
            event_id=request.event_id,
            event=request.event,
            tenant="default",
            session_id="s",
            outcome=outcome,
            fail_open=reason,
            decision=reply.decision if reply else "none",
            output=reply.output if reply else {},
            payload=request.payload,
            received_ms=request.received_ms,
            decided_ms=now_ms(),
        )
        self.outbox.settle(Settle(self.keys.blocking_stream(), entry_id, request, record, reply, 1000))
        await self.outbox.flushed()

    async def claim(self, request: Request) -> Any:
        return await self.claim_script([self.keys.outcome(request.event_id)], ["timeout", 10_000])

    async def records(self, request: Request) -> list[LogRecord]:
        entries = await self.bus.redis.xrange(self.keys.decision_log())
        return [r for r in (LogRecord.decode(f) for _, f in entries) if r.event_id == request.event_id]

    async def pending(self) -> int:
        summary = await self.bus.redis.xpending(self.keys.blocking_stream(), DISPATCH_GROUP)
        return int(summary["pending"])


@pytest_asyncio.fixture
async def harness(bus: BusProbe) -> AsyncIterator[Harness]:
    h = Harness(bus)
    await h.outbox.start()
    yield h
    await h.outbox.stop()


async def assert_one_deny_logged_and_recoverable(harness: Harness, request: Request) -> None:
    """One record, decided deny, nothing pending; the gateway's claim after the deadline
    recovers the same decision (a lost reply)."""
    [record] = await harness.records(request)
    assert (record.outcome, record.fail_open, record.decision) == ("decided", "", "deny")
    assert await harness.pending() == 0
    recovered = await harness.claim(request)
    assert verify(sent_to(request), recovered) and Reply.decode(reply_json(recovered)).decision == "deny"


async def test_in_time_the_reply_is_published_and_logged_as_decided(harness: Harness) -> None:
    pubsub = harness.bus.redis.pubsub()
    await pubsub.subscribe(harness.channel)
    try:
        request, entry_id = await harness.entry()
        await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
        message = await async_wait_for(lambda: pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1))
        assert verify(sent_to(request), message["data"])  # sealed for this request (the process's key)
        assert Reply.decode(reply_json(message["data"])).decision == "deny"
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    await assert_one_deny_logged_and_recoverable(harness, request)


async def test_gateway_first_means_fail_open_in_the_log_and_no_reply(harness: Harness) -> None:
    request, entry_id = await harness.entry()
    assert await harness.claim(request) is None
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
    [record] = await harness.records(request)
    assert (record.outcome, record.fail_open) == ("fail-open", "timeout")
    assert await harness.claim(request) is None  # still fail-open: the gateway never turns
    assert await harness.pending() == 0


async def test_past_the_deadline_the_record_is_fail_open(harness: Harness) -> None:
    request, entry_id = await harness.entry(deadline_in_ms=-1)
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
    [record] = await harness.records(request)
    assert (record.outcome, record.fail_open) == ("fail-open", "timeout")
    assert await harness.claim(request) is None


async def test_a_gateway_that_failed_open_on_redis_names_its_reason(harness: Harness) -> None:
    request, entry_id = await harness.entry(fail_open="redis_unavailable")
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
    [record] = await harness.records(request)
    assert (record.outcome, record.fail_open) == ("fail-open", "redis_unavailable")


async def test_a_second_settle_writes_nothing_but_acknowledges(harness: Harness) -> None:
    request, entry_id = await harness.entry()
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
    assert len(await harness.records(request)) == 1
    nonblocking, nb_id = await harness.entry(blocking=False)
    await harness.settle(nonblocking, nb_id, None, outcome="recorded")
    await harness.settle(nonblocking, nb_id, None, outcome="recorded")
    [record] = await harness.records(nonblocking)
    assert record.outcome == "recorded"
    assert await harness.pending() == 0


async def test_at_maxmemory_nothing_is_written_or_acknowledged_until_it_fits(
    private_redis: EmbeddedRedis,
) -> None:
    probe = BusProbe(private_redis.url)
    h = Harness(probe)
    await h.outbox.start()
    admin = connect(private_redis.url)
    try:
        request, entry_id = await h.entry()
        await admin.config_set("maxmemory", 1)  # every write is refused from now on
        h.outbox.settle(
            Settle(
                h.keys.blocking_stream(),
                entry_id,
                request,
                LogRecord(
                    event_id=request.event_id,
                    event="PreToolUse",
                    tenant="default",
                    session_id="s",
                    outcome="decided",
                    decision="deny",
                    output=DENY,
                    payload=request.payload,
                    received_ms=request.received_ms,
                    decided_ms=now_ms(),
                ),
                Reply(request.event_id, DENY, "deny"),
                1000,
            )
        )
        await async_wait_for(lambda: h.outbox._backoff.failures >= 2, timeout_s=5)
        assert await h.records(request) == []
        assert await h.pending() == 1
        assert not await probe.redis.exists(h.keys.outcome(request.event_id))
        await admin.config_set("maxmemory", 0)
        await async_wait_for(lambda: h.records(request), timeout_s=10)
        assert len(await h.records(request)) == 1
        assert await h.pending() == 0
    finally:
        await h.outbox.stop()
        await admin.aclose()
        await probe.close()


async def test_answered_before_its_record_the_claim_returns_the_reply(harness: Harness) -> None:
    pubsub = harness.bus.redis.pubsub()
    await pubsub.subscribe(harness.channel)
    try:
        request, entry_id = await harness.entry()
        assert await harness.outbox.answer(request, Reply(request.event_id, DENY, "deny"))
        message = await async_wait_for(lambda: pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1))
        assert verify(sent_to(request), message["data"])
        assert Reply.decode(reply_json(message["data"])).decision == "deny"
        assert await harness.records(request) == []  # the record is not written yet
        # The gateway's deadline claim gets the answered reply, not fail-open.
        claimed = await harness.claim(request)
        assert verify(sent_to(request), claimed) and Reply.decode(reply_json(claimed)).decision == "deny"
        await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
        assert await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2) is None  # not published twice
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    await assert_one_deny_logged_and_recoverable(harness, request)


async def test_a_crash_between_answer_and_settle_leaves_one_decided_record(harness: Harness) -> None:
    request, entry_id = await harness.entry()
    assert await harness.outbox.answer(request, Reply(request.event_id, DENY, "deny"))
    # The dispatcher stopped here; the entry is re-delivered, re-evaluated and settled (twice over).
    assert await harness.outbox.answered(request) == Reply(request.event_id, DENY, "deny")
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
    [record] = await harness.records(request)
    assert (record.outcome, record.fail_open, record.decision) == ("decided", "", "deny")
    assert await harness.pending() == 0
    assert await harness.outbox.answered(request) is None  # settled


async def test_no_answer_after_the_gateway_claimed_or_past_the_deadline(harness: Harness) -> None:
    claimed, claimed_id = await harness.entry()
    assert await harness.claim(claimed) is None
    assert not await harness.outbox.answer(claimed, Reply(claimed.event_id, DENY, "deny"))
    await harness.settle(claimed, claimed_id, Reply(claimed.event_id, DENY, "deny"))
    [record] = await harness.records(claimed)
    assert (record.outcome, record.fail_open) == ("fail-open", "timeout")
    late, _ = await harness.entry(deadline_in_ms=-1)
    assert not await harness.outbox.answer(late, Reply(late.event_id, DENY, "deny"))
    assert not await harness.bus.redis.exists(harness.keys.outcome(late.event_id))


async def test_a_decision_logged_but_lost_on_its_way_gets_a_second_record_saying_fail_open(harness: Harness) -> None:
    request, entry_id = await harness.entry()
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
    # Its reply was lost with the connection, and the gateway could not claim: it answered fail-open.
    resent, resent_id = await harness.resent(request)
    await harness.settle(resent, resent_id, Reply(request.event_id, DENY, "deny"), "fail-open", "timeout")
    first, last = await harness.records(request)
    assert (first.outcome, first.fail_open, first.decision) == ("decided", "", "deny")
    assert (last.outcome, last.fail_open) == ("fail-open", "timeout")
    assert await harness.claim(request) is None  # the key now says fail-open too
    await harness.settle(resent, resent_id, Reply(request.event_id, DENY, "deny"), "fail-open", "timeout")
    assert len(await harness.records(request)) == 2  # re-delivered: written once
    assert await harness.pending() == 0


async def test_answered_early_then_resent_by_a_gateway_that_failed_open_logs_fail_open_once(harness: Harness) -> None:
    request, entry_id = await harness.entry()
    assert await harness.outbox.answer(request, Reply(request.event_id, DENY, "deny"))  # published, lost
    resent, resent_id = await harness.resent(request)
    await harness.settle(resent, resent_id, Reply(request.event_id, DENY, "deny"), "fail-open", "timeout")
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
    [record] = await harness.records(request)
    assert (record.outcome, record.fail_open) == ("fail-open", "timeout")
    assert await harness.claim(request) is None
    assert await harness.pending() == 0


async def test_resent_before_its_first_entry_is_settled_the_event_is_logged_once_as_fail_open(
    harness: Harness,
) -> None:
    request, entry_id = await harness.entry()
    resent, resent_id = await harness.resent(request)
    await harness.settle(resent, resent_id, None, "fail-open", "timeout")
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
    [record] = await harness.records(request)
    assert (record.outcome, record.fail_open) == ("fail-open", "timeout")
    assert await harness.pending() == 0


async def test_a_stalled_dispatchers_settle_after_the_key_expired_writes_nothing(harness: Harness) -> None:
    # appended a minute ago, settled by another dispatcher then; this one stalled since
    request, entry_id = await harness.entry(appended_ms=now_ms() - 60_000)
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))  # another dispatcher
    await harness.bus.redis.delete(harness.keys.outcome(request.event_id))  # its key's life ended
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))  # this one, stalled
    assert len(await harness.records(request)) == 1
    assert await harness.pending() == 0


async def test_an_entry_whose_stream_was_lost_is_still_written(harness: Harness) -> None:
    request, entry_id = await harness.entry()
    await harness.bus.redis.delete(harness.keys.blocking_stream())  # Redis lost its data meanwhile
    await harness.settle(request, entry_id, Reply(request.event_id, DENY, "deny"))
    [record] = await harness.records(request)
    assert (record.outcome, record.decision) == ("decided", "deny")
