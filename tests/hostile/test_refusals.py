"""Inputs the gateway cannot judge are denied, never an HTTP error the agent runs past (gateway/refusals.py).

Every case goes through a live gateway and dispatchers on the suite's Redis: JSON nested past
``hookbus.limits.nestingDepth`` in a tool argument the model writes, a body over the size
limit, an agent input its dialect cannot translate, and every dialect whose translation
raises. Each is answered ``200`` with a deny in the agent's format, the reason in
``X-Hookbus-Refused``, a decision-log record and ``hookbus_refused_inputs_total``; the
``hookbus hook`` shim exits 2 on such an answer.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from bus.dialects import DIALECTS
from bus.hooks.decisions import Decision
from tests.conftest import REPO, BusProbe, clean_env, logged
from tests.hookbus.test_shim import COMMAND
from tests.hostile.inputs import nested

pytestmark = pytest.mark.timeout(120)

POLICY = """
hookbus: {deadlineSeconds: 5.0}
hooks:
  PreToolUse:
    - matcher: "Bash|mcp__.*"
      hooks:
        - {type: rule, deny: ["Bash(rm -rf *)", "mcp__github__delete_repo"], reason: "central rule"}
"""


def mcp_call(depth: int) -> dict[str, Any]:
    """``mcp__github__delete_repo`` with an object argument ``depth`` deep in the whole input."""
    return {
        "hook_event_name": "PreToolUse",
        "session_id": "s-mcp",
        "cwd": "/work",
        "tool_name": "mcp__github__delete_repo",
        # The input is depth 1, tool_input 2, "filter" 3: the lists below make the rest.
        "tool_input": {"repo": "acme/prod", "filter": {"where": nested(depth - 3)}},
    }


def refused(response: httpx.Response) -> str:
    """The refusal reason of a ``200`` answer that says the input was refused."""
    assert response.status_code == 200, response.text
    assert response.headers["X-Hookbus-Outcome"] == "decided"
    return response.headers["X-Hookbus-Refused"]


def claude_denies(answer: dict[str, Any]) -> bool:
    """Whether Claude Code denies the call on ``answer`` (a PreToolUse deny, or the top-level block)."""
    specific = answer.get("hookSpecificOutput", {})
    return specific.get("permissionDecision") == "deny" or answer.get("decision") == "block"


async def test_an_mcp_argument_nested_past_the_limit_is_denied(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(POLICY) as p:
        by_rule = await p.post(mcp_call(60))
        deep = await p.post(mcp_call(70))
        refused_count = p.metrics.value("hookbus_refused_inputs_total", reason="too_deep")
    assert by_rule.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "central rule" in by_rule.json()["hookSpecificOutput"]["permissionDecisionReason"]
    assert refused(deep).startswith("too_deep: ")
    specific = deep.json()["hookSpecificOutput"]
    assert (specific["hookEventName"], specific["permissionDecision"]) == ("PreToolUse", "deny")
    reason = specific["permissionDecisionReason"]
    assert "cannot judge" in reason and "nestingDepth" in reason
    assert refused_count == 1
    record = await logged(bus, deep)
    assert (record.decision, record.outcome, record.session_id) == (Decision.DENY, "decided", "s-mcp")
    assert record.tool_name == "mcp__github__delete_repo" and "cannot judge" in record.reason
    assert "hookbus_note" in json.loads(record.payload)  # the input itself is not stored unmasked


async def test_a_cline_parameter_the_dialect_cannot_decode_is_denied(platform: Callable[..., Any]) -> None:
    legacy = {
        "hookName": "tool_call",
        "taskId": "conv_1",
        "workspaceRoots": ["/work"],
        "preToolUse": {"toolName": "execute_command", "parameters": {"command": "[" * 3000 + "; rm -rf /"}},
    }
    async with platform(POLICY) as p:
        response = await p.post(legacy, headers={"X-Hookbus-Dialect": "cline"})
    assert refused(response).startswith("dialect_error: ") and "RecursionError" in response.headers["X-Hookbus-Refused"]
    answer = response.json()
    assert answer["cancel"] is True and "cannot judge" in answer["errorMessage"]  # Cline stops the task


async def test_a_body_over_the_limit_is_denied_without_reading_it_all(platform: Callable[..., Any]) -> None:
    body = orjson.dumps(
        {
            "hook_event_name": "PreToolUse",
            "session_id": "s-big",
            "tool_name": "Bash",
            "tool_input": {"command": "rm -rf / #" + "x" * (1 << 20)},
        }
    )

    async def streamed() -> Any:
        for start in range(0, len(body), 64 << 10):
            yield body[start : start + (64 << 10)]

    async with platform(POLICY) as p:
        declared = await p.post(body)
        chunked = await p.client.post(f"{p.url}/v1/hooks", content=streamed())
        gemini = await p.post(body, headers={"X-Hookbus-Dialect": "gemini"})
        shimmed = await asyncio.create_subprocess_exec(
            *COMMAND,
            "hook",
            "--url",
            p.url,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=clean_env(),
            cwd=REPO,
        )
        out, err = await asyncio.wait_for(shimmed.communicate(body), 30)
        counted = p.metrics.value("hookbus_refused_inputs_total", reason="payload_too_large")
    for response in (declared, chunked):
        assert refused(response).startswith("payload_too_large: ")
        assert claude_denies(response.json()) and "cannot judge" in response.json()["reason"]
    assert refused(gemini) and gemini.json()["decision"] == "deny"  # Gemini's own deny
    assert shimmed.returncode == 2 and b"cannot judge" in err, err
    assert claude_denies(json.loads(out))
    assert counted == 4


TRANSLATED = sorted(name for name in DIALECTS if name not in ("claude", "sdk"))


@pytest.mark.parametrize("name", TRANSLATED)
async def test_any_exception_in_a_dialect_is_a_deny_in_its_format(
    name: str, platform: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Any, hook_input: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the dialect broke")

    dialect = DIALECTS[name]
    monkeypatch.setattr(type(dialect), "to_canonical", broken)
    # The agent's own name for PreToolUse (what its answer depends on), if it has one.
    own = next((theirs for theirs, ours in dialect.events.items() if ours == "PreToolUse"), "PreToolUse")
    event = {"hook_event_name": own, "session_id": "s", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    async with platform(POLICY) as p:
        response = await p.post(event, headers={"X-Hookbus-Dialect": name})
    assert refused(response) == f"dialect_error: not a {dialect.title} hook input: RuntimeError: the dialect broke"
    assert "cannot judge" in response.text  # the reason reaches the agent in its own format
    assert response.json() not in ({}, {"exit_code": 0})


async def test_non_blocking_events_keep_their_4xx(platform: Callable[..., Any]) -> None:
    async with platform(POLICY) as p:
        deep = {"hook_event_name": "Notification", "session_id": "s", "deep": nested(100)}
        notification = await p.post(deep)
        unheard = await p.post({"hook_event_name": "Stop", "session_id": 5})  # no handler listens to Stop
    assert (notification.status_code, notification.json()["error"]) == (400, "too_deep")
    assert (unheard.status_code, unheard.json()["error"]) == (400, "invalid_field")
    assert "X-Hookbus-Refused" not in notification.headers
