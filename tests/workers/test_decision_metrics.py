"""The metrics that say who decided and where time ran out: handler decisions, timeouts by
stage, dispatcher batch sizes and the gateway's reply wait (a real platform on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import yaml

from bus.redis.keys import DISPATCH_GROUP
from bus.runtime.metrics import Metrics
from bus.stream.protocol import Request, now_ms
from tests.conftest import BusProbe, async_wait_for, logged, policy_yaml, pre_tool_use
from workers.dispatcher.answering import Dispatcher
from workers.engine.evaluation import deciders

RULE_A = {"type": "rule", "deny": ["Bash(rm -rf *)"], "allow": ["Bash(ls *)"]}
RULE_B = {"type": "rule", "deny": ["Bash(rm -rf *)"], "ask": ["Bash(git push *)"]}
FAILING = {"type": "command", "command": "exit 1"}


def handler_decisions(metrics: Metrics, handler: str, decision: str) -> float:
    return metrics.value("hookbus_handler_decisions_total", event="PreToolUse", handler=handler, decision=decision)


def timeouts(metrics: Metrics, stage: str) -> float:
    return metrics.value("hookbus_timeouts_total", stage=stage)


def _request(event: str, session: str, **fields: Any) -> dict[Any, Any]:
    payload = json.dumps({"hook_event_name": event, "session_id": session}).encode()
    request = Request(
        event_id=f"evt-{session}", event=event, tenant="default", payload=payload, received_ms=now_ms(), **fields
    )
    return dict(request.encode())


async def _nothing_pending(bus: BusProbe) -> bool:
    return not any([await bus.pending(bus.keys.blocking_stream()), await bus.pending(bus.keys.events_stream())])


async def test_each_decision_is_counted_for_the_handlers_that_made_it(platform: Callable[..., Any]) -> None:
    text = policy_yaml({"PreToolUse": [{"matcher": "Bash", "hooks": [RULE_A, RULE_B, FAILING]}]})
    async with platform(text) as p:
        a, b, failing = (entry.handler_id for entry in p.policy.entries("PreToolUse"))
        answers = [await p.post(pre_tool_use(command)) for command in ("rm -rf /", "git push", "ls -l", "echo hi")]
    decisions = [r.json().get("hookSpecificOutput", {}).get("permissionDecision") for r in answers]
    assert decisions == ["deny", "ask", "allow", None]
    labels = [(h, d) for h in (a, b, failing) for d in ("allow", "deny", "ask", "none")]
    counted = {key: handler_decisions(p.metrics, *key) for key in labels}
    assert {key: n for key, n in counted.items() if n} == {
        (a, "deny"): 1,
        (b, "deny"): 1,  # both rules denied rm -rf: both decided
        (b, "ask"): 1,
        (a, "allow"): 1,
    }  # the failing command hook decided nothing, and "echo hi" got no decision from anyone


def test_deciders_are_the_handlers_whose_own_answer_won() -> None:
    from bus.hooks.results import HandlerResult, Outcome

    def vote(handler_id: str, decision: str) -> HandlerResult:
        output = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision}}
        return HandlerResult(Outcome.OK, output=output, handler_id=handler_id, handler_type="rule")

    blocked = HandlerResult(Outcome.BLOCK, reason="exit 2", handler_id="c", handler_type="command")
    failed = HandlerResult(Outcome.ERROR, reason="boom", handler_id="d", handler_type="http", fail_closed=True)
    results = [vote("a", "allow"), vote("b", "deny"), blocked, failed]
    assert deciders("PreToolUse", results, "deny") == ["b", "c", "d"]  # exit 2 and a fail-closed failure deny too
    assert deciders("PreToolUse", [vote("a", "allow")], "allow") == ["a"]
    assert deciders("PreToolUse", results, "none") == []


async def test_a_handler_past_the_deadline_times_out_at_the_dispatcher_and_at_the_gateway(
    platform: Callable[..., Any],
) -> None:
    text = policy_yaml({"PreToolUse": [{"hooks": [{"type": "command", "command": "sleep 1"}]}]}, deadlineSeconds=0.2)
    async with platform(text) as p:
        answer = await p.post(pre_tool_use("make"))
        assert answer.headers["X-Hookbus-Outcome"] == "fail-open"
        await async_wait_for(lambda: timeouts(p.metrics, "handler") > 0, timeout_s=5)
    assert tuple(timeouts(p.metrics, stage) for stage in ("handler", "reply", "queue_wait")) == (1, 1, 0)
    assert p.metrics.value("hookbus_reply_wait_seconds_count") == 1


async def test_an_entry_read_after_its_deadline_is_a_queue_wait_timeout(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    text = yaml.safe_dump({"hooks": {"PreToolUse": [{"hooks": [{"type": "rule", "deny": ["Bash"]}]}]}})
    async with platform(text) as p:
        late = _request("PreToolUse", "late", reply_to="hookbus:reply:gone", deadline_ms=now_ms() - 1000)
        # Spooled by a gateway while Redis was down: expired too, but it never waited in the stream.
        spooled = _request(
            "PreToolUse",
            "spooled",
            reply_to="hookbus:reply:gone",
            deadline_ms=now_ms() - 1000,
            fail_open="redis_unavailable",
        )
        for fields in (late, spooled):
            await bus.redis.xadd(bus.keys.blocking_stream(), fields)
        await async_wait_for(lambda: _nothing_pending_after(bus, 2), timeout_s=5)
    assert p.metrics.value("hookbus_expired_total", event="PreToolUse") == 2
    assert timeouts(p.metrics, "queue_wait") == 1


async def test_a_dispatcher_read_is_observed_as_one_batch(
    platform: Callable[..., Any], bus: BusProbe, redis_url: str
) -> None:
    m = Metrics()
    async with platform(dispatchers=0) as p:
        await bus.redis.xgroup_create(bus.keys.events_stream(), DISPATCH_GROUP, id="0", mkstream=True)
        for n in range(5):
            await bus.redis.xadd(bus.keys.events_stream(), _request("Notification", f"batch-{n}"))
        stop = asyncio.Event()
        batching = Dispatcher(p.settings, p.policy, redis_url, consumer="batch", metrics=m)
        running = asyncio.create_task(batching.run(stop))
        try:
            await async_wait_for(lambda: _nothing_pending_after(bus, 5), timeout_s=5)
        finally:
            stop.set()
            await running
    # The five entries waited in the stream, so the first read returned them all.
    assert (m.value("hookbus_dispatch_batch_size_count"), m.value("hookbus_dispatch_batch_size_sum")) == (1, 5)


async def _nothing_pending_after(bus: BusProbe, records: int) -> bool:
    return len(await bus.log()) >= records and await _nothing_pending(bus)


async def test_the_reply_wait_is_observed_for_each_decided_event(platform: Callable[..., Any], bus: BusProbe) -> None:
    text = yaml.safe_dump({"hooks": {"PreToolUse": [{"hooks": [{"type": "rule", "deny": ["Bash(rm *)"]}]}]}})
    async with platform(text) as p:
        for _ in range(3):
            await logged(bus, await p.post(pre_tool_use("rm x")))
        await p.post({"hook_event_name": "Notification", "session_id": "s"})  # answered at once: no wait
    assert p.metrics.value("hookbus_reply_wait_seconds_count") == 3
