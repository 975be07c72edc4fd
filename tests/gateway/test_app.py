"""The gateway's HTTP API and metrics (docs/api.md, docs/metrics.md), over real HTTP against a live platform.

Each test runs a real uvicorn gateway on 127.0.0.1 plus in-process dispatchers on the suite's
Redis; decisions are checked in the HTTP reply *and* in the decision-log stream.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bus.runtime.settings import Tokens
from hookbus.platform.redis_server import free_port
from tests.conftest import (
    DENY_RM,
    BusProbe,
    assert_error,
    async_wait_for,
    exposition_samples,
    hookbus_process,
    logged,
    port_open,
    pre_tool_use,
    wait_for,
)

CORE_METRICS = (
    "hookbus_decisions_total",
    "hookbus_decision_latency_seconds",
    "hookbus_fail_open_total",
    "hookbus_hook_duration_seconds",
    "hookbus_async_jobs_total",
)


# -- malformed input -------------------------------------------------------------------------


#: Malformed inputs: the refusal code, and whether the event is one the gateway would wait on
#: (then the answer is a deny, 200, saying why) or not (then a 400). An event that cannot be read
#: counts as one it waits on: what cannot be judged is denied.
MALFORMED = [
    (b"{not json", "invalid_json", True),
    (b"", "invalid_json", True),
    (b"\xff\xfe\x00garbage", "invalid_json", True),  # not UTF-8
    (b"[" * 100_000 + b"]" * 100_000, "invalid_json", True),  # nested past the parser's depth limit
    (b'[{"hook_event_name": "Stop", "session_id": "s"}]', "invalid_input", True),
    (b'"just a string"', "invalid_input", True),
    (b"null", "invalid_input", True),
    (b'{"session_id": "s"}', "missing_field", True),
    (b'{"hook_event_name": "Stop"}', "missing_field", False),  # DENY_RM listens to PreToolUse only
    (b'{"hook_event_name": "Stop", "session_id": 5}', "invalid_field", False),
    (b'{"hook_event_name": ["Stop"], "session_id": "s"}', "invalid_field", True),
    (b'{"hook_event_name": "", "session_id": "s"}', "invalid_field", True),
    (b'{"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": 7}', "invalid_field", True),
    (
        b'{"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "Bash", "tool_input": [1]}',
        "invalid_field",
        True,
    ),
    (b'{"hook_event_name": "PostToolUse", "session_id": "s", "tool_input": "rm -rf /"}', "invalid_field", False),
]


@pytest.mark.parametrize(("body", "code", "denied"), MALFORMED)
async def test_malformed_input_is_denied_or_a_400_with_a_json_error(
    platform: Callable[..., Any], body: bytes, code: str, denied: bool
) -> None:
    async with platform(DENY_RM) as p:
        response = await p.post(body, headers={"content-type": "application/json"})
    if not denied:
        assert_error(response, 400, code)
        return
    assert response.status_code == 200, response.text
    assert response.headers["X-Hookbus-Refused"].startswith(f"{code}: ")
    answer = response.json()
    specific = answer.get("hookSpecificOutput", {})
    assert answer.get("decision") == "block" or specific.get("permissionDecision") == "deny", answer
    assert "cannot judge" in (answer.get("reason") or specific.get("permissionDecisionReason"))


async def test_bodies_over_the_limit_are_denied_with_or_without_content_length(platform: Callable[..., Any]) -> None:
    big = b'{"hook_event_name": "Stop", "session_id": "s", "pad": "' + b"x" * (5 << 20) + b'"}'

    async def chunked() -> AsyncIterator[bytes]:
        for start in range(0, len(big), 64 << 10):
            yield big[start : start + (64 << 10)]

    async with platform(DENY_RM) as p:
        declared = await p.post(big)
        streamed = await p.client.post(f"{p.url}/v1/hooks", content=chunked())
        assert "content-length" not in streamed.request.headers
        assert streamed.request.headers["transfer-encoding"] == "chunked"
        # Not read past the limit, so the event is not known: the answer that denies any of them.
        for refused in (declared, streamed):
            assert refused.status_code == 200
            assert refused.headers["X-Hookbus-Refused"].startswith("payload_too_large: ")
            assert refused.json()["decision"] == "block" and "cannot judge" in refused.json()["reason"]
        # The limit is the limit: a body just under it is fine.
        small = await p.post({"hook_event_name": "Notification", "session_id": "s", "pad": "x" * 1000})
        assert small.status_code == 200


async def test_odd_but_valid_json_is_never_a_500(platform: Callable[..., Any], bus: BusProbe) -> None:
    deep: Any = "leaf"
    for _ in range(500):
        deep = {"d": deep}
    odd: list[Any] = [
        {"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": None, "tool_input": None},
        {"hook_event_name": "PreToolUse", "session_id": "s\u0000\u202e", "tool_name": "Bash"},
        {"hook_event_name": "Stop\u00e9\U0001f600", "session_id": "s", "huge": 10**30},
    ]
    async with platform(DENY_RM) as p:
        for body in odd:
            response = await p.post(body)
            assert response.status_code == 200, (body, response.text)
            assert response.json() == {}
            assert (await logged(bus, response)).outcome in {"decided", "recorded"}
        # Nested past hookbus.limits.nestingDepth (64): a clear 400, never a poison entry.
        response = await p.post({"hook_event_name": "Notification", "session_id": "s", "deep": deep})
        assert response.status_code == 400
        assert response.json()["error"] == "too_deep"


# -- decisions ---------------------------------------------------------------------------------


async def test_rule_deny_and_allow(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(DENY_RM) as p:
        denied = await p.post(pre_tool_use("rm -rf /"))
        assert denied.status_code == 200
        assert denied.headers["X-Hookbus-Outcome"] == "decided"
        specific = denied.json()["hookSpecificOutput"]
        assert specific["hookEventName"] == "PreToolUse"
        assert specific["permissionDecision"] == "deny"
        assert "no rm -rf" in specific["permissionDecisionReason"]

        allowed = await p.post(pre_tool_use("ls -la"))
        assert allowed.status_code == 200
        assert allowed.json() == {}
        assert allowed.headers["X-Hookbus-Outcome"] == "decided"

        other_tool = await p.post({**pre_tool_use("rm -rf /"), "tool_name": "Read"})
        assert other_tool.json() == {}

        record = await logged(bus, denied)
        assert (record.outcome, record.decision, record.tool_name) == ("decided", "deny", "Bash")
        assert record.output == denied.json()
        assert record.session_id == "s-1"
        assert record.hooks and record.hooks[0]["type"] == "rule"
        assert (await logged(bus, allowed)).decision == "none"


async def test_non_blocking_and_unknown_events_are_recorded(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(DENY_RM) as p:
        note = await p.post({"hook_event_name": "Notification", "session_id": "s-2", "message": "hi"})
        unknown = await p.post({"hook_event_name": "MadeUpEvent", "session_id": "s-2", "extra": [1]})
        unhandled = await p.post({"hook_event_name": "PostToolUse", "session_id": "s-2", "tool_name": "Bash"})
        for response in (note, unknown, unhandled):
            assert response.status_code == 200
            assert response.json() == {}
            assert response.headers["X-Hookbus-Outcome"] == "recorded"
        for response, event in ((note, "Notification"), (unknown, "MadeUpEvent"), (unhandled, "PostToolUse")):
            record = await logged(bus, response)
            assert (record.event, record.outcome, record.decision) == (event, "recorded", "none")
            assert record.session_id == "s-2"
        # Unknown fields travel unchanged: the log keeps the exact bytes the agent sent.
        assert b'"extra":[1]' in (await logged(bus, unknown)).payload


# -- auth and rate limit -------------------------------------------------------------------------


async def test_tokens(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(DENY_RM, tokens=Tokens.parse("acme:tok-a,beta:tok-b")) as p:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "Basic tok-a"},
            {"Authorization": "Bearer"},
            {"Authorization": "tok-a"},
        ):
            response = await p.post(pre_tool_use("ls"), headers=headers)
            assert_error(response, 401, "unauthorized")
            assert response.headers["WWW-Authenticate"] == "Bearer"
        ok = await p.post(pre_tool_use("rm -rf /"), headers={"Authorization": "Bearer tok-a"})
        assert ok.status_code == 200
        assert ok.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert (await logged(bus, ok)).tenant == "acme"
        other = await p.post({"hook_event_name": "Stop", "session_id": "s"}, headers={"authorization": "bearer tok-b"})
        assert (await logged(bus, other)).tenant == "beta"
        # Two Authorization headers: whichever one a proxy checked, hookbus refuses.
        twice = await p.post(
            pre_tool_use("ls"), headers=[("Authorization", "Bearer tok-a"), ("Authorization", "Bearer wrong")]
        )
        assert_error(twice, 401, "unauthorized")
        assert "more than one" in twice.json()["detail"]


async def test_rate_limit_is_a_429_with_retry_after_per_tenant(platform: Callable[..., Any]) -> None:
    tokens = Tokens.parse("acme:tok-a,beta:tok-b")
    async with platform(DENY_RM, tokens=tokens, rate_limit_per_s=1, rate_limit_burst=2) as p:
        acme = {"Authorization": "Bearer tok-a"}

        def note(session: str) -> dict[str, str]:
            return {"hook_event_name": "Notification", "session_id": session}

        statuses = [(await p.post(note(f"s-{i}"), headers=acme)).status_code for i in range(2)]
        assert statuses == [200, 200]
        limited = await p.post(note("s-3"), headers=acme)
        assert_error(limited, 429, "rate_limited")  # an event the agent does not wait on (test_limits: one it does)
        assert int(limited.headers["Retry-After"]) >= 1
        # Another tenant has its own bucket.
        assert (await p.post(pre_tool_use("ls"), headers={"Authorization": "Bearer tok-b"})).status_code == 200


# -- health, readiness, metrics --------------------------------------------------------------------


async def test_healthz_and_readyz(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM) as p:
        health = await p.client.get(f"{p.url}/healthz")
        assert health.status_code == 200
        assert health.json() == {"status": "ok"}
        ready = await async_wait_for(lambda: _ready(p.client, p.url), timeout_s=5)  # the dispatcher's first heartbeat
        checks = ready["checks"]
        assert ready["ready"] is True
        assert checks["redis"]["ok"] is True
        assert (checks["policy"]["ok"], checks["policy"]["revision"]) == (True, p.policy.revision)
        assert checks["replies"]["ok"] is True
        assert checks["dispatchers"]["alive"] >= 1


async def _ready(client: httpx.AsyncClient, url: str) -> dict[str, Any] | None:
    response = await client.get(f"{url}/readyz")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body if body["checks"].get("dispatchers", {}).get("ok") else None


async def test_metrics_endpoint_exposes_the_core_metrics(platform: Callable[..., Any]) -> None:
    deny_key = ("hookbus_decisions_total", frozenset({("event", "PreToolUse"), ("decision", "deny")}))
    count_key = ("hookbus_decision_latency_seconds_count", frozenset({("event", "PreToolUse")}))
    async with platform(DENY_RM) as p:
        await p.post(pre_tool_use("rm -rf /"))
        first = await p.client.get(f"{p.url}/metrics")
        assert first.status_code == 200
        assert first.headers["content-type"].startswith("text/plain")
        families = {family.name for family in text_string_to_metric_families(first.text)}
        for name in CORE_METRICS:
            assert name.removesuffix("_total") in families, name
        before = exposition_samples(first.text)
        for _ in range(3):
            assert "deny" in (await p.post(pre_tool_use("rm -rf /tmp/x"))).text
        await p.post(pre_tool_use("echo hi"))
        after = exposition_samples((await p.client.get(f"{p.url}/metrics")).text)
        assert after[deny_key] - before[deny_key] == 3
        assert after[count_key] - before[count_key] == 4
        hook_runs = ("hookbus_hook_duration_seconds_count", frozenset({("type", "rule")}))
        assert after[hook_runs] - before.get(hook_runs, 0.0) == 4


# -- the real server ---------------------------------------------------------------------------------


def test_the_real_gateway_process_keeps_the_contract(
    redis_url: str, write_policy: Callable[..., Path], children: list[subprocess.Popen[bytes]]
) -> None:
    """``hookbus gateway`` serves with uvloop + httptools (the fixture uses h11): same answers."""
    port = free_port()
    gateway = hookbus_process(
        "gateway", "--config", str(write_policy(DENY_RM)), "--redis-url", redis_url, "--port", str(port)
    )
    children.append(gateway)
    wait_for(lambda: port_open(port) or gateway.poll() is not None, timeout_s=20)
    assert gateway.poll() is None
    big = b'{"hook_event_name": "Stop", "session_id": "s", "pad": "' + b"x" * (5 << 20) + b'"}'

    def chunked() -> Iterator[bytes]:
        yield from (big[start : start + (64 << 10)] for start in range(0, len(big), 64 << 10))

    url = f"http://127.0.0.1:{port}/v1/hooks"
    with httpx.Client(timeout=10) as client:
        for refused in (client.post(url, content=big), client.post(url, content=chunked())):
            assert (refused.status_code, refused.json()["decision"]) == (200, "block")
            assert refused.headers["X-Hookbus-Refused"].startswith("payload_too_large: ")
        unread = client.post(url, content=b"\xff{")
        assert unread.headers["X-Hookbus-Refused"].startswith("invalid_json: ")
        assert_error(client.post(url, json={"hook_event_name": "Stop", "session_id": 5}), 400, "invalid_field")
        recorded = client.post(url, json={"hook_event_name": "Notification", "session_id": "s"})
        assert (recorded.status_code, recorded.json()) == (200, {})
        assert recorded.headers["X-Hookbus-Outcome"] == "recorded"
        assert client.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        assert "hookbus_decisions_total" in client.get(f"http://127.0.0.1:{port}/metrics").text


def test_a_public_bind_without_tokens_is_refused(redis_url: str, write_policy: Callable[..., Path]) -> None:
    gateway = hookbus_process(
        "gateway",
        "--config",
        str(write_policy(DENY_RM)),
        "--redis-url",
        redis_url,
        "--host",
        "0.0.0.0",
        "--port",
        str(free_port()),
    )
    _, stderr = gateway.communicate(timeout=20)
    assert gateway.returncode == 1
    assert b"--insecure" in stderr and b"HOOKBUS_TOKENS" in stderr
