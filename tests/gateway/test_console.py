"""The console's page (``GET /ui``) and ``POST /v1/policy/replay``, over real HTTP against a live platform."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bus.runtime.settings import Tokens
from gateway import console as console_module
from tests.conftest import DENY_RM, assert_error, logged, policy_yaml, pre_tool_use

TOKENS = Tokens.parse("acme:tok-a")
ADMIN = Tokens.parse_admin("tok-admin")
ADMIN_AUTH = {"Authorization": "Bearer tok-admin"}
CURL_CANDIDATE = policy_yaml(
    {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(curl *)"], "reason": "no curl"}]}]}
)


async def test_the_page_and_its_assets_are_served_from_the_package_with_a_strict_csp(
    platform: Callable[..., Any],
) -> None:
    async with platform(DENY_RM) as p:
        bare = await p.client.get(f"{p.url}/ui")
        assert bare.status_code in (307, 308) and bare.headers["location"].endswith("/ui/")
        page = await p.client.get(f"{p.url}/ui/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<script src="app.js"' in page.text and "http" not in page.text.split("<body>")[0]
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
        script = await p.client.get(f"{p.url}/ui/app.js")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
        assert "/v1/events/stream" in script.text and "sessionStorage" in script.text
        assert "localStorage" not in script.text and "innerHTML" not in script.text
        style = await p.client.get(f"{p.url}/ui/style.css")
        assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
        assert_error(await p.client.get(f"{p.url}/ui/nope.js"), 404, "not_found")


async def test_replay_needs_an_admin_token(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM, tokens=TOKENS, admin_tokens=ADMIN) as p:
        url = f"{p.url}/v1/policy/replay"
        assert_error(await p.client.post(url, json={"policy": CURL_CANDIDATE}), 401, "unauthorized")
        refused = await p.client.post(url, json={"policy": CURL_CANDIDATE}, headers={"Authorization": "Bearer tok-a"})
        assert_error(refused, 403, "forbidden")


async def test_replay_runs_the_candidate_over_the_recorded_window(platform: Callable[..., Any], bus: Any) -> None:
    async with platform(DENY_RM, tokens=TOKENS, admin_tokens=ADMIN) as p:
        auth = {"Authorization": "Bearer tok-a"}
        for command, session in (
            ("rm -rf /", "w-1"),
            ("curl https://x.example", "w-1"),
            ("curl y", "w-2"),
            ("ls", "w-2"),
        ):
            await logged(bus, await p.post(pre_tool_use(command, session), headers=auth))
        answer = await p.client.post(
            f"{p.url}/v1/policy/replay",
            headers=ADMIN_AUTH,
            json={"policy": CURL_CANDIDATE, "since": "1h", "tenant": ["acme"]},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        report = answer.json()
        assert report["replayed"] == 4 and report["changed"] == 3
        assert {(c["from"], c["to"]): c["count"] for c in report["changes"]} == {
            ("none", "deny"): 2,
            ("deny", "none"): 1,
        }
        assert report["top_rules"][0]["rule"].startswith("rule Bash(curl *)")
        assert report["window"]["tenants"] == ["acme"] and report["run_handlers"] is False
        assert report["candidate"]["sources"] == ["candidate.yaml"]


async def test_replay_imports_only_modules_the_running_policy_uses(platform: Callable[..., Any], bus: Any) -> None:
    candidate = policy_yaml(
        {
            "PreToolUse": [
                {
                    "matcher": "Bash",
                    "hooks": [
                        {"type": "function", "function": "tests.policy_functions_that_do_not_exist:deny"},
                        {"type": "command", "command": "exit 2"},
                    ],
                }
            ]
        }
    )
    async with platform(DENY_RM) as p:
        await logged(bus, await p.post(pre_tool_use("ls", "m-1")))
        answer = await p.client.post(f"{p.url}/v1/policy/replay", json={"policy": candidate}, timeout=60)
        assert answer.status_code == 200, answer.text
        report = answer.json()
        assert report["changed"] == 0
        assert report["not_replayed"]["handlers"] == {"function": 1, "command": 1}


async def test_a_bad_candidate_or_body_is_a_400(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM) as p:
        url = f"{p.url}/v1/policy/replay"
        broken = await p.client.post(
            url, json={"policy": "hooks:\n  PreToolUse: [{hooks: [{type: nope}]}]\n"}, timeout=60
        )
        body = assert_error(broken, 400, "invalid_policy")
        assert "candidate.yaml" in body["detail"] and "/tmp" not in body["detail"]
        assert_error(await p.client.post(url, json={"policy": "", "limit": 5}), 400, "invalid_body")
        assert_error(await p.client.post(url, json={"policy": "hooks: {}", "extra": 1}), 400, "invalid_body")
        assert_error(await p.client.post(url, content=b"not json"), 400, "invalid_body")
        when = await p.client.post(url, json={"policy": "hooks: {}", "since": "whenever"}, timeout=60)
        assert_error(when, 400, "invalid_time")


async def test_a_replay_past_its_time_limit_is_stopped(
    platform: Callable[..., Any], bus: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A child that has not stopped within its budget and the grace after it is killed.
    monkeypatch.setattr(console_module, "CHILD_GRACE_S", 0.05)
    async with platform(DENY_RM, console_budget_s=0.01) as p:
        slow = await p.client.post(f"{p.url}/v1/policy/replay", json={"policy": CURL_CANDIDATE}, timeout=60)
        assert_error(slow, 504, "replay_timeout")
        # The gateway is free for the next one.
        monkeypatch.setattr(console_module, "CHILD_GRACE_S", 60.0)
        again = await p.client.post(f"{p.url}/v1/policy/replay", json={"policy": CURL_CANDIDATE}, timeout=60)
        assert again.status_code == 200, again.text
