"""The freeze on a live gateway and dispatcher: who may set it, what it denies, for whom, how it shows."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import yaml

from bus.freeze.store import freeze
from bus.runtime.settings import Tokens
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import BusProbe, Platform, assert_error, async_wait_for, logged, pre_tool_use
from tests.gateway.approvals.helpers import ADMIN, answer, asking, decision_of, pending, platform_with

DENY_RM = yaml.safe_dump(
    {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(rm -rf *)"]}]}]}}
)


class Fleet:
    """Two tenants of this test's own, with an agent token each, an admin token for the first, an org admin."""

    def __init__(self) -> None:
        run = uuid.uuid4().hex[:8]
        self.a, self.b = f"acme-{run}", f"beta-{run}"
        self.agent_a = {"Authorization": "Bearer tok-a"}
        self.agent_b = {"Authorization": "Bearer tok-b"}
        self.admin_a = {"Authorization": "Bearer tok-a-admin"}
        self.org = {"Authorization": "Bearer tok-org"}
        self.settings = {
            "tokens": Tokens.parse(f"{self.a}:tok-a,{self.b}:tok-b"),
            "tenant_admin_tokens": Tokens.parse(f"{self.a}:tok-a-admin"),
            "admin_tokens": Tokens.parse_admin("tok-org"),
        }


@pytest.fixture
def fleet() -> Fleet:
    return Fleet()


@contextlib.asynccontextmanager
async def frozen_platform(
    platform: Callable[..., Any], bus: BusProbe, fleet: Fleet, policy: str = DENY_RM, **settings: Any
) -> AsyncIterator[Platform]:
    try:
        async with platform(policy, **fleet.settings, **settings) as p:
            yield p
    finally:
        await bus.redis.hdel(bus.keys.freezes, fleet.a, fleet.b)  # type: ignore[misc]


def permission(response: httpx.Response) -> str:
    return str(response.json().get("hookSpecificOutput", {}).get("permissionDecision", "none"))


async def set_freeze(p: Platform, headers: dict[str, str], **body: Any) -> httpx.Response:
    return await p.client.post(f"{p.url}/v1/freeze", json=body, headers=headers)


async def test_a_frozen_tenants_tools_are_denied_saying_why_and_the_other_tenant_runs(
    platform: Callable[..., Any], bus: BusProbe, fleet: Fleet
) -> None:
    async with frozen_platform(platform, bus, fleet) as p:
        assert permission(await p.post(pre_tool_use("ls"), headers=fleet.agent_a)) == "none"
        answer = await set_freeze(p, fleet.org, tenant=fleet.a, until="1h", reason="credential leak", by="alice")
        assert answer.status_code == 200, answer.text
        set_ = answer.json()["freeze"]
        assert set_["by"] == "alice (org admin)" and "Bash" in set_["tools"] and set_["until"]
        denied = await p.post(pre_tool_use("ls"), headers=fleet.agent_a)
        assert permission(denied) == "deny"
        assert denied.headers["X-Hookbus-Frozen"] == fleet.a
        reason = denied.json()["hookSpecificOutput"]["permissionDecisionReason"]
        assert f"tenant {fleet.a} is frozen" in reason and "by alice (org admin)" in reason
        assert "since " in reason and "until " in reason and reason.endswith(": credential leak")
        record = await logged(bus, denied)
        assert (record.decision, record.outcome, record.reason) == ("deny", "decided", reason)
        assert record.hooks[0]["type"] == "freeze" and record.hooks[0]["decided"]
        assert record.tool_name == "Bash" and b'"ls"' in record.payload
        assert record.token_id  # who sent it, as in every record
        secret = "ghp_" + "a1B2" * 9
        masked = await logged(bus, await p.post(pre_tool_use(f"echo {secret}"), headers=fleet.agent_a))
        assert masked.decision == "deny" and secret.encode() not in masked.payload and masked.masked
        # Tenant isolation: the other tenant's calls, and the frozen tenant's reading tools, run.
        assert permission(await p.post(pre_tool_use("ls"), headers=fleet.agent_b)) == "none"
        read = pre_tool_use("x", tool="Read", tool_input={"file_path": "/tmp/x"})
        assert permission(await p.post(read, headers=fleet.agent_a)) == "none"
        # The policy's deny stays a deny for both.
        assert permission(await p.post(pre_tool_use("rm -rf /"), headers=fleet.agent_b)) == "deny"
        assert p.metrics.frozen_decisions.labels(fleet.a)._value.get() == 2
        ready = (await p.client.get(f"{p.url}/readyz")).json()
        assert [f["tenant"] for f in ready["checks"]["freezes"]["frozen"] if f["tenant"] in (fleet.a, fleet.b)] == [
            fleet.a
        ]
        lifted = await p.client.delete(f"{p.url}/v1/freeze", params={"tenant": fleet.a}, headers=fleet.admin_a)
        assert lifted.status_code == 200 and lifted.json()["lifted"]["tenant"] == fleet.a
        assert permission(await p.post(pre_tool_use("ls"), headers=fleet.agent_a)) == "none"


async def test_only_an_org_admin_or_the_tenants_admin_may_freeze_or_unfreeze(
    platform: Callable[..., Any], bus: BusProbe, fleet: Fleet
) -> None:
    async with frozen_platform(platform, bus, fleet) as p:
        for who, tenant, role in (
            (fleet.agent_a, fleet.a, f"tenant {fleet.a}'s token"),  # an agent cannot freeze, even its own tenant
            (fleet.admin_a, fleet.b, f"tenant {fleet.a}'s admin"),  # a tenant admin only its own
        ):
            body = assert_error(await set_freeze(p, who, tenant=tenant), 403, "forbidden")
            assert f"freezing tenant {tenant} needs an org-admin token" in body["detail"] and role in body["detail"]
        assert_error(await set_freeze(p, {"Authorization": "Bearer nope"}, tenant=fleet.a), 401)
        whoami = (await p.client.get(f"{p.url}/v1/whoami", headers=fleet.admin_a)).json()
        assert whoami == {"tenant": fleet.a, "tenant_admin": True, "tokens": True}
        assert_error(await p.post(pre_tool_use("ls"), headers=fleet.admin_a), 401)  # it sends no events
        answer = await set_freeze(p, fleet.admin_a, tenant=fleet.a, tools=["Write|Edit"], by="eve (org admin)")
        assert (
            answer.status_code == 200 and answer.json()["freeze"]["by"] == f"eve org admin (tenant {fleet.a}'s admin)"
        )
        # An agent can neither lift the freeze that stops it nor see another tenant's.
        refused = await p.client.delete(f"{p.url}/v1/freeze", params={"tenant": fleet.a}, headers=fleet.agent_a)
        assert "unfreezing tenant" in assert_error(refused, 403, "forbidden")["detail"]
        seen = {
            f["tenant"] for f in (await p.client.get(f"{p.url}/v1/freeze", headers=fleet.agent_b)).json()["freezes"]
        }
        assert fleet.a not in seen
        mine = (await p.client.get(f"{p.url}/v1/freeze", headers=fleet.agent_a)).json()["freezes"]
        assert [f["tenant"] for f in mine] == [fleet.a]
        everyone = (await p.client.get(f"{p.url}/v1/freeze", headers=fleet.org)).json()["freezes"]
        assert fleet.a in {f["tenant"] for f in everyone}
        # Only the named tools: Bash still runs, Edit is denied.
        assert permission(await p.post(pre_tool_use("ls"), headers=fleet.agent_a)) == "none"
        edit = pre_tool_use("x", tool="Edit", tool_input={"file_path": "/tmp/x"})
        assert permission(await p.post(edit, headers=fleet.agent_a)) == "deny"
        # Bad input is a clear 400.
        for body_, says in (
            ({"tenant": fleet.a, "until": "soon"}, "duration"),
            ({"tenant": fleet.a, "until": "2020-01-01T00:00:00Z"}, "passed"),
            ({"tenant": fleet.a, "tools": ["(unclosed"]}, "tools"),
            ({"tenant": fleet.a, "colour": "red"}, "colour"),
            ({}, "tenant"),
        ):
            assert says in assert_error(await set_freeze(p, fleet.org, **body_), 400, "invalid_freeze")["detail"]


async def test_a_freeze_holds_with_no_dispatcher_and_in_every_dialect(
    platform: Callable[..., Any], bus: BusProbe, fleet: Fleet
) -> None:
    async with frozen_platform(platform, bus, fleet, dispatchers=0) as p:
        assert (await set_freeze(p, fleet.org, tenant=fleet.a)).status_code == 200
        # No dispatcher: an unfrozen call waits out its deadline and fails open; a frozen one is denied at once.
        denied = await p.post(pre_tool_use("ls"), headers=fleet.agent_a)
        assert permission(denied) == "deny" and denied.headers["X-Hookbus-Outcome"] == "decided"
        gemini: dict[str, Any] = {"hook_event_name": "BeforeTool", "session_id": "g", "tool_name": "run_shell_command"}
        gemini["tool_input"] = {"command": "ls"}
        answer = await p.client.post(
            f"{p.url}/v1/hooks", json=gemini, params={"dialect": "gemini"}, headers=fleet.agent_a
        )
        assert answer.json()["decision"] == "deny" and fleet.a in answer.json()["reason"]
        request = {"hook_event_name": "PermissionRequest", "session_id": "p", "tool_name": "Write", "tool_input": {}}
        decided = (await p.post(request, headers=fleet.agent_a)).json()["hookSpecificOutput"]["decision"]
        assert decided["behavior"] == "deny" and "is frozen" in decided["message"]


async def test_a_freeze_set_in_redis_is_obeyed_within_a_second(
    platform: Callable[..., Any], bus: BusProbe, fleet: Fleet
) -> None:
    async with frozen_platform(platform, bus, fleet) as p:
        assert permission(await p.post(pre_tool_use("ls"), headers=fleet.agent_a)) == "none"
        # What an automatic trigger calls: no gateway is told, each reads it on its next poll.
        await freeze(bus.redis, bus.keys, fleet.a, None, None, "20 denies in 5 minutes", "deny counter")

        async def frozen() -> bool:
            return permission(await p.post(pre_tool_use("ls"), headers=fleet.agent_a)) == "deny"

        await async_wait_for(frozen, timeout_s=1.0)
        assert permission(await p.post(pre_tool_use("ls"), headers=fleet.agent_b)) == "none"


async def test_a_freeze_holds_while_redis_is_down(
    platform: Callable[..., Any], private_redis: EmbeddedRedis, fleet: Fleet
) -> None:
    async with platform(DENY_RM, on_redis=private_redis.url, **fleet.settings) as p:
        assert (await set_freeze(p, fleet.org, tenant=fleet.a)).status_code == 200
        private_redis.stop()
        try:
            # Everything else fails open with Redis gone; the frozen tenant's tools stay denied.
            denied = await p.post(pre_tool_use("ls"), headers=fleet.agent_a)
            assert permission(denied) == "deny" and denied.headers["X-Hookbus-Frozen"] == fleet.a
            opened = await p.post(pre_tool_use("ls"), headers=fleet.agent_b)
            assert opened.headers["X-Hookbus-Outcome"] == "fail-open"
            # Lifting needs Redis: refused, nothing changed.
            refused = await p.client.delete(f"{p.url}/v1/freeze", params={"tenant": fleet.a}, headers=fleet.org)
            assert_error(refused, 503, "unavailable")
            assert permission(await p.post(pre_tool_use("ls"), headers=fleet.agent_a)) == "deny"
        finally:
            private_redis.start()


async def test_a_call_held_for_a_person_is_denied_when_its_tenant_is_frozen_meanwhile(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    try:
        async with platform_with(platform) as p, asking(p) as held:
            [approval] = await pending(p)
            assert (await set_freeze(p, ADMIN, tenant="acme", reason="incident")).status_code == 200
            assert (await answer(p, approval["id"], "approve")).status_code == 200
            reply = await held
            decision, reason = decision_of(reply)
            assert decision == "deny" and "tenant acme is frozen" in reason and reason.endswith(": incident")
            records = await async_wait_for(lambda: _records_of(bus, reply.headers["X-Hookbus-Event-Id"], 3), 5)
            assert records[-1].decision == "deny" and records[-1].hooks[0]["type"] == "freeze"
            assert p.metrics.frozen_decisions.labels("acme")._value.get() == 1
    finally:
        await bus.redis.hdel(bus.keys.freezes, "acme")  # type: ignore[misc]


async def _records_of(bus: BusProbe, event_id: str, count: int) -> list[Any] | None:
    found = [r for r in await bus.log() if r.event_id == event_id]
    return found if len(found) >= count else None
