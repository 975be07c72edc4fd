"""The gateway's edges: every error is JSON, bad fields and dialects are named, /metrics can
require a token, /v1/whoami names the tenant, /readyz says when the policy is empty."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from bus.dialects import DIALECTS
from bus.runtime.settings import Tokens
from tests.conftest import DENY_RM, pre_tool_use


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "detail"} and body["detail"]
    return body


async def test_unknown_paths_and_methods_are_json(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM) as p:
        missing = error_of(await p.client.get(f"{p.url}/v1/hook"), 404)
        assert missing == {
            "error": "not_found",
            "detail": "no such endpoint: GET /v1/hook (hook events go to POST /v1/hooks)",
        }
        assert error_of(await p.client.post(f"{p.url}/nope", json={}), 404)["error"] == "not_found"
        wrong = await p.client.post(f"{p.url}/healthz")
        assert error_of(wrong, 405) == {"error": "method_not_allowed", "detail": "/healthz does not take POST"}
        assert "GET" in wrong.headers["allow"]
        assert error_of(await p.client.delete(f"{p.url}/metrics"), 405)["error"] == "method_not_allowed"
        assert error_of(await p.client.get(f"{p.url}/v1/hooks"), 405)["error"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"tool_name": 7}, "'tool_name' must be a string"),
        ({"tool_name": ["Bash"]}, "'tool_name' must be a string"),
        ({"tool_name": "Bash", "tool_input": [1]}, "'tool_input' must be a JSON object"),
        ({"tool_name": "Bash", "tool_input": "rm -rf /"}, "'tool_input' must be a JSON object"),
    ],
)
async def test_tool_fields_of_the_wrong_type_are_denied_or_a_400_naming_the_field(
    platform: Callable[..., Any], fields: dict[str, Any], named: str
) -> None:
    async with platform(DENY_RM) as p:
        # An event the policy decides cannot be judged: denied, saying why.
        denied = await p.post({"hook_event_name": "PreToolUse", "session_id": "s", **fields})
        # One it does not decide (DENY_RM has no PostToolUse handler) stays a 400.
        refused = await p.post({"hook_event_name": "PostToolUse", "session_id": "s", **fields})
    assert denied.status_code == 200 and denied.headers["X-Hookbus-Refused"] == f"invalid_field: {named}"
    assert denied.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert named in denied.json()["hookSpecificOutput"]["permissionDecisionReason"]
    assert error_of(refused, 400) == {"error": "invalid_field", "detail": named}


async def test_an_unknown_dialect_is_a_400_listing_the_known_ones(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM) as p:
        by_query = await p.client.post(f"{p.url}/v1/hooks?dialect=pery", json=pre_tool_use("ls"))
        assert error_of(by_query, 400) == {
            "error": "unknown_dialect",
            "detail": f"unknown dialect 'pery' (known dialects: {', '.join(DIALECTS)})",
        }
        by_header = await p.post(pre_tool_use("ls"), headers={"X-Hookbus-Dialect": "kodex"})
        assert error_of(by_header, 400)["error"] == "unknown_dialect"
        for known in ("claude", "Claude", "PERI"):
            reply = await p.client.post(f"{p.url}/v1/hooks?dialect={known}", json=pre_tool_use("rm -rf /"))
            assert reply.status_code == 200 and "no rm -rf" in reply.text


async def test_metrics_can_require_a_token(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM, metrics_token="m-secret") as p:
        assert error_of(await p.client.get(f"{p.url}/metrics"), 401)["error"] == "unauthorized"
        wrong = await p.client.get(f"{p.url}/metrics", headers={"Authorization": "Bearer m-secre"})
        assert error_of(wrong, 401)["detail"] == "missing or wrong metrics token"
        good = await p.client.get(f"{p.url}/metrics", headers={"Authorization": "Bearer m-secret"})
        assert good.status_code == 200 and "hookbus_decisions_total" in good.text
        assert (await p.client.get(f"{p.url}/healthz")).status_code == 200  # probes need no token


async def test_whoami_names_the_tenant_of_the_token(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM, tokens=Tokens.parse("fleet-a:tok-a,fleet-b:tok-b")) as p:
        who = await p.client.get(f"{p.url}/v1/whoami", headers={"Authorization": "Bearer tok-b"})
        assert who.json() == {"tenant": "fleet-b", "tokens": True}
        refused = await p.client.get(f"{p.url}/v1/whoami", headers={"Authorization": "Bearer nope"})
        assert error_of(refused, 401)["error"] == "unauthorized"
    async with platform(DENY_RM) as p:
        assert (await p.client.get(f"{p.url}/v1/whoami")).json() == {"tenant": "default", "tokens": False}


async def test_readyz_says_when_the_policy_is_empty(platform: Callable[..., Any]) -> None:
    async with platform("hooks: {}\n") as p:
        policy = (await p.client.get(f"{p.url}/readyz")).json()["checks"]["policy"]
        assert (policy["ok"], policy["empty"], policy["handlers"]) == (True, True, 0)
        assert policy["warning"] == "no policy: every event gets no opinion (pass --config)"
    async with platform(DENY_RM) as p:
        policy = (await p.client.get(f"{p.url}/readyz")).json()["checks"]["policy"]
        assert (policy["empty"], policy["handlers"]) == (False, 1) and "warning" not in policy
