"""The gateway's reply reader: one Pub/Sub subscription resolves every waiting request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio

from bus.redis.connection import connect
from bus.stream.protocol import Reply
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
    reader = ReplyWaiter(redis_url, CHANNEL)
    await reader.start()
    await asyncio.wait_for(reader.subscribed.wait(), 5)
    yield reader
    await reader.stop()


async def test_one_message_may_carry_several_replies(waiter: ReplyWaiter, bus: BusProbe) -> None:
    futures = {event_id: waiter.expect(event_id) for event_id in ("a", "b", "c")}
    batch = b"[" + b",".join(Reply(i, {"n": i}, "allow").encode() for i in ("a", "b")) + b"]"
    assert await bus.redis.publish(CHANNEL, batch) == 1
    assert await bus.redis.publish(CHANNEL, Reply("c", {}, "none", "hook_error").encode()) == 1
    got = {event_id: await asyncio.wait_for(future, 5) for event_id, future in futures.items()}
    assert got["a"].output == {"n": "a"} and got["b"].decision == "allow"
    assert got["c"].fail_open == "hook_error"
    assert waiter.waiting == 0


async def test_garbage_and_strangers_do_not_stop_the_reader(waiter: ReplyWaiter, bus: BusProbe) -> None:
    mine = waiter.expect("mine")
    for junk in (b"not json", b"[1, 2]", b'{"no": "id"}', Reply("someone-else", {}).encode()):
        await bus.redis.publish(CHANNEL, junk)
    await bus.redis.publish(CHANNEL, Reply("mine", {"ok": True}).encode())
    assert (await asyncio.wait_for(mine, 5)).output == {"ok": True}
    assert waiter.subscribed.is_set()


async def test_forgotten_requests_are_not_resolved(waiter: ReplyWaiter, bus: BusProbe) -> None:
    late = waiter.expect("late")
    waiter.forget("late")
    assert waiter.waiting == 0
    await bus.redis.publish(CHANNEL, Reply("late", {}).encode())
    probe = waiter.expect("probe")  # a reply published after the first one is read after it
    await bus.redis.publish(CHANNEL, Reply("probe", {}).encode())
    await asyncio.wait_for(probe, 5)
    assert not late.done()


async def test_the_reader_resubscribes_after_redis_restarts(private_redis: EmbeddedRedis) -> None:
    reader = ReplyWaiter(private_redis.url, CHANNEL)
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
        answer = reader.expect("after")
        await async_wait_for(lambda: publisher.publish(CHANNEL, Reply("after", {"back": 1}).encode()), timeout_s=5)
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
