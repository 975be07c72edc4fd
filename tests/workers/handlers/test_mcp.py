"""``mcp_tool`` handlers (:mod:`workers.handlers.mcp`) against a real MCP server.

Each test starts its own server: the ``mcp`` SDK's FastMCP with the streamable HTTP
transport, served by uvicorn in the test's event loop on a free 127.0.0.1 port, and stopped at
teardown (a tool left hanging is released first). Tools record the arguments they receive,
so tests see what the substituted ``input`` became on the wire.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio
import uvicorn
import yaml
from mcp.server.fastmcp import FastMCP

from bus.hooks.results import HandlerResult, Outcome
from bus.policy.loading import policy_from_text
from bus.runtime.settings import Settings
from bus.stream.protocol import Request, now_ms
from hookbus.platform.redis_server import free_port
from tests.conftest import BusProbe, async_wait_for
from workers.handlers import mcp
from workers.handlers.context import HookContext
from workers.services import Services

LOOPBACK = {"http": {"allowedNetworks": ["127.0.0.0/8"]}}


@dataclasses.dataclass
class McpServer:
    """A running test MCP server: its endpoint and what its tools were called with."""

    url: str
    calls: list[tuple[str, dict[str, Any]]]
    release: asyncio.Event


def build_server(calls: list[tuple[str, dict[str, Any]]], release: asyncio.Event) -> FastMCP:
    server = FastMCP("hookbus-test", host="127.0.0.1", log_level="WARNING")

    @server.tool()
    def check_path(file_path: str, tool_input: dict[str, Any], size: int, label: str) -> str:
        calls.append(("check_path", {"file_path": file_path, "tool_input": tool_input, "size": size, "label": label}))
        return json.dumps(
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": f"{file_path} is protected",
                }
            }
        )

    @server.tool()
    def advise(note: str) -> str:
        calls.append(("advise", {"note": note}))
        return f"remember: {note}"

    @server.tool()
    def explode() -> str:
        calls.append(("explode", {}))
        raise ValueError("disk on fire")

    @server.tool()
    async def hang() -> str:
        calls.append(("hang", {}))
        await release.wait()
        return "too late"

    return server


@pytest_asyncio.fixture
async def mcp_server() -> AsyncIterator[McpServer]:
    calls: list[tuple[str, dict[str, Any]]] = []
    release = asyncio.Event()
    port = free_port()
    app = build_server(calls, release).streamable_http_app()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", loop="asyncio", http="h11")
    )
    serving = asyncio.create_task(server.serve())
    await async_wait_for(lambda: server.started or serving.done())
    assert not serving.done(), "the MCP server did not start"
    yield McpServer(f"http://127.0.0.1:{port}/mcp", calls, release)
    release.set()
    server.should_exit = True
    await serving


def pre_tool_use(**fields: Any) -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "session_id": "s-mcp",
        "cwd": "/tmp",
        "tool_name": "Write",
        "tool_input": {"file_path": "/etc/hosts", "size": 12, "tags": ["a", "b"]},
        **fields,
    }


def policy_text(handler: dict[str, Any], platform: dict[str, Any] | None = None) -> str:
    handler = {"type": "mcp_tool", "server": "guard", **handler}
    return yaml.safe_dump(
        {
            "hookbus": {"deadlineSeconds": 5.0, **(platform or {})},
            "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [handler]}]},
        }
    )


async def run(
    handler: dict[str, Any],
    platform: dict[str, Any] | None = LOOPBACK,
    *,
    hook_input: dict[str, Any] | None = None,
    timeout_s: float = 5.0,
) -> HandlerResult:
    """Run one mcp_tool handler directly, with the process services a dispatcher would pass."""
    policy = policy_from_text(policy_text(handler, platform))
    request = Request(event_id="e-1", event="PreToolUse", tenant="t", payload=b"{}", received_ms=now_ms())
    services = Services(Settings())
    try:
        ctx = HookContext(
            request, hook_input or pre_tool_use(), policy.entries("PreToolUse")[0], policy, timeout_s, services
        )
        return await mcp.run(ctx)
    finally:
        await services.aclose()


CHECK_INPUT = {
    "file_path": "${tool_input.file_path}",
    "tool_input": "${tool_input}",
    "size": "${tool_input.size}",
    "label": "${tool_name} of ${tool_input.file_path} (${tool_input.size} B, ${tool_input.tags}) "
    "by ${session_id}${no.such.path}",
}


# -- substitution ----------------------------------------------------------------------------------


def test_substitution_keeps_whole_values_typed_and_stringifies_embedded_ones() -> None:
    source = pre_tool_use(flag=True)
    template = {
        "whole": "${tool_input}",
        "number": "${tool_input.size}",
        "item": "${tool_input.tags.1}",
        "flag": "${flag}",
        "missing": "${nope}",
        "nested": [{"p": "path=${tool_input.file_path}"}],
        "embedded": "${flag}/${tool_input.tags}/${nope}",
        "literal": 3,
        "plain": "no placeholders",
    }
    assert mcp.substitute(template, source) == {
        "whole": {"file_path": "/etc/hosts", "size": 12, "tags": ["a", "b"]},
        "number": 12,
        "item": "b",
        "flag": True,
        "missing": "",
        "nested": [{"p": "path=/etc/hosts"}],
        "embedded": 'true/["a","b"]/',
        "literal": 3,
        "plain": "no placeholders",
    }


# -- calling a real server -------------------------------------------------------------------------


async def test_deny_json_answer_and_the_substituted_input_reached_the_tool(mcp_server: McpServer) -> None:
    result = await run({"tool": "check_path", "input": CHECK_INPUT, "url": mcp_server.url})
    assert result.outcome is Outcome.OK, result.reason
    assert result.output == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "/etc/hosts is protected",
        }
    }
    assert mcp_server.calls == [
        (
            "check_path",
            {
                "file_path": "/etc/hosts",
                "tool_input": {"file_path": "/etc/hosts", "size": 12, "tags": ["a", "b"]},
                "size": 12,
                "label": 'Write of /etc/hosts (12 B, ["a","b"]) by s-mcp',
            },
        )
    ]


async def test_plain_text_answer_is_kept_as_text(mcp_server: McpServer) -> None:
    result = await run({"tool": "advise", "input": {"note": "check ${tool_input.file_path}"}, "url": mcp_server.url})
    assert (result.outcome, result.output, result.text) == (Outcome.OK, None, "remember: check /etc/hosts")


async def test_tool_error_and_unknown_tool_are_non_blocking_errors(mcp_server: McpServer) -> None:
    failed = await run({"tool": "explode", "url": mcp_server.url})
    assert failed.outcome is Outcome.ERROR
    assert "MCP tool 'explode' on server 'guard' returned an error" in (failed.reason or "")
    assert "disk on fire" in (failed.reason or "")
    unknown = await run({"tool": "no_such_tool", "url": mcp_server.url})
    assert unknown.outcome is Outcome.ERROR and "Unknown tool: no_such_tool" in (unknown.reason or "")


async def test_unreachable_server_wrong_path_and_missing_url_are_errors(mcp_server: McpServer) -> None:
    down = await run({"tool": "advise", "url": f"http://127.0.0.1:{free_port()}/mcp"})
    assert down.outcome is Outcome.ERROR and "is not connected" in (down.reason or "")
    wrong_path = await run({"tool": "advise", "url": mcp_server.url.replace("/mcp", "/nothing-here")})
    assert wrong_path.outcome is Outcome.ERROR and "answered HTTP 404" in (wrong_path.reason or "")
    no_url = await run({"tool": "advise"})
    assert no_url.outcome is Outcome.ERROR and "has no 'url'" in (no_url.reason or "")
    assert mcp_server.calls == []


async def test_timeout(mcp_server: McpServer) -> None:
    result = await run({"tool": "hang", "url": mcp_server.url}, timeout_s=0.3)
    assert result.outcome is Outcome.TIMEOUT
    assert "did not answer within 0.3s" in (result.reason or "")
    assert mcp_server.calls == [("hang", {})]


async def test_loopback_is_refused_without_allowed_networks(mcp_server: McpServer) -> None:
    result = await run({"tool": "advise", "input": {"note": "x"}, "url": mcp_server.url}, platform={})
    assert result.outcome is Outcome.ERROR
    assert "SSRF guard refused 127.0.0.1: loopback" in (result.reason or "")
    assert mcp_server.calls == []  # refused before any connection


# -- through the full path -------------------------------------------------------------------------


async def test_full_path_mcp_tool_denies(mcp_server: McpServer, platform: Callable[..., Any], bus: BusProbe) -> None:
    text = policy_text({"tool": "check_path", "input": CHECK_INPUT, "url": mcp_server.url}, LOOPBACK)
    async with platform(text) as p:
        response = await p.post(pre_tool_use())
        assert response.json()["hookSpecificOutput"] == {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "/etc/hosts is protected",
        }
        record = await async_wait_for(lambda: bus.record(response.headers["X-Hookbus-Event-Id"]))
        assert [(h["type"], h["outcome"]) for h in record.hooks] == [("mcp_tool", "ok")]
    assert [name for name, _ in mcp_server.calls] == ["check_path"]


async def test_full_path_loopback_refused_fails_open(
    mcp_server: McpServer, platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform(policy_text({"tool": "check_path", "input": CHECK_INPUT, "url": mcp_server.url})) as p:
        response = await p.post(pre_tool_use())
        assert response.json() == {}
        record = await async_wait_for(lambda: bus.record(response.headers["X-Hookbus-Event-Id"]))
        [hook] = record.hooks
        assert (hook["type"], hook["outcome"]) == ("mcp_tool", "error")
        assert "SSRF guard refused" in hook["reason"]
    assert mcp_server.calls == []
