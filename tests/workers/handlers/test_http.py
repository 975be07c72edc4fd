"""Tests of :mod:`workers.handlers.http` and :mod:`workers.outbound.client` against real HTTP servers on 127.0.0.1.

Every server is an ``asyncio.start_server`` in the test's own loop, stopped when its ``async
with`` ends; the guard is told to allow ``127.0.0.0/8`` unless the test is about refusing it.
No packet goes anywhere but 127.0.0.1. Nothing waits on a fixed sleep: slow servers hang
until their test ends, and waits are conditions polled under a deadline.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time
from typing import Any

import httpx
import pytest

from bus.errors import OutboundError
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.loading import Policy, policy_from_text
from bus.stream.protocol import Request, now_ms
from hookbus.platform.redis_server import free_port
from tests.conftest import async_wait_for
from tests.loopback import LoopbackServer, Received, flood, hang, reply
from workers.handlers.context import HookContext
from workers.handlers.http import render_headers, run, run_http, url_allowed
from workers.outbound.client import GuardedClient, OutboundResponse, outbound_client
from workers.outbound.client import guarded_request as send_guarded
from workers.services import Services

PRE = "PreToolUse"
LOOPBACK = ["127.0.0.0/8"]
INPUT = {
    "session_id": "s-1",
    "hook_event_name": PRE,
    "tool_name": "Bash",
    "tool_input": {"command": "rm -rf /"},
    "cwd": "/tmp",
    "note": "ünïcödé",
}
# Deliberately not what json.dumps would write, so "the exact bytes" is checked.
PAYLOAD = json.dumps(INPUT, indent=1, ensure_ascii=False).encode()
DENY = {
    "hookSpecificOutput": {
        "hookEventName": PRE,
        "permissionDecision": "deny",
        "permissionDecisionReason": "nope from http",
    }
}


# ---- helpers --------------------------------------------------------------------------------


def http_policy(
    url: str, *, networks: list[str] | None = LOOPBACK, top: dict[str, Any] | None = None, **handler: Any
) -> Policy:
    """A policy with one PreToolUse http hook (JSON is YAML)."""
    doc: dict[str, Any] = {"hooks": {PRE: [{"matcher": "Bash", "hooks": [{"type": "http", "url": url, **handler}]}]}}
    if networks is not None:
        doc["hookbus"] = {"http": {"allowedNetworks": networks}}
    doc.update(top or {})
    return policy_from_text(json.dumps(doc))


def context(
    policy: Policy,
    services: Services | None,
    *,
    timeout_s: float = 5.0,
    deadline_s: float | None = None,
    payload: bytes = PAYLOAD,
) -> HookContext:
    received = now_ms()
    request = Request(
        "evt-1",
        PRE,
        "default",
        payload,
        received,
        deadline_ms=received + int(deadline_s * 1000) if deadline_s else 0,
        reply_to="gw-1" if deadline_s else "",
    )
    return HookContext(request, json.loads(payload), policy.entries(PRE)[0], policy, timeout_s, services)


async def call(server: LoopbackServer, services: Services | None, **kwargs: Any) -> HandlerResult:
    timeout_s = kwargs.pop("timeout_s", 5.0)
    return await run(context(http_policy(server.url(), **kwargs), services, timeout_s=timeout_s))


# ---- answers --------------------------------------------------------------------------------


@pytest.mark.system
async def test_deny_in_a_2xx_json_body_is_honoured_and_the_exact_input_was_posted(services: Services) -> None:
    async with LoopbackServer(reply(200, DENY, headers={"Content-Type": "application/json"})) as server:
        result = await call(server, services)
    assert result.outcome is Outcome.OK, result.reason
    assert result.output == DENY
    assert result.handler_type == "http"
    [got] = server.requests
    assert (got.method, got.target) == ("POST", "/hook")
    assert got.body == PAYLOAD
    assert got.headers["content-type"] == "application/json"
    assert got.headers["host"] == f"127.0.0.1:{server.port}"


@pytest.mark.parametrize("status", [200, 204])
@pytest.mark.system
async def test_empty_2xx_is_no_opinion(services: Services, status: int) -> None:
    async with LoopbackServer(reply(status)) as server:
        result = await call(server, services)
    assert result.outcome is Outcome.OK
    assert not result.output and result.text is None
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [400, 403, 500, 503])
@pytest.mark.system
async def test_non_2xx_is_an_error_even_with_a_deny_body(services: Services, status: int) -> None:
    async with LoopbackServer(reply(status, DENY)) as server:
        result = await call(server, services)
    assert result.outcome is Outcome.ERROR
    assert f"HTTP {status}" in (result.reason or "")
    assert result.output is None


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("permission denied", "not a JSON object"),
        ('["deny"]', "not a JSON object"),
        ('"deny"', "not a JSON object"),
        ('{"decision": "block"', "not a JSON object"),
        ('{"decision": "block",}', "JSON"),
        ('{"hookSpecificOutput": {"hookEventName": "Stop", "permissionDecision": "deny"}}', "schema"),
    ],
)
@pytest.mark.system
async def test_2xx_that_is_not_a_valid_json_object_is_an_error(services: Services, body: str, why: str) -> None:
    async with LoopbackServer(reply(200, body)) as server:
        result = await call(server, services)
    assert result.outcome is Outcome.ERROR and why in (result.reason or "")
    assert result.output is None and result.text is None


@pytest.mark.system
async def test_a_slow_server_times_out(services: Services) -> None:
    async with LoopbackServer(hang) as server:
        started = time.monotonic()
        result = await call(server, services, timeout_s=0.3)
        elapsed = time.monotonic() - started
        assert len(server.requests) == 1
    assert result.outcome is Outcome.TIMEOUT
    assert 0.25 <= elapsed < 2.0


@pytest.mark.system
async def test_the_event_deadline_bounds_the_timeout(services: Services) -> None:
    async with LoopbackServer(hang) as server:
        ctx = context(http_policy(server.url()), services, timeout_s=600.0, deadline_s=0.3)
        started = time.monotonic()
        result = await run(ctx)
    assert result.outcome is Outcome.TIMEOUT
    assert time.monotonic() - started < 2.0


@pytest.mark.system
async def test_a_declared_huge_body_is_refused_before_reading(services: Services) -> None:
    async with LoopbackServer(reply(200, "{" + " " * 5000 + "}")) as server:
        result = await call(
            server, services, top={"hookbus": {"http": {"allowedNetworks": LOOPBACK, "maxResponseBytes": 1024}}}
        )
    assert result.outcome is Outcome.ERROR
    assert "over 1024 bytes" in (result.reason or "")


@pytest.mark.system
async def test_an_endless_body_is_cut_at_the_cap(services: Services) -> None:
    async with LoopbackServer(flood) as server:
        started = time.monotonic()
        result = await call(
            server, services, top={"hookbus": {"http": {"allowedNetworks": LOOPBACK, "maxResponseBytes": 100_000}}}
        )
        assert result.outcome is Outcome.ERROR
        assert "over 100000 bytes" in (result.reason or "")
        assert time.monotonic() - started < 5.0
        await async_wait_for(lambda: server.client_hung_up, 5.0)


@pytest.mark.system
async def test_a_compressed_body_is_capped_after_decoding(services: Services) -> None:
    bomb = gzip.compress(b"{" + b" " * 1_000_000 + b"}")
    async with LoopbackServer(reply(200, bomb, headers={"Content-Encoding": "gzip"})) as server:
        result = await call(
            server, services, top={"hookbus": {"http": {"allowedNetworks": LOOPBACK, "maxResponseBytes": 100_000}}}
        )
    assert len(bomb) < 100_000
    assert server.requests[0].headers["accept-encoding"] == "identity"
    assert result.outcome is Outcome.ERROR and "over 100000 bytes" in (result.reason or "")


@pytest.mark.system
async def test_connection_refused_is_an_error(services: Services) -> None:
    policy = http_policy(f"http://127.0.0.1:{free_port()}/hook")
    result = await run(context(policy, services))
    assert result.outcome is Outcome.ERROR
    assert "connection to 127.0.0.1" in (result.reason or "")


async def test_loopback_is_refused_without_allowed_networks(services: Services) -> None:
    async with LoopbackServer(reply(200, DENY)) as server:
        result = await call(server, services, networks=None)
    assert result.outcome is Outcome.ERROR
    assert "SSRF guard" in (result.reason or "") and "loopback" in (result.reason or "")
    assert server.connections == 0 and server.requests == []


async def test_localhost_name_is_refused_without_allowed_networks(services: Services) -> None:
    async with LoopbackServer(reply(200, DENY)) as server:
        policy = http_policy(f"http://localhost:{server.port}/hook", networks=None)
        result = await run(context(policy, services))
    assert result.outcome is Outcome.ERROR
    assert "localhost resolves to" in (result.reason or "")
    assert server.connections == 0


@pytest.mark.system
async def test_redirects_are_not_followed(services: Services) -> None:
    async with LoopbackServer(reply(200, DENY)) as target:
        async with LoopbackServer(reply(302, headers={"Location": target.url("/moved")})) as origin:
            result = await call(origin, services)
        assert result.outcome is Outcome.ERROR
        assert "HTTP 302" in (result.reason or "")
        assert len(origin.requests) == 1
        assert target.connections == 0


async def test_no_services_is_a_clear_error() -> None:
    with pytest.raises(OutboundError, match="Services"):
        outbound_client(None, http_policy("http://127.0.0.1/"))
    async with LoopbackServer(reply(200, DENY)) as server:
        result = await call(server, None)
    assert result.outcome is Outcome.ERROR and "Services" in (result.reason or "")
    assert server.connections == 0


@pytest.mark.system
async def test_env_proxies_are_ignored(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    async with LoopbackServer(reply(200, DENY)) as proxy, LoopbackServer(reply(200, DENY)) as server:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
            monkeypatch.setenv(name, proxy.url("/"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        result = await call(server, services)
    assert result.outcome is Outcome.OK
    assert len(server.requests) == 1 and proxy.connections == 0


# ---- headers --------------------------------------------------------------------------------


@pytest.mark.system
async def test_header_interpolation_resolves_only_allowed_variables(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOK_TOKEN", "tok-123")
    monkeypatch.setenv("HOOK_SECRET", "do-not-send")
    monkeypatch.setenv("HOOK_EVIL", "x\r\nX-Injected: yes\n")
    monkeypatch.delenv("HOOK_UNSET", raising=False)
    headers = {
        "Authorization": "Bearer ${HOOK_TOKEN}",
        "X-Plain": "$HOOK_TOKEN/v1",
        "X-Unlisted": "[$HOOK_SECRET]",
        "X-Evil": "a${HOOK_EVIL}b",
        "X-Unset": "<${HOOK_UNSET}>",
        "X-Literal": "line\r\nX-Also: 1",
    }
    async with LoopbackServer(reply(204)) as server:
        result = await call(server, services, headers=headers, allowedEnvVars=["HOOK_TOKEN", "HOOK_EVIL", "HOOK_UNSET"])
    assert result.outcome is Outcome.OK, result.reason
    [got] = server.requests
    assert got.headers["authorization"] == "Bearer tok-123"
    assert got.headers["x-plain"] == "tok-123/v1"
    assert got.headers["x-unlisted"] == "[]"
    assert got.headers["x-evil"] == "axX-Injected: yesb"
    assert got.headers["x-unset"] == "<>"
    assert got.headers["x-literal"] == "lineX-Also: 1"
    assert "x-injected" not in got.headers and "x-also" not in got.headers
    assert b"do-not-send" not in json.dumps(got.headers).encode()


@pytest.mark.system
async def test_http_hook_allowed_env_vars_is_an_outer_limit(services: Services) -> None:
    env = {"HOOK_TOKEN": "tok-123", "HOOK_OTHER": "other", "HOOK_NOT_IN_HOOK": "x"}
    async with LoopbackServer(reply(204)) as server:
        policy = http_policy(
            server.url(),
            headers={"A": "$HOOK_TOKEN", "B": "$HOOK_OTHER", "C": "$HOOK_NOT_IN_HOOK"},
            allowedEnvVars=["HOOK_TOKEN", "HOOK_OTHER"],
            top={"httpHookAllowedEnvVars": ["HOOK_OTHER", "HOOK_NOT_IN_HOOK"]},
        )
        handler = policy.entries(PRE)[0].handler
        result = await run_http(
            handler,  # type: ignore[arg-type]
            PRE,
            b"{}",
            policy=policy,
            services=services,
            timeout_s=5,
            environ=env,
        )
    assert result.outcome is Outcome.OK
    [got] = server.requests
    assert (got.headers["a"], got.headers["b"], got.headers["c"], got.body) == ("", "other", "", b"{}")


def test_no_allowed_env_vars_means_no_interpolation() -> None:
    policy = http_policy("http://127.0.0.1/", headers={"A": "$HOME-${PATH}"})
    handler = policy.entries(PRE)[0].handler
    assert render_headers(handler, None, {"HOME": "/root", "PATH": "/bin"})["A"] == "-"  # type: ignore[arg-type]


@pytest.mark.system
async def test_framing_headers_cannot_be_overridden(services: Services) -> None:
    async with LoopbackServer(reply(204)) as server:
        result = await call(
            server,
            services,
            headers={
                "Host": "internal.example",
                "Content-Type": "text/plain",
                "Content-Length": "1",
                "Transfer-Encoding": "chunked",
            },
        )
    assert result.outcome is Outcome.OK, result.reason
    [got] = server.requests
    assert got.headers["host"] == f"127.0.0.1:{server.port}"
    assert got.headers["content-type"] == "application/json"
    assert got.headers["content-length"] == str(len(PAYLOAD)) and "transfer-encoding" not in got.headers
    assert got.body == PAYLOAD


@pytest.mark.system
async def test_header_values_are_never_logged_or_reported(
    services: Services, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HOOK_TOKEN", "sekrit-\u00e9")  # not ASCII: the request cannot be sent
    caplog.set_level(logging.DEBUG)
    async with LoopbackServer(reply(500, "boom")) as server:
        bad = await call(
            server, services, headers={"Authorization": "Bearer $HOOK_TOKEN"}, allowedEnvVars=["HOOK_TOKEN"]
        )
        monkeypatch.setenv("HOOK_TOKEN", "sekrit-ascii")
        failed = await call(
            server, services, headers={"Authorization": "Bearer $HOOK_TOKEN"}, allowedEnvVars=["HOOK_TOKEN"]
        )
    assert bad.outcome is Outcome.ERROR and "not ASCII" in (bad.reason or "")
    assert failed.outcome is Outcome.ERROR
    assert server.requests[-1].headers["authorization"] == "Bearer sekrit-ascii"
    for text in (caplog.text, repr(bad), repr(failed), bad.reason or "", failed.reason or ""):
        assert "sekrit" not in text
    response = OutboundResponse(200, "OK", httpx.Headers({"X": "sekrit"}), b"sekrit")
    assert "sekrit" not in repr(response) and response.text == "sekrit"


# ---- allowedHttpHookUrls --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "patterns", "allowed"),
    [
        ("https://hooks.example.com/a", None, True),
        ("https://hooks.example.com/a", [], False),
        ("https://hooks.example.com/a", ["https://hooks.example.com/*"], True),
        ("https://HOOKS.Example.COM/a", ["https://hooks.example.com/*"], True),
        ("HTTPS://hooks.example.com./a", ["https://hooks.example.com/*"], True),
        ("https://hooks.example.com/a", ["https://Hooks.Example.com./*"], True),
        ("https://hooks.example.com/A", ["https://hooks.example.com/a"], False),
        ("http://hooks.example.com/a", ["https://hooks.example.com/*"], False),
        ("https://a.example.com/x", ["https://*.example.com/*"], True),
        ("https://evil.test/.example.com/x", ["https://*.example.com/*"], False),
        ("https://hooks.example.com@evil.test/x", ["https://hooks.example.com/*"], False),
        ("https://x@evil.test/.example.com/", ["https://*.example.com/*"], False),
        ("http://localhost:8080/hook", ["http://localhost:*"], True),
        ("http://localhost/hook", ["http://localhost:*"], False),
        ("http://localhost:1@evil.test/hook", ["http://localhost:*"], False),
        ("https://anything.test/x?y=1", ["*"], True),
        ("https://anything.test/x", ["https://*"], True),
        ("https://other.test/a", ["https://hooks.example.com/*", "https://other.test/*"], True),
    ],
)
def test_url_allowed(url: str, patterns: list[str] | None, allowed: bool) -> None:
    assert url_allowed(url, patterns) is allowed


@pytest.mark.system
async def test_allowed_http_hook_urls_gate_the_hook(services: Services) -> None:
    async with LoopbackServer(reply(200, DENY)) as server:
        blocked = await call(server, services, top={"allowedHttpHookUrls": ["https://hooks.example.com/*"]})
        none_allowed = await call(server, services, top={"allowedHttpHookUrls": []})
        assert server.connections == 0
        passed = await call(server, services, top={"allowedHttpHookUrls": ["http://127.0.0.1:*"]})
    for result in (blocked, none_allowed):
        assert result.outcome is Outcome.ERROR
        assert "blocked by allowedHttpHookUrls" in (result.reason or "")
    assert passed.outcome is Outcome.OK and passed.output == DENY
    assert len(server.requests) == 1


# ---- the shared client ----------------------------------------------------------------------


@pytest.mark.system
async def test_outbound_client_is_cached_and_rebuilt_when_the_networks_change(services: Services) -> None:
    services.http_client = object()  # a foreign value in the slot is replaced, never used
    async with LoopbackServer(reply(204)) as server:
        first_policy = http_policy(server.url())
        first = outbound_client(services, first_policy)
        assert isinstance(first, GuardedClient)
        assert outbound_client(services, first_policy) is first
        assert outbound_client(services, http_policy("http://x.test/")) is first  # same networks, same client
        assert services.http_client is first
        response = await send_guarded(services, first_policy, "POST", server.url(), content=b"{}", timeout_s=5)
        assert response.status_code == 204
        second = outbound_client(services, http_policy(server.url(), networks=["127.0.0.1/32"]))
        assert second is not first and services.http_client is second
        await async_wait_for(lambda: first.guard._closer is not None and first.guard._closer.done(), 5.0)


@pytest.mark.system
async def test_a_replaced_client_finishes_its_request_first(services: Services) -> None:
    release = asyncio.Event()

    async def slow(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        await release.wait()
        await reply(200, DENY)(server, request, writer)

    async with LoopbackServer(slow) as server:
        policy = http_policy(server.url())
        pending = asyncio.create_task(run(context(policy, services)))
        await async_wait_for(lambda: server.requests, 5.0)
        old = services.http_client
        outbound_client(services, http_policy(server.url(), networks=["127.0.0.1/32"]))
        assert old.guard.in_flight == 1 and old.guard._closer is None
        release.set()
        result = await pending
        assert result.outcome is Outcome.OK and result.output == DENY
        await async_wait_for(lambda: old.guard._closer is not None, 5.0)


# ---- the full path --------------------------------------------------------------------------


async def test_full_path_gateway_reply_carries_the_http_hooks_deny(platform: Any) -> None:
    async with LoopbackServer(reply(200, DENY)) as server:
        text = json.dumps(
            {
                "hookbus": {"http": {"allowedNetworks": LOOPBACK}},
                "hooks": {PRE: [{"matcher": "Bash", "hooks": [{"type": "http", "url": server.url()}]}]},
            }
        )
        async with platform(text) as p:
            response = await p.post(PAYLOAD, headers={"Content-Type": "application/json"})
        assert response.status_code == 200
        assert response.json() == DENY
        [got] = server.requests
        assert got.body == PAYLOAD
