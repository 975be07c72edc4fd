"""A dispatcher obeys a freeze too: an event that reaches it frozen is denied, whatever the policy says."""

from __future__ import annotations

import uuid

import orjson

from bus.freeze.freezes import Freeze
from bus.policy.loading import policy_from_text
from bus.runtime.metrics import Metrics
from bus.stream.protocol import Request, now_ms
from tests.conftest import BusProbe, policy_yaml, pre_tool_use
from workers.engine.evaluation import Engine

ALLOW_ALL = policy_yaml({"PreToolUse": [{"matcher": "*", "hooks": [{"type": "rule", "allow": ["Bash", "Read"]}]}]})


def request(tenant: str, command: str, tool: str = "Bash") -> tuple[Request, dict[str, object]]:
    hook_input = pre_tool_use(command, tool=tool)
    received = now_ms()
    fields = (f"evt-{uuid.uuid4().hex[:8]}", "PreToolUse", tenant, orjson.dumps(hook_input), received)
    return Request(*fields, deadline_ms=received + 5000, reply_to="gw-test"), hook_input


async def test_the_engine_denies_a_frozen_tenants_tool_and_allows_the_others(bus: BusProbe) -> None:
    metrics = Metrics()
    policy = policy_from_text(ALLOW_ALL)
    engine = Engine(policy, bus.redis, bus.keys, {}, metrics=metrics)
    engine.freezes.put(Freeze.new("acme", ["Bash"], reason="incident", by="alice"))
    frozen = await engine.evaluate(*request("acme", "ls"))
    assert frozen.merged.decision == "deny" and "tenant acme is frozen" in (frozen.merged.reason or "")
    assert frozen.decided_by == ["freeze"] and frozen.results[0].handler_type == "freeze"
    assert metrics.frozen_decisions.labels("acme")._value.get() == 1
    assert (await engine.evaluate(*request("beta", "ls"))).merged.decision == "allow"  # another tenant
    assert (await engine.evaluate(*request("acme", "x", tool="Read"))).merged.decision == "allow"  # another tool
    engine.freezes.drop("acme")
    assert (await engine.evaluate(*request("acme", "ls"))).merged.decision == "allow"
