"""A session's state changes in the step that settles its event (:mod:`bus.session.script`), on a real Redis.

What the settle script does with the operations is compared with :func:`bus.session.apply.apply_ops`
(what ``policy test`` and ``policy replay`` use); a re-settled event changes nothing again; a
settle whose decision read an older version is refused with the state as it is; the tenant's
cap evicts the least recently used session and counts it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest_asyncio

from bus.hooks.decisions import Decision
from bus.redis.keys import DISPATCH_GROUP, Keyspace
from bus.runtime.metrics import Metrics
from bus.session.apply import apply_ops
from bus.session.state import SessionState
from bus.stream.protocol import LogRecord, Reply, Request, now_ms
from tests.conftest import BusProbe, async_wait_for
from workers.dispatcher.outbox import Outbox, Settle
from workers.dispatcher.sessions import SessionStates
from workers.engine.sessions import SessionOutcome

KEYS = Keyspace()
STREAM = KEYS.events_stream()
OPS = [
    "S f:seen:abc",
    "I c:calls:abc",
    "R c:pushes:abc 360000",
    "I n:fails",
    "Z n:fails",
    "D f:gone:abc",
    "A n:tokens 1234",
    "M n:cost 5",
    "M n:cost 3",
]


def _settle(
    entry_id: bytes,
    n: int,
    ops: list[str],
    expected: int | None,
    session: str = "s-1",
    decided_on: SessionState | None = None,
    stream: str = STREAM,
) -> Settle:
    """A blocking event's settle (its decision read version ``expected`` of the session, if not
    None; ``decided_on``: the state it was decided on)."""
    payload = orjson.dumps({"session_id": session})
    request = Request(f"evt-{session}-{n}", "PreToolUse", "default", payload, now_ms(), now_ms() + 10_000, "gw-test")
    record = LogRecord(
        event_id=request.event_id,
        event=request.event,
        tenant="default",
        session_id=session,
        outcome="decided",
        decision="none",
        output={},
        payload=request.payload,
        received_ms=request.received_ms,
        decided_ms=now_ms(),
    )
    outcome = SessionOutcome(ops, expected, [], 60_000, 2, decided_on=decided_on)
    part = (outcome, KEYS.session_state("default", session), KEYS.session_index("default"))
    reply = Reply(request.event_id, {}, Decision.NONE)
    return Settle(stream, entry_id, request, record, reply, 1000, session=part)


class Seen:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bool, SessionState]] = []

    def __call__(self, op: Settle, written: bool, raw: bytes) -> None:
        self.calls.append((op.request.event_id, written, SessionState.of(orjson.loads(raw)["s"])))


@pytest_asyncio.fixture
async def entries(bus: BusProbe) -> AsyncIterator[list[bytes]]:
    await bus.redis.xgroup_create(STREAM, DISPATCH_GROUP, id="0", mkstream=True)
    ids = [await bus.redis.xadd(STREAM, {"n": n}) for n in range(6)]
    await bus.redis.xreadgroup(DISPATCH_GROUP, "test-consumer", {STREAM: ">"})
    yield ids


async def test_ops_apply_as_in_python_and_once_per_event(bus: BusProbe, entries: list[bytes]) -> None:
    seen = Seen()
    box = Outbox(bus.redis, KEYS, metrics=Metrics(), on_session=seen)
    await box.start()
    try:
        before = now_ms()
        op = _settle(entries[0], 0, OPS, None)
        box.settle(op)
        await box.flushed()
        box.settle(op)  # re-delivered: its record is written, so nothing changes again
        await box.flushed()
    finally:
        await box.stop()
    stored = SessionState.of(await bus.redis.hgetall(KEYS.session_state("default", "s-1")))  # type: ignore[misc]
    at = int(stored.fields["f:seen:abc"])
    assert before <= at <= now_ms()
    assert stored == apply_ops(SessionState(), OPS, at)
    assert stored.version == 1 and stored.fields["c:calls:abc"] == "1"
    assert [written for _, written, _ in seen.calls] == [True]
    assert seen.calls[0][2] == stored
    assert await bus.redis.pttl(KEYS.session_state("default", "s-1")) > 50_000


async def test_a_settle_after_the_outcome_key_expired_counts_nothing_again(bus: BusProbe) -> None:
    seen = Seen()
    box = Outbox(bus.redis, KEYS, metrics=Metrics(), on_session=seen)
    stream = KEYS.blocking_stream()  # an entry appended a minute ago (its id's time)
    await bus.redis.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True)
    entry_id = await bus.redis.xadd(stream, {"n": 0}, id=f"{now_ms() - 60_000}-1")
    await bus.redis.xreadgroup(DISPATCH_GROUP, "test-consumer", {stream: ">"})
    await box.start()
    try:
        op = _settle(entry_id, 0, ["I c:calls:abc"], None, stream=stream)
        box.settle(op)
        await box.flushed()
        await bus.redis.delete(KEYS.outcome(op.request.event_id))  # the key's life ended
        box.settle(op)  # a dispatcher that stalled past it settles the same entry
        await box.flushed()
    finally:
        await box.stop()
    stored = SessionState.of(await bus.redis.hgetall(KEYS.session_state("default", "s-1")))  # type: ignore[misc]
    assert stored.version == 1 and stored.fields["c:calls:abc"] == "1"
    assert [written for _, written, _ in seen.calls] == [True]


async def test_a_decision_on_an_older_version_is_refused(bus: BusProbe, entries: list[bytes]) -> None:
    seen = Seen()
    box = Outbox(bus.redis, KEYS, metrics=Metrics(), on_session=seen)
    await box.start()
    try:
        box.settle(_settle(entries[0], 0, ["I c:calls:abc"], 0))
        await async_wait_for(lambda: len(seen.calls) == 1)
        box.settle(_settle(entries[1], 1, ["I c:calls:abc"], 0))  # read version 0: now 1
        await async_wait_for(lambda: len(seen.calls) == 2)
    finally:
        await box.stop()
    (_, first, _), (_, second, state) = seen.calls
    assert first and not second
    assert state.version == 1 and state.fields["c:calls:abc"] == "1"
    assert await bus.record("evt-s-1-1") is None  # no record: the event is decided again
    pending = await bus.redis.xpending_range(STREAM, DISPATCH_GROUP, min="-", max="+", count=10)
    assert entries[1] in [p["message_id"] for p in pending]


async def test_a_settle_on_the_state_decided_on_answers_its_time_and_the_copy_applies_the_ops(
    bus: BusProbe, entries: list[bytes]
) -> None:
    key = KEYS.session_state("default", "s-1")
    states = SessionStates(KEYS, Metrics(), lambda op: None)
    answers: list[bytes] = []

    def settled(op: Settle, written: bool, raw: bytes) -> None:
        answers.append(raw)
        states.settled(op, written, raw)

    box = Outbox(bus.redis, KEYS, metrics=Metrics(), on_session=settled)
    await box.start()
    try:
        box.settle(_settle(entries[0], 0, OPS, None))  # decided on no state: the whole state comes back
        await async_wait_for(lambda: len(answers) == 1)
        first = states.get(key)
        box.settle(_settle(entries[1], 1, OPS, first.version, decided_on=first))
        await async_wait_for(lambda: len(answers) == 2)
        assert states.get(key) == SessionState.of(await bus.redis.hgetall(key))  # type: ignore[misc]
        stale = SessionState({**first.fields, "t0": "1"})  # not the state in Redis: the whole state again
        box.settle(_settle(entries[2], 2, ["I c:calls:abc"], None, decided_on=stale))
        await async_wait_for(lambda: len(answers) == 3)
    finally:
        await box.stop()
    assert [sorted(orjson.loads(raw)) for raw in answers] == [["e", "s"], ["e", "n"], ["e", "s"]]
    stored = SessionState.of(await bus.redis.hgetall(key))  # type: ignore[misc]
    assert states.get(key) == stored and stored.version == 3 and stored.fields["c:calls:abc"] == "3"


async def test_the_tenants_cap_evicts_the_least_recently_used(bus: BusProbe, entries: list[bytes]) -> None:
    metrics = Metrics()
    box = Outbox(bus.redis, KEYS, metrics=metrics, on_session=Seen())
    await box.start()
    try:
        for n, session in enumerate(("a", "b", "c")):  # the cap is 2
            box.settle(_settle(entries[n], n, ["I n:calls"], None, session))
            await box.flushed()
    finally:
        await box.stop()
    assert not await bus.redis.exists(KEYS.session_state("default", "a"))
    assert await bus.redis.exists(KEYS.session_state("default", "b"), KEYS.session_state("default", "c")) == 2
    assert await bus.redis.zcard(KEYS.session_index("default")) == 2


def test_a_dispatchers_copy_takes_the_scripts_state_even_when_it_started_again() -> None:
    redone: list[Settle] = []
    states = SessionStates(KEYS, Metrics(), redone.append)
    key = KEYS.session_state("default", "s-1")
    states.put(key, SessionState({"v": "50"}))
    op = _settle(b"1-0", 0, ["I n:calls"], 50)
    states.settled(op, False, orjson.dumps({"s": ["v", "1", "n:calls", "1"]}))  # evicted meanwhile: version 1
    assert states.get(key).version == 1 and redone == [op]
