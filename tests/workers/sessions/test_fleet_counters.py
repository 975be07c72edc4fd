"""Counters of a whole tenant or agent on a real Redis: counted once per event id, in the
tenant's own keys, and a count going above ``onLimit.above`` freezes that tenant only."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest_asyncio

from bus.freeze.store import active_freezes
from bus.policy.loading import policy_from_text
from bus.runtime.metrics import Metrics
from bus.runtime.sessionmetrics import session_families
from bus.session.definitions import Counter, session_policy
from bus.stream.protocol import Request, now_ms
from tests.conftest import BusProbe, async_wait_for, pre_tool_use
from workers.dispatcher.fleet import FleetCounts
from workers.engine.fleetvalues import FleetValues

POLICY = """hookbus:
  deadlineSeconds: 5
  session:
    counters:
      rm_denies:
        scope: tenant
        window: 5m
        decisions: [deny]
        count: [{event: PreToolUse, rules: ["Bash(rm -rf *)"]}]
        onLimit: {above: 3, tools: [Bash], for: 10m}
      pushes:
        scope: agent
        window: 1h
        count: [{event: PreToolUse, rules: ["Bash(git push *)"]}]
hooks:
  PreToolUse:
    - matcher: Bash
      hooks: [{type: rule, deny: ["Bash(rm -rf *)"]}]
"""


def counters() -> dict[str, Counter]:
    return session_policy(policy_from_text(POLICY, "p.yaml")).fleet


@pytest_asyncio.fixture
async def tenants(bus: BusProbe) -> AsyncIterator[tuple[str, str]]:
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    yield a, b
    await bus.redis.hdel(bus.keys.freezes, a, b)  # type: ignore[misc]


def event(tenant: str, command: str, session: str, event_id: str | None = None, dialect: str = "") -> Request:
    payload = orjson.dumps(pre_tool_use(command, session))
    return Request(event_id or uuid.uuid4().hex, "PreToolUse", tenant, payload, now_ms(), dialect=dialect)


async def test_denies_across_sessions_freeze_their_tenant_only(bus: BusProbe, tenants: tuple[str, str]) -> None:
    a, b = tenants
    metrics = session_families(Metrics())
    fleet = FleetCounts(bus.redis, bus.keys, metrics)
    rm = [counters()["rm_denies"]]
    for n in range(3):
        assert await fleet.count(event(a, "rm -rf /", f"s{n}"), rm) == [n + 1]
        assert await fleet.count(event(b, "rm -rf /", f"s{n}"), rm) == [n + 1]
    assert not [f for f in await active_freezes(bus.redis, bus.keys) if f.tenant in tenants]
    assert await fleet.count(event(a, "rm -rf /", "s9"), rm) == [4]  # above 3: a is frozen
    frozen = {f.tenant: f for f in await active_freezes(bus.redis, bus.keys) if f.tenant in tenants}
    assert list(frozen) == [a]  # b's three denies are b's own
    assert frozen[a].by == "policy" and frozen[a].tools == ("Bash",) and "'rm_denies'" in frozen[a].reason
    until_ms = frozen[a].until_ms
    assert until_ms is not None and until_ms - now_ms() > 9 * 60_000
    assert metrics.policy_freezes._value.get() == 1
    assert await fleet.count(event(a, "rm -rf /", "s10"), rm) == [5]  # past the limit: not frozen again
    assert metrics.policy_freezes._value.get() == 1
    assert [int(v) for v in (await bus.redis.hgetall(bus.keys.fleet_counter(b, rm[0].field))).values()] == [3]  # type: ignore[misc]
    assert 0 < await bus.redis.pttl(bus.keys.fleet_counter(a, rm[0].field)) <= 330_000


async def test_a_redelivered_event_is_counted_once(bus: BusProbe, tenants: tuple[str, str]) -> None:
    a, _ = tenants
    fleet = FleetCounts(bus.redis, bus.keys, session_families(Metrics()))
    pushes = [counters()["pushes"]]
    again = event(a, "git push origin main", "s1", event_id="ev-1")
    assert await fleet.count(again, pushes) == [1]
    assert await fleet.count(again, pushes) is None  # the same event id, redelivered
    assert await fleet.count(event(a, "git push", "s2", dialect="codex"), pushes) == [1]  # another agent's
    assert await fleet.count(event(a, "git push", "s3"), pushes) == [2]


async def test_a_platform_freezes_a_tenant_after_denies_across_sessions(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    await bus.redis.hdel(bus.keys.freezes, "default")  # type: ignore[misc]
    try:
        async with platform(POLICY, dispatchers=2) as p:
            for n in range(4):
                answer = await p.post(pre_tool_use("rm -rf /tmp/x", f"fleet-{n}"))
                assert answer.json()["hookSpecificOutput"]["permissionDecision"] == "deny"

            async def frozen() -> bool:
                return any(f.tenant == "default" for f in await active_freezes(bus.redis, bus.keys))

            await async_wait_for(frozen, timeout_s=10)
            said: list[str] = []

            async def denied() -> bool:  # every node obeys a freeze within a second
                found = (await p.post(pre_tool_use("ls", "fleet-other"))).json().get("hookSpecificOutput") or {}
                said[:] = [found.get("permissionDecisionReason", "")]
                return bool(found.get("permissionDecision") == "deny")

            await async_wait_for(denied, timeout_s=10)
            assert "rm_denies" in said[0]
    finally:
        await bus.redis.hdel(bus.keys.freezes, "default")  # type: ignore[misc]


GATED = """hookbus:
  deadlineSeconds: 5
  session:
    counters:
      rm_denies:
        window: 10m
        scope: tenant
        count: [{event: PreToolUse, rules: ["Bash(rm -rf *)"]}]
        decisions: [deny]
hooks:
  PreToolUse:
    - matcher: Bash
      hooks: [{type: rule, deny: ["Bash(rm -rf *)"]}]
    - matcher: Bash
      when: {counters: {rm_denies: {gte: 2}}}
      hooks: [{type: rule, deny: ["Bash(git push *)"], reason: "this tenant tried rm -rf twice"}]
"""


async def test_a_when_reads_its_tenants_counter(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(GATED, dispatchers=2) as p:
        for n in range(2):
            await p.post(pre_tool_use("rm -rf /tmp/x", f"gated-{n}"))
        said: list[str] = []

        async def push_denied() -> bool:  # another session: every dispatcher sees the count within a poll
            found = (await p.post(pre_tool_use("git push", "gated-other"))).json().get("hookSpecificOutput") or {}
            said[:] = [found.get("permissionDecisionReason", "")]
            return bool(found.get("permissionDecision") == "deny")

        await async_wait_for(push_denied, timeout_s=10)
        assert "tried rm -rf twice" in said[0]


async def test_values_a_process_reads_are_its_tenants_own(bus: BusProbe, tenants: tuple[str, str]) -> None:
    a, b = tenants
    values = FleetValues(bus.redis, bus.keys)
    fleet = FleetCounts(bus.redis, bus.keys, session_families(Metrics()), values)
    rm = counters()["rm_denies"]
    assert values.get(a, "claude", rm) == 0 and values.get(b, "claude", rm) == 0
    await fleet.count(event(a, "rm -rf /", "s1"), [rm])
    await fleet.count(event(a, "rm -rf /", "s2"), [rm])
    assert values.get(a, "claude", rm) == 2  # from the count's own answer
    assert values.get(b, "claude", rm) == 0
    other = FleetValues(bus.redis, bus.keys)  # another dispatcher's copy: a poll brings it
    assert other.get(a, "claude", rm) == 0
    await other.refresh()
    assert other.get(a, "claude", rm) == 2 and other.get(b, "claude", rm) == 0
