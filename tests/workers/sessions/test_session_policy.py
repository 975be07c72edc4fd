"""Session policy end to end: a gateway and dispatchers on a real Redis decide on the session's facts,
counters and budgets, name the facts in the reason and the record, and keep concurrent calls of one
session from both taking a budget's last unit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bus.redis.keys import Keyspace
from bus.runtime.sessionmetrics import session_families
from bus.session.definitions import VERSION_FIELD
from bus.stream.protocol import Request, now_ms
from tests.conftest import BusProbe, async_wait_for, logged, pre_tool_use
from tests.loopback import LoopbackServer, Received

RULE_OF_TWO = (Path(__file__).parents[3] / "examples" / "rule-of-two.yaml").read_text()


def read(path: str, session: str) -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "session_id": session,
        "tool_name": "Read",
        "tool_input": {"file_path": path},
        "cwd": "/work",
    }


def decision(response: Any) -> tuple[str | None, str]:
    specific = response.json().get("hookSpecificOutput") or {}
    return specific.get("permissionDecision"), specific.get("permissionDecisionReason", "")


async def test_curl_after_reading_env_is_denied_naming_the_fact(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(RULE_OF_TWO) as p:
        first = await p.post(read("/work/.env", "tainted"))
        assert decision(first) == (None, "")
        denied = await p.post(pre_tool_use("curl -s http://127.0.0.1:9/x", "tainted"))
        verdict, reason = decision(denied)
        assert verdict == "deny"
        assert "Rule of Two" in reason and "session facts: private_data" in reason
        fresh = await p.post(pre_tool_use("curl -s http://127.0.0.1:9/x", "fresh"))
        assert decision(fresh) == (None, "")
    record = await logged(bus, denied)
    assert record.facts == ["private_data"]
    assert (await logged(bus, fresh)).facts == []
    state = await bus.redis.hgetall(Keyspace().session_state("default", "tainted"))  # type: ignore[misc]
    assert any(field.startswith(b"f:private_data:") for field in state)


BUDGET = """
hookbus:
  deadlineSeconds: 5
  session:
    counters:
      deploys:
        count: [{event: PreToolUse, rules: ["Bash(deploy *)"]}]
    budgets:
      deploys: {counter: deploys, limit: 2, verdict: deny, reason: two deploys per session}
hooks: {}
"""


async def test_parallel_calls_cannot_both_take_the_last_unit(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(BUDGET, dispatchers=2) as p:
        answers = await asyncio.gather(*(p.post(pre_tool_use(f"deploy {n}", "budget")) for n in range(8)))
        verdicts = [decision(a)[0] for a in answers]
        assert verdicts.count(None) == 2 and verdicts.count("deny") == 6
        later = await p.post(pre_tool_use("deploy again", "budget"))
        verdict, reason = decision(later)
        assert verdict == "deny" and "two deploys per session (deploys: 2 of 2)" in reason
        other = await p.post(pre_tool_use("deploy 1", "another"))
        assert decision(other) == (None, "")
    assert session_families(p.metrics).unchecked._value.get() == 0  # every one settled on the state it read


async def test_a_decision_on_a_copy_behind_the_session_is_refused_and_made_again(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    key = Keyspace().session_state("default", "behind")
    async with platform(BUDGET) as p:
        assert decision(await p.post(pre_tool_use("deploy 1", "behind"))) == (None, "")
        # Another writer (a dispatcher this one does not hear from) settles a deploy of the session.
        fields = {k.decode(): v for k, v in (await bus.redis.hgetall(key)).items()}  # type: ignore[misc]
        (counter,) = [name for name in fields if name.startswith("c:deploys:")]
        await bus.redis.hincrby(key, counter, 1)  # type: ignore[misc]
        await bus.redis.hincrby(key, VERSION_FIELD, 1)  # type: ignore[misc]
        verdict, reason = decision(await p.post(pre_tool_use("deploy 2", "behind")))
    assert verdict == "deny" and "two deploys per session (deploys: 2 of 2)" in reason
    families = session_families(p.metrics)
    assert families.conflicts._value.get() == 1 and families.unchecked._value.get() == 0


async def test_a_session_s_calls_in_flight_take_turns_and_each_is_settled_checked(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    policy = BUDGET.replace("limit: 2,", "limit: 30,").replace("two deploys", "thirty deploys")
    async with platform(policy) as p:
        answers = await asyncio.gather(*(p.post(pre_tool_use(f"deploy {n}", "many")) for n in range(48)))
        verdicts = [decision(a)[0] for a in answers]
        assert verdicts.count(None) == 30 and verdicts.count("deny") == 18
    families = session_families(p.metrics)
    # Decided one after another on the state the last one settled: no refused settle, none unchecked.
    assert families.conflicts._value.get() == 0 and families.unchecked._value.get() == 0


async def test_a_call_answered_fail_open_before_it_was_evaluated_still_counts(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform(BUDGET) as p:
        late = Request("evt-late", "PreToolUse", "default", orjson.dumps(pre_tool_use("deploy x", "late")), now_ms())
        late.deadline_ms, late.reply_to = now_ms() - 1000, "hookbus:reply:gone"  # waited past its deadline
        await bus.redis.xadd(bus.keys.blocking_stream(), late.encode())  # type: ignore[arg-type]
        record = await async_wait_for(lambda: bus.record("evt-late"), timeout_s=5)
        assert (record.outcome, record.fail_open) == ("fail-open", "timeout")
        first = await p.post(pre_tool_use("deploy y", "late"))  # the second unit: allowed
        second = await p.post(pre_tool_use("deploy z", "late"))  # the fail-open call took the first
        assert decision(first) == (None, "") and decision(second)[0] == "deny"


WAITING = """
hookbus:
  deadlineSeconds: 10
  deadlines: {PreToolUse: 0.5}
  http: {allowedNetworks: ["127.0.0.0/8"]}
  session:
    counters:
      deploys:
        count: [{event: PreToolUse, rules: ["Bash(deploy *)"]}]
    budgets:
      deploys: {counter: deploys, limit: 1, verdict: deny, reason: one deploy per session}
hooks:
  PermissionRequest:
    - hooks: [{type: http, url: "URL", timeout: 10}]
"""


async def test_a_call_whose_turn_does_not_come_in_time_is_decided_without_it_and_the_budget_holds(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    holding = asyncio.Event()

    async def held(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        holding.set()  # the permission request holds its session's turn until the test ends
        await server.stopping.wait()

    permission = {**pre_tool_use("deploy 0", "waits"), "hook_event_name": "PermissionRequest"}
    async with LoopbackServer(held) as server, platform(WAITING.replace("URL", server.url())) as p:
        asking = asyncio.create_task(p.post(permission))
        await asyncio.wait_for(holding.wait(), timeout=5)
        first = await p.post(pre_tool_use("deploy 1", "waits"))
        second = await p.post(pre_tool_use("deploy 2", "waits"))
        server.stopping.set()
        await asking
    # Both waited for the turn as long as their deadline allowed, then were decided on the state.
    assert first.headers["X-Hookbus-Outcome"] == second.headers["X-Hookbus-Outcome"] == "decided"
    assert decision(first) == (None, "")
    verdict, reason = decision(second)
    assert verdict == "deny" and "one deploy per session (deploys: 1 of 1)" in reason


TOKENS = """
hookbus:
  deadlineSeconds: 5
  session:
    budgets:
      spend: {counter: tokens, limit: 1000, reason: token budget}
hooks: {}
"""


async def test_tokens_gemini_and_a_subagent_reported_stop_the_session_past_its_budget(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    response = {
        "candidates": [{"content": {"role": "model", "parts": ["ok"]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 500, "candidatesTokenCount": 100, "totalTokenCount": 600},
    }
    after_model = {
        "hook_event_name": "AfterModel",
        "session_id": "spender",
        "cwd": "/work",
        "timestamp": "2026-01-01T00:00:00Z",
        "llm_request": {"model": "gemini-2.5-pro", "messages": []},
        "llm_response": response,
    }
    subagent = {
        "hook_event_name": "PostToolUse",
        "session_id": "spender",
        "cwd": "/work",
        "tool_name": "Agent",
        "tool_input": {"prompt": "look around"},
        "tool_response": {"status": "completed", "totalTokens": 400},
    }
    state_key = Keyspace().session_state("default", "spender")

    async def tokens() -> int:
        return int(await bus.redis.hget(state_key, "n:tokens") or 0)  # type: ignore[misc]

    async with platform(TOKENS) as p:
        await p.client.post(f"{p.url}/v1/hooks", json=after_model, params={"dialect": "gemini"})
        await async_wait_for(lambda: tokens(), timeout_s=5)
        assert decision(await p.post(pre_tool_use("ls", "spender"))) == (None, "")  # 600 of 1000
        await p.post(subagent)
        await async_wait_for(lambda: _at_least(tokens(), 1000), timeout_s=5)
        verdict, reason = decision(await p.post(pre_tool_use("ls", "spender")))
    assert verdict == "deny" and "token budget (tokens: 1000 of 1000)" in reason


async def _at_least(value: Any, floor: int) -> bool:
    return bool(await value >= floor)
