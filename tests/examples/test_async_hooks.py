"""The async hooks of ``examples/async_hooks.py``: each function on its own, then the whole
``examples/async_policy.yaml`` through a real gateway, dispatcher and arq worker."""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.hooks.models import HookInput
from examples import async_hooks
from examples.async_hooks import (
    SessionCounts,
    audit_line,
    execution_time,
    large_output_warning,
    session_summary,
    summary_text,
)
from tests.conftest import REPO, BusProbe
from workers.jobs.worker import build_worker

POLICY = REPO / "examples" / "async_policy.yaml"


def post_tool_use(session: str = "s-ex", tool: str = "Bash", response: Any = "ok", **extra: Any) -> HookInput:
    return HookInput.model_validate(
        {
            "hook_event_name": "PostToolUse",
            "session_id": session,
            "tool_name": tool,
            "tool_input": {"command": "ls"},
            "tool_response": response,
            **extra,
        }
    )


def test_the_audit_line_is_one_json_object_with_secrets_masked_and_a_huge_response_as_its_size() -> None:
    token = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
    line = audit_line(
        post_tool_use(response="x" * 50_000, tool_input={"command": f"git push https://{token}@h/r"}),
        at_s=1_700_000_000.25,
    )
    record = json.loads(line)
    assert "\n" not in line
    assert record["time"] == "2023-11-14T22:13:20.250Z"
    assert (record["event"], record["session_id"], record["tool_name"]) == ("PostToolUse", "s-ex", "Bash")
    assert record["input"]["tool_response"] == {"omitted_chars": 50_000}
    assert token not in line and "[REDACTED:github]" in record["input"]["tool_input"]["command"]


def test_audit_log_appends_json_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNC_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    async_hooks.audit_log(post_tool_use())
    async_hooks.audit_log(post_tool_use(tool="Edit"))
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert [json.loads(line)["tool_name"] for line in lines] == ["Bash", "Edit"]


def test_a_tool_response_over_100000_characters_is_warned_about() -> None:
    assert large_output_warning(post_tool_use(response="x" * 100_000)) is None
    warned = large_output_warning(post_tool_use(response={"stdout": "x" * 100_000}))
    assert warned is not None
    assert warned["systemMessage"].startswith("Bash returned 100,")
    assert warned["hookSpecificOutput"]["hookEventName"] == "PostToolUse"
    assert large_output_warning(HookInput(hook_event_name="Stop", session_id="s")) is None


def test_the_session_summary_counts_tool_calls_by_tool_and_forgets_the_session_at_its_end() -> None:
    session = "s-summary"
    for tool in ("Bash", "Edit", "Bash", "Read", "Bash"):
        assert session_summary(post_tool_use(session, tool)) is None
    stop = session_summary(HookInput(hook_event_name="Stop", session_id=session))
    assert stop == {"systemMessage": f"Session {session}: 5 tool calls: Bash 3, Edit 1, Read 1"}
    assert session_summary(HookInput(hook_event_name="SessionEnd", session_id=session)) is None
    again = session_summary(HookInput(hook_event_name="Stop", session_id=session))
    assert again == {"systemMessage": f"Session {session}: 0 tool calls"}
    assert summary_text(collections.Counter({"Edit": 1})) == "1 tool call: Edit 1"


def test_session_counts_keep_only_the_most_recent_sessions() -> None:
    counts = SessionCounts(max_sessions=2)
    for session in ("a", "b", "a", "c"):
        counts.count(session, "Bash")
    assert counts.take("b", forget=False) == {}
    assert counts.take("a", forget=False) == {"Bash": 2}


def test_a_tool_call_over_30_seconds_is_warned_about() -> None:
    assert execution_time(post_tool_use(tool="Grep", duration_ms=1200)) is None
    assert execution_time(post_tool_use(tool="Grep", duration_ms="slow")) is None
    assert execution_time(post_tool_use(tool="Grep")) is None
    warned = execution_time(post_tool_use(tool="Grep", duration_ms=45_500))
    assert warned == {"systemMessage": "Grep took 45.5 s (over 30 s); slowest Grep call so far 45.5 s."}


async def test_the_example_policy_runs_on_the_worker_and_leaves_its_warnings_for_the_next_turn(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASYNC_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    session = "s-example-e2e"
    async with platform(POLICY.read_text()) as p:
        for hook_input in (
            {"hook_event_name": "SessionStart", "session_id": session, "source": "startup"},
            post_tool_use(session, "Bash", "x" * 120_000, duration_ms=31_000).to_wire(),
            post_tool_use(session, "Edit", "done", duration_ms=20).to_wire(),
            {"hook_event_name": "Stop", "session_id": session, "stop_hook_active": False},
        ):
            assert (await p.post(hook_input)).status_code == 200
        worker = build_worker(p.settings, p.policy, p.settings.redis_url or "", burst=True)
        try:
            await worker.async_run()
        finally:
            await worker.close()
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert sorted(record["event"] for record in audit) == ["PostToolUse", "PostToolUse", "SessionStart", "Stop"]
    pending = [
        orjson.loads(item)
        for item in await bus.redis.lrange(  # type: ignore[misc]
            bus.keys.pending_context("default", session), 0, -1
        )
    ]
    messages = [item["systemMessage"] for item in pending if item.get("systemMessage")]
    assert any(m.startswith("Bash returned 120,") for m in messages)
    assert any(m.startswith("Bash took 31.0 s") for m in messages)
    assert any(m.startswith(f"Session {session}:") for m in messages)
    assert any("narrower commands" in (item.get("additionalContext") or "") for item in pending)
