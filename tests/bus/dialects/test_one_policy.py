"""One policy, every agent: the same shell command, sent in each dialect, gets the same decision.

The fleet's policy (:func:`tests.agents.fleet.policy`, Claude Code's terms) runs on one live
gateway. Every dialect in :data:`bus.dialects.DIALECTS` sends the denied and the allowed shell
command of :mod:`tests.agents.fleet` as its own agent documents (or was seen to send) a
shell tool call, and gets the decision back in its own form: :data:`FORMS` says, per agent,
what a deny and an allow look like there. The decision log names each agent, with the
canonical tool Bash and the agent's own tool name kept beside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from bus.dialects import DIALECTS
from bus.dialects.base import AGENT_TOOL_NAME
from tests.agents import fleet
from tests.conftest import BusProbe, logged_session

CWD = "/tmp/fleet"
ISO = "2026-12-02T01:00:00Z"


def shell_call(agent: str, command: str, session: str) -> dict[str, Any]:
    """A PreToolUse of a shell ``command`` as ``agent`` sends it, in session ``session``."""
    claude = {
        "hook_event_name": "PreToolUse",
        "session_id": session,
        "cwd": CWD,
        "transcript_path": "/tmp/fleet/t.jsonl",
        "permission_mode": "default",
        "tool_name": "Bash",
        "tool_input": {"command": command},
    }
    calls: dict[str, dict[str, Any]] = {
        "claude": claude,
        "sdk": claude,
        "peri": claude,
        "codex": {**claude, "turn_id": "turn-1", "model": "gpt-5"},
        "gemini": {
            "hook_event_name": "BeforeTool",
            "session_id": session,
            "cwd": CWD,
            "timestamp": ISO,
            "tool_name": "run_shell_command",
            "tool_input": {"command": command},
        },
        "qwen": {**claude, "tool_name": "run_shell_command", "permission_mode": "yolo"},
        "copilot": {
            "sessionId": session,
            "timestamp": 1796174865645,
            "cwd": CWD,
            "toolName": "bash",
            "toolArgs": {"command": command},
        },
        "cline": {
            "taskId": session,
            "hookName": "tool_call",
            "workspaceRoots": [CWD],
            "timestamp": ISO,
            "tool_call": {"id": "toolu_1", "name": "run_commands", "input": {"commands": [command]}},
            "preToolUse": {"toolName": "run_commands", "parameters": {"commands": json.dumps([command])}},
        },
        "droid": {**claude, "tool_name": "Execute"},
        "opencode": {
            "event": "tool.execute.before",
            "sessionID": session,
            "directory": CWD,
            "worktree": CWD,
            "time": 1796174865645,
            "tool": "bash",
            "callID": "call-1",
            "args": {"command": command, "description": "touch a file"},
        },
        "cursor": {
            "hook_event_name": "beforeShellExecution",
            "conversation_id": session,
            "generation_id": "gen-1",
            "workspace_roots": [CWD],
            "command": command,
            "cwd": CWD,
        },
        "windsurf": {
            "agent_action_name": "pre_run_command",
            "trajectory_id": session,
            "execution_id": "exec-1",
            "timestamp": ISO,
            "tool_info": {"command_line": command, "cwd": CWD},
        },
        "kiro": {
            "hook_event_name": "preToolUse",
            "session_id": session,
            "cwd": CWD,
            "tool_name": "execute_bash",
            "tool_input": {"command": command},
        },
        "auggie": {
            "hook_event_name": "PreToolUse",
            "conversation_id": session,
            "cwd": CWD,
            "tool_name": "launch-process",
            "tool_input": {"command": command, "wait": True},
        },
    }
    return calls[agent]


def claude_form(answer: dict[str, Any], decision: str) -> bool:
    specific = answer.get("hookSpecificOutput") or {}
    return specific.get("permissionDecision") == decision


def exit_code_form(answer: dict[str, Any], decision: str) -> bool:
    if decision == "deny":
        return answer.get("exit_code") == 2 and fleet.REASON in answer.get("stderr", "")
    return answer == {}  # exit 0, nothing printed: the agent's own settings decide


#: Per agent: whether ``answer`` is that agent's form of ``decision`` (deny or allow).
FORMS: dict[str, Callable[[dict[str, Any], str], bool]] = {
    "claude": claude_form,
    "sdk": claude_form,
    "qwen": claude_form,
    "droid": claude_form,
    "codex": lambda a, d: claude_form(a, d) if d == "deny" else a == {},  # Codex refuses a bare allow
    "gemini": lambda a, d: a.get("decision") == d,
    "copilot": lambda a, d: a.get("permissionDecision") == d,
    "peri": lambda a, d: a.get("decision") == {"deny": "block", "allow": "approve"}[d],
    "cursor": lambda a, d: a.get("permission") == d and (d == "allow" or fleet.REASON in a["agent_message"]),
    "cline": lambda a, d: fleet.REASON in a.get("context", "") and "overrideInput" in a if d == "deny" else a == {},
    "opencode": lambda a, d: a.get("decision") == "deny" if d == "deny" else a == {},
    "windsurf": exit_code_form,
    "kiro": exit_code_form,
    "auggie": exit_code_form,
}


def test_every_dialect_has_a_shell_call_and_a_form() -> None:
    assert set(FORMS) == set(DIALECTS)
    for name in DIALECTS:
        assert shell_call(name, "ls", "s")


@pytest.mark.timeout(120)
async def test_one_policy_decides_alike_for_every_agent(platform: Callable[..., Any], bus: BusProbe) -> None:
    policy = json.dumps({"hookbus": {"deadlineSeconds": 5.0}, **fleet.policy()})
    answers: dict[tuple[str, str], dict[str, Any]] = {}
    async with platform(policy) as p:
        for name in DIALECTS:
            for decision, command in (("deny", fleet.DENIED), ("allow", fleet.ALLOWED)):
                body = shell_call(name, command, f"one-policy-{name}-{decision}")
                response = await p.client.post(f"{p.url}/v1/hooks?dialect={name}", json=body)
                assert response.status_code == 200, (name, response.text)
                assert response.headers["X-Hookbus-Outcome"] == "decided", (name, response.headers)
                answers[name, decision] = response.json()
    wrong = {key: answer for key, answer in answers.items() if not FORMS[key[0]](answer, key[1])}
    assert not wrong, wrong
    for name in DIALECTS:
        for decision in ("deny", "allow"):
            (record,) = await logged_session(bus, f"one-policy-{name}-{decision}")
            assert (record.agent, record.decision, record.tool_name) == (name, decision, "Bash"), (name, record)
            logged = json.loads(record.payload)
            assert logged["tool_name"] == "Bash" and logged["tool_input"]["command"] == (
                fleet.DENIED if decision == "deny" else fleet.ALLOWED
            )
            if name not in ("claude", "sdk", "peri", "codex"):
                assert logged[AGENT_TOOL_NAME] != "", name


@pytest.mark.timeout(180)
async def test_a_hostile_command_in_any_dialect_is_still_denied_by_its_deadline(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    # Every dialect's translation runs on agent-controlled input before the policy does: a
    # 400 KB command must still be decided (not failed open at the deadline) and denied in
    # each agent's own form, with its record.
    command = fleet.DENIED + " " + "x" * 400_000
    async with platform(json.dumps(fleet.policy())) as p:
        for name in DIALECTS:
            body = shell_call(name, command, f"hostile-{name}")
            response = await p.client.post(f"{p.url}/v1/hooks?dialect={name}", json=body, timeout=30)
            assert response.status_code == 200, (name, response.text[:300])
            assert response.headers["X-Hookbus-Outcome"] == "decided", (name, response.headers)
            assert FORMS[name](response.json(), "deny"), (name, response.text[:300])
            (record,) = await logged_session(bus, f"hostile-{name}")
            assert (record.agent, record.decision) == (name, "deny")
