"""Someone who can write to Redis, but does not hold the reply key, cannot answer for the dispatchers.

A live platform on the suite's Redis; the attacker is this test, writing to Redis directly: a
forged ``allow`` on the gateway's reply channel, in an event's outcome key, or a request of its
own appended under a pending event's id. The agent gets the real decision, or its policy's
fail mode when the real one never comes: never the forgery.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import orjson

from bus.stream.protocol import Request
from tests.conftest import BusProbe, Platform, async_wait_for, rm_rf
from tests.workers.dispatcher.test_answering import dispatcher

DENY_RM_ALLOW_LS = """
hookbus: {deadlineSeconds: DEADLINE}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {type: rule, deny: ["Bash(rm -rf *)"], allow: ["Bash(ls *)"], reason: "no rm -rf"}
"""

ALLOW = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}


def policy(deadline_s: float) -> str:
    return DENY_RM_ALLOW_LS.replace("DEADLINE", str(deadline_s))


def forged_allow(event_id: str) -> bytes:
    return orjson.dumps({"id": event_id, "out": ALLOW, "dec": "allow", "fo": None, "h": []})


def rejected(p: Platform, reason: str) -> float:
    return p.metrics.registry.get_sample_value("hookbus_replies_rejected_total", {"reason": reason}) or 0.0


async def pending_request(p: Platform, bus: BusProbe, session: str) -> tuple[str, bytes, Request]:
    """The blocking stream, entry id and request of ``session``'s event, read as an attacker would."""
    keys = p.app.state.gateway.keys
    stream = keys.blocking_stream(keys.partition_of(session))

    async def find() -> tuple[str, bytes, Request] | None:
        for entry_id, fields in await bus.redis.xrange(stream):
            request = Request.decode(fields)
            if request.hook_input().get("session_id") == session:
                return stream, entry_id, request
        return None

    found: tuple[str, bytes, Request] = await async_wait_for(find, timeout_s=5)
    return found


async def test_a_forged_allow_on_the_reply_channel_is_dropped_and_the_real_deny_answers(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    session = f"forged-{uuid.uuid4().hex[:8]}"
    async with platform(policy(10.0), dispatchers=0) as p:
        asking = asyncio.create_task(p.post(rm_rf(session)))
        _, _, pending = await pending_request(p, bus, session)
        assert await bus.redis.publish(pending.reply_to, forged_allow(pending.event_id)) == 1
        assert await bus.redis.publish(pending.reply_to, b"f" * 64 + forged_allow(pending.event_id)) == 1
        await async_wait_for(lambda: asking.done() or rejected(p, "unauthenticated") == 1, timeout_s=5)
        assert not asking.done(), f"the forgery answered the agent: {asking.result().text}"
        assert rejected(p, "malformed") == 1  # the one with no MAC at all
        async with dispatcher(p, "real"):
            answer = await asyncio.wait_for(asking, 10)
    assert answer.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert answer.headers["X-Hookbus-Outcome"] == "decided"
    record = await bus.record(answer.headers["X-Hookbus-Event-Id"])
    assert record is not None and record.decision == "deny"


async def test_a_forged_allow_with_no_real_reply_gets_the_fail_mode(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    session = f"forged-{uuid.uuid4().hex[:8]}"
    async with platform(policy(1.0), dispatchers=0) as p:
        asking = asyncio.create_task(p.post(rm_rf(session)))
        _, _, pending = await pending_request(p, bus, session)
        await bus.redis.publish(pending.reply_to, forged_allow(pending.event_id))
        await bus.redis.publish(pending.reply_to, b"0" * 64 + forged_allow(pending.event_id))
        answer = await asyncio.wait_for(asking, 10)
    assert answer.json() == {}  # no opinion, as for any reply that never came; not the forged allow
    assert answer.headers["X-Hookbus-Outcome"] == "fail-open"
    assert rejected(p, "unauthenticated") == 1 and rejected(p, "malformed") == 1
    fail_open = p.metrics.registry.get_sample_value(
        "hookbus_fail_open_total", {"event": "PreToolUse", "reason": "timeout"}
    )
    assert fail_open == 1


async def test_a_forged_reply_stored_in_the_outcome_key_is_not_taken_at_the_deadline(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    session = f"forged-{uuid.uuid4().hex[:8]}"
    async with platform(policy(1.0), dispatchers=0) as p:
        asking = asyncio.create_task(p.post(rm_rf(session)))
        _, _, pending = await pending_request(p, bus, session)
        keys = p.app.state.gateway.keys
        outcome = keys.outcome(pending.event_id, keys.partition_of(session))
        # What the settle script stores for a decision made in time, which the gateway reads
        # when the deadline passes before the published reply arrived.
        await bus.redis.set(outcome, b"D" + forged_allow(pending.event_id), px=30_000)
        answer = await asyncio.wait_for(asking, 10)
    assert answer.json() == {}
    assert answer.headers["X-Hookbus-Outcome"] == "fail-open"
    assert rejected(p, "unauthenticated") == 1


async def test_a_request_forged_under_a_pending_event_id_gets_no_answer_to_the_agent(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    # The dispatcher evaluates and signs whatever it reads: here a harmless `ls` the attacker
    # appended under the pending `rm -rf` event's id, ahead of the real entry. Its signed allow
    # does not verify for the request the gateway sent, so the agent never gets it.
    session = f"forged-{uuid.uuid4().hex[:8]}"
    async with platform(policy(1.5), dispatchers=0) as p:
        asking = asyncio.create_task(p.post(rm_rf(session)))
        stream, entry_id, pending = await pending_request(p, bus, session)
        harmless = orjson.dumps({**pending.hook_input(), "tool_input": {"command": "ls /"}})
        forged = dataclasses.replace(pending, payload=harmless, parsed=None)
        real = await bus.redis.xrange(stream, entry_id, entry_id)
        async with bus.redis.pipeline(transaction=True) as pipe:
            pipe.xdel(stream, entry_id)
            pipe.xadd(stream, forged.encode())  # type: ignore[arg-type]
            pipe.xadd(stream, real[0][1])
            await pipe.execute()
        async with dispatcher(p, "real"):
            answer = await asyncio.wait_for(asking, 10)
            # The forged request's record took the event id first, so the real decision is not
            # published: the agent gets the fail mode, as when an entry is dropped.
            assert answer.json().get("hookSpecificOutput", {}).get("permissionDecision") != "allow"
            assert answer.json() == {}
            assert answer.headers["X-Hookbus-Outcome"] == "fail-open"
    assert rejected(p, "unauthenticated") >= 1
