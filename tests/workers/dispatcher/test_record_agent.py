"""Every decision-log record names the agent that sent its event (``LogRecord.agent``).

Each way a record is written is taken once, on the suite's real Redis with a real gateway and
dispatcher: a decision, a non-blocking event, the gateway failing open at the deadline, an
entry that expired before a dispatcher read it, and events spooled while Redis was down and
appended when it came back. The agent is the dialect the event came in (``?dialect=`` or
``X-Hookbus-Dialect``), ``claude`` without one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import yaml

from bus.stream.protocol import LogRecord, Request, now_ms
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import BusProbe, async_wait_for, logged, rm_rf

DENY_RM = yaml.safe_dump(
    {
        "hookbus": {"deadlineSeconds": 2.0},
        "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(rm -rf *)"]}]}]},
    }
)
#: The hook sleeps past the 0.3 s deadline: the gateway answers fail-open first.
SLOW = yaml.safe_dump(
    {
        "hookbus": {"deadlineSeconds": 0.3},
        "hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "sleep 1"}]}]},
    }
)


def gemini_rm_rf(session: str) -> dict[str, Any]:
    """Gemini CLI's own BeforeTool input for ``rm -rf /``."""
    return {
        "hook_event_name": "BeforeTool",
        "session_id": session,
        "transcript_path": "",
        "cwd": "/work",
        "timestamp": "2026-01-07T09:30:00.000Z",
        "tool_name": "run_shell_command",
        "tool_input": {"command": "rm -rf /"},
    }


async def test_a_decided_record_names_the_dialect_or_claude(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(DENY_RM) as p:
        claude = await p.post(rm_rf("agent-claude"))
        gemini = await p.post(gemini_rm_rf("agent-gemini"), params={"dialect": "gemini"})
        by_header = await p.post(gemini_rm_rf("agent-header"), headers={"X-Hookbus-Dialect": "Gemini"})
        named_claude = await p.post(rm_rf("agent-named"), params={"dialect": "claude"})
        records = [await logged(bus, r) for r in (claude, gemini, by_header, named_claude)]
    assert gemini.json()["decision"] == "deny"  # answered in Gemini's own format
    assert [(r.agent, r.tool_name, r.decision, r.outcome) for r in records] == [
        ("claude", "Bash", "deny", "decided"),
        ("gemini", "Bash", "deny", "decided"),
        ("gemini", "Bash", "deny", "decided"),
        ("claude", "Bash", "deny", "decided"),
    ]
    assert records[1].to_json()["agent"] == "gemini"


async def test_a_non_blocking_event_is_recorded_with_its_agent(platform: Callable[..., Any], bus: BusProbe) -> None:
    note = {"hook_event_name": "Notification", "session_id": "agent-note", "message": "waiting"}
    async with platform(DENY_RM) as p:
        response = await p.post(note, params={"dialect": "sdk"})
        record = await logged(bus, response)
    assert response.headers["X-Hookbus-Outcome"] == "recorded"
    assert (record.agent, record.event, record.outcome) == ("sdk", "Notification", "recorded")


async def test_the_gateways_fail_open_at_the_deadline_keeps_the_agent(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform(SLOW) as p:
        response = await p.post(gemini_rm_rf("agent-late"), params={"dialect": "gemini"})
        assert response.headers["X-Hookbus-Outcome"] == "fail-open"
        record = await async_wait_for(lambda: bus.record(response.headers["X-Hookbus-Event-Id"]), timeout_s=10)
    assert (record.agent, record.outcome, record.fail_open) == ("gemini", "fail-open", "timeout")


async def test_an_entry_expired_before_it_was_read_is_logged_with_its_agent(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    payload = json.dumps({"hook_event_name": "PreToolUse", "session_id": "agent-expired"}).encode()
    request = Request(
        event_id="evt-agent-expired",
        event="PreToolUse",
        tenant="default",
        payload=payload,
        received_ms=now_ms() - 2000,
        deadline_ms=now_ms() - 1000,
        reply_to="hookbus:reply:gone",
        dialect="qwen",
    )
    async with platform(DENY_RM):
        await bus.redis.xadd(bus.keys.blocking_stream(), request.encode())  # type: ignore[arg-type]
        record = await async_wait_for(lambda: bus.record("evt-agent-expired"), timeout_s=5)
    assert (record.agent, record.outcome, record.fail_open) == ("qwen", "fail-open", "timeout")


async def test_events_spooled_while_redis_was_down_keep_their_agent(
    platform: Callable[..., Any], private_redis: EmbeddedRedis
) -> None:
    probe = BusProbe(private_redis.url)
    note = {"hook_event_name": "Notification", "session_id": "agent-down", "message": "keep me"}
    try:
        async with platform(DENY_RM, on_redis=private_redis.url) as p:
            await async_wait_for(lambda: _ready(p.client, p.url), timeout_s=5)
            private_redis.stop()
            blocking = await p.post(gemini_rm_rf("agent-down"), params={"dialect": "gemini"})
            recorded = await p.post(note, headers={"X-Hookbus-Dialect": "codex"})
            assert [r.headers["X-Hookbus-Outcome"] for r in (blocking, recorded)] == ["fail-open", "fail-open"]
            private_redis.start()  # the spool appends both once Redis is back
            records = [await _logged_on(probe, r) for r in (blocking, recorded)]
    finally:
        await probe.close()
    assert [(r.agent, r.event, r.outcome, r.fail_open) for r in records] == [
        ("gemini", "PreToolUse", "fail-open", "redis_unavailable"),
        ("codex", "Notification", "fail-open", "redis_unavailable"),
    ]


async def _logged_on(probe: BusProbe, response: httpx.Response) -> LogRecord:
    """The record of the event ``response`` answered, once the spool appended it and a dispatcher logged it."""
    event_id = response.headers["X-Hookbus-Event-Id"]
    record: LogRecord = await async_wait_for(lambda: probe.record(event_id), timeout_s=15)
    return record


async def _ready(client: httpx.AsyncClient, url: str) -> bool:
    return (await client.get(f"{url}/readyz")).status_code == 200
