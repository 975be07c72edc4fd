"""The gateway's reply reader: one Pub/Sub subscription resolves every waiting request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest_asyncio

from bus.redis.connection import connect
from bus.runtime.metrics import Metrics
from bus.runtime.replykey import ReplyKey, new_secret
from bus.stream.protocol import Reply, Request, now_ms
from gateway.replies.reader import ReplyWaiter
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import BusProbe, async_wait_for
from workers.dispatcher.answering import Dispatcher

CHANNEL = "hookbus:reply:test-gateway"

DENY_RM = """
hookbus: {deadlineSeconds: 10}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {type: rule, deny: ["Bash(rm -rf *)"]}
"""


@pytest_asyncio.fixture
async def waiter(redis_url: str) -> AsyncIterator[ReplyWaiter]:
    reader = ReplyWaiter(redis_url, CHANNEL, Metrics())
    await reader.start()
    await asyncio.wait_for(reader.subscribed.wait(), 5)
    yield reader
    await reader.stop()


KEY = ReplyKey(new_secret())


def request(event_id: str, command: str = "rm -rf /") -> Request:
    """A blocking request answered on :data:`CHANNEL`, as a gateway appends it."""
    payload = orjson.dumps({"hook_event_name": "PreToolUse", "session_id": "s", "tool_input": {"command": command}})
    return Request(event_id, "PreToolUse", "default", payload, now_ms(), now_ms() + 5000, CHANNEL)


def expect(waiter: ReplyWaiter, asked: Request) -> asyncio.Future[Reply]:
    return waiter.expect(asked.event_id, KEY.bind(asked.meta(), asked.payload))


def sealed(asked: Request, reply: Reply, key: ReplyKey = KEY) -> bytes:
    return key.seal(asked.meta(), asked.payload, reply.encode())


def rejected(waiter: ReplyWaiter, reason: str) -> float:
    return waiter.metrics.registry.get_sample_value("hookbus_replies_rejected_total", {"reason": reason}) or 0.0


async def test_one_message_may_carry_several_replies(waiter: ReplyWaiter, bus: BusProbe) -> None:
    asked = {event_id: request(event_id) for event_id in ("a", "b", "c")}
    futures = {event_id: expect(waiter, r) for event_id, r in asked.items()}
    batch = b"\n".join(sealed(asked[i], Reply(i, {"n": i}, "allow")) for i in ("a", "b"))
    assert await bus.redis.publish(CHANNEL, batch) == 1
    assert await bus.redis.publish(CHANNEL, sealed(asked["c"], Reply("c", {}, "none", "hook_error"))) == 1
    got = {event_id: await asyncio.wait_for(future, 5) for event_id, future in futures.items()}
    assert got["a"].output == {"n": "a"} and got["b"].decision == "allow"
    assert got["c"].fail_open == "hook_error"
    assert waiter.waiting == 0


async def test_garbage_and_strangers_do_not_stop_the_reader(waiter: ReplyWaiter, bus: BusProbe) -> None:
    mine = request("mine")
    answer = expect(waiter, mine)
    stranger = sealed(request("someone-else"), Reply("someone-else", {}))
    for junk in (b"not json", b"[1, 2]", b'{"no": "id"}', b"x" * 64 + b'{"no": "id"}', stranger):
        await bus.redis.publish(CHANNEL, junk)
    await bus.redis.publish(CHANNEL, sealed(mine, Reply("mine", {"ok": True})))
    assert (await asyncio.wait_for(answer, 5)).output == {"ok": True}
    assert waiter.subscribed.is_set()
    assert rejected(waiter, "malformed") == 4  # the stranger's reply is another gateway's business


async def test_a_reply_that_does_not_verify_is_dropped_and_the_real_one_taken(
    waiter: ReplyWaiter, bus: BusProbe
) -> None:
    asked = request("pending")
    answer = expect(waiter, asked)
    allow = Reply("pending", {"hookSpecificOutput": {"permissionDecision": "allow"}}, "allow")
    other_key = ReplyKey(new_secret())
    forgeries = [
        allow.encode(),  # no MAC at all
        b"0" * 64 + allow.encode(),  # a made-up one
        sealed(asked, allow, other_key),  # made with another key
        sealed(request("pending", command="ls"), allow),  # for another request under this event id
        sealed(request("other"), Reply("other", {}, "allow")).replace(b'"other"', b'"pending"'),  # another event's
        sealed(asked, Reply("pending", {}, "none")).replace(b'"none"', b'"allow"'),  # changed once sealed
    ]
    for forged in forgeries:
        await bus.redis.publish(CHANNEL, forged)
    deny = Reply("pending", {"hookSpecificOutput": {"permissionDecision": "deny"}}, "deny")
    await bus.redis.publish(CHANNEL, sealed(asked, deny))
    assert (await asyncio.wait_for(answer, 5)).decision == "deny"
    assert rejected(waiter, "unauthenticated") == 5 and rejected(waiter, "malformed") == 1  # the bare one
    assert waiter.waiting == 0


async def test_forgotten_requests_are_not_resolved(waiter: ReplyWaiter, bus: BusProbe) -> None:
    gone = request("late")
    late = expect(waiter, gone)
    waiter.forget("late")
    assert waiter.waiting == 0
    await bus.redis.publish(CHANNEL, sealed(gone, Reply("late", {})))
    after = request("probe")
    probe = expect(waiter, after)  # a reply published after the first one is read after it
    await bus.redis.publish(CHANNEL, sealed(after, Reply("probe", {})))
    await asyncio.wait_for(probe, 5)
    assert not late.done()


async def test_the_reader_resubscribes_after_redis_restarts(private_redis: EmbeddedRedis) -> None:
    reader = ReplyWaiter(private_redis.url, CHANNEL, Metrics())
    await reader.start()
    publisher = connect(private_redis.url)
    try:
        await asyncio.wait_for(reader.subscribed.wait(), 5)
        private_redis.stop()
        await async_wait_for(lambda: not reader.subscribed.is_set(), timeout_s=5)
        await async_wait_for(lambda: reader.last_error, timeout_s=5)
        private_redis.start()
        await asyncio.wait_for(reader.subscribed.wait(), 5)
        assert reader.last_error is None
        asked = request("after")
        answer = expect(reader, asked)
        message = sealed(asked, Reply("after", {"back": 1}))
        await async_wait_for(lambda: publisher.publish(CHANNEL, message), timeout_s=5)
        assert (await asyncio.wait_for(answer, 5)).output == {"back": 1}
    finally:
        await publisher.aclose()
        await reader.stop()


async def test_gateway_readiness_reports_the_reply_channel(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM) as p:
        gateway = p.app.state.gateway
        ready = (await p.client.get(f"{p.url}/readyz")).json()
        assert ready["checks"]["replies"] == {"ok": True, "error": None}
        assert gateway.waiter.channel == f"hookbus:reply:{gateway.gateway_id}"
        denied = await p.post(
            {
                "hook_event_name": "PreToolUse",
                "session_id": "s",
                "tool_name": "Bash",
                "tool_input": {"command": "rm -rf /"},
            }
        )
        assert denied.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert gateway.waiter.waiting == 0  # nothing left behind


async def test_many_waiting_requests_share_one_subscription(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(DENY_RM, dispatchers=0) as p:
        waiting = [
            asyncio.create_task(
                p.post(
                    {
                        "hook_event_name": "PreToolUse",
                        "session_id": f"s-{i}",
                        "tool_name": "Bash",
                        "tool_input": {"command": f"rm -rf /{i}"},
                    }
                )
            )
            for i in range(50)
        ]
        await async_wait_for(lambda: _stream_length(bus, 50), timeout_s=10)
        assert p.app.state.gateway.waiter.waiting == 50
        subscribers = [c for c in await bus.redis.client_list() if c.get("sub") != "0"]
        assert len(subscribers) == 1  # one reply reader for the whole gateway process
        stop = asyncio.Event()
        late = asyncio.create_task(Dispatcher(p.settings, p.policy, bus.url, consumer="late").run(stop))
        try:
            answers = await asyncio.gather(*waiting)
        finally:
            stop.set()
            await late
    assert {a.json()["hookSpecificOutput"]["permissionDecision"] for a in answers} == {"deny"}
    assert {a.headers["X-Hookbus-Outcome"] for a in answers} == {"decided"}
    assert len({a.headers["X-Hookbus-Event-Id"] for a in answers}) == 50


async def _stream_length(bus: BusProbe, count: int) -> bool:
    return int(await bus.redis.xlen(bus.keys.blocking_stream())) >= count
