"""Cursor's dialect, from Cursor's documented payloads: each event's input in, each event's reply out.

Cursor cannot run here (not on npm, its own backend only), so the inputs are the documented
ones (Cursor's hooks page as mirrored by the Cupcake, agent-hooks-bridge and failproofai
adapters) and ``CURSOR_READS`` restates which output fields each event reads: a reply must
hold nothing else, and never an ``ask`` (Cursor 3.x runs the tool on one).
"""

from __future__ import annotations

from typing import Any

import pytest

from bus.dialects import DIALECTS
from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, CAPABILITIES, Support
from bus.dialects.cursor import cursor_input, cursor_output
from tests.conftest import hso

COMMON = {
    "conversation_id": "conv-1",
    "generation_id": "gen-1",
    "model": "claude-4.5-sonnet",
    "cursor_version": "2.4.30",
    "workspace_roots": ["/work/app"],
    "user_email": None,
}
#: The output fields each Cursor event reads.
CURSOR_READS = {
    "preToolUse": {"permission", "user_message", "agent_message", "updated_input"},
    "beforeShellExecution": {"permission", "user_message", "agent_message"},
    "beforeMCPExecution": {"permission", "user_message", "agent_message"},
    "beforeReadFile": {"permission"},
    "beforeSubmitPrompt": {"continue", "user_message"},
    "stop": {"followup_message"},
    "subagentStop": {"followup_message"},
    "postToolUse": {"additional_context"},
    "sessionStart": {"additional_context"},
}
DENY = hso("PreToolUse", permissionDecision="deny", permissionDecisionReason="no force pushes")
ASK = hso("PreToolUse", permissionDecision="ask", permissionDecisionReason="pushes need a human")
ALLOW = hso("PreToolUse", permissionDecision="allow")


def shell(command: str) -> dict[str, Any]:
    return {**COMMON, "hook_event_name": "beforeShellExecution", "command": command, "cwd": "/work/app/src"}


def reply(event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
    """``cursor_output``, checked to hold only the fields Cursor reads on that event."""
    out = cursor_output(event, output, agent_input)
    assert set(out) <= CURSOR_READS.get(agent_input["hook_event_name"], set()), out
    assert out.get("permission") != "ask"
    return out


def test_before_shell_execution_is_a_pre_tool_use_on_bash() -> None:
    sent = shell("git push --force origin main")
    got = cursor_input(sent)
    assert got["hook_event_name"] == "PreToolUse" and got[AGENT_EVENT_NAME] == "beforeShellExecution"
    assert got["session_id"] == "conv-1" and got["cwd"] == "/work/app/src"
    assert (got["tool_name"], got[AGENT_TOOL_NAME]) == ("Bash", "Shell")
    assert got["tool_input"] == {"command": "git push --force origin main"}
    assert all(got[key] == value for key, value in sent.items() if key != "hook_event_name")  # nothing lost
    assert sent["hook_event_name"] == "beforeShellExecution"  # the input is not changed


def test_a_deny_an_ask_and_an_allow_in_cursor_s_words() -> None:
    sent = shell("git push --force")
    assert reply("PreToolUse", DENY, sent) == {
        "permission": "deny",
        "user_message": "no force pushes",
        "agent_message": "no force pushes",
    }
    asked = reply("PreToolUse", ASK, sent)
    assert asked["permission"] == "deny" and "pushes need a human" in asked["agent_message"]
    assert reply("PreToolUse", ALLOW, sent) == {"permission": "allow"}
    assert reply("PreToolUse", {}, sent) == {}
    stopped = reply("PreToolUse", {"continue": False, "stopReason": "session over"}, sent)
    assert stopped["permission"] == "deny" and stopped["user_message"] == "session over"


def test_pre_tool_use_maps_tools_and_rewrites_under_cursor_s_names() -> None:
    sent = {**COMMON, "hook_event_name": "preToolUse", "tool_name": "StrReplace", "tool_input": {"path": "a.py"}}
    got = cursor_input(sent)
    assert (got["tool_name"], got[AGENT_TOOL_NAME]) == ("Edit", "StrReplace")
    assert got["tool_input"]["file_path"] == "a.py" and got["cwd"] == "/work/app"
    shell_call = cursor_input({**sent, "tool_name": "Shell", "tool_input": {"command": "ls"}})
    assert shell_call["tool_name"] == "Bash"
    rewrite = hso("PreToolUse", permissionDecision="allow", updatedInput={"file_path": "b.py"})
    assert reply("PreToolUse", rewrite, sent) == {"permission": "allow", "updated_input": {"path": "b.py"}}
    # beforeShellExecution cannot rewrite: the rewrite is dropped, never half-applied
    assert reply("PreToolUse", rewrite, shell("ls")) == {"permission": "allow"}


def test_mcp_and_read_file_events() -> None:
    mcp = {
        **COMMON,
        "hook_event_name": "beforeMCPExecution",
        "tool_name": "create_issue",
        "tool_input": '{"title": "x"}',
        "url": "https://mcp.example",
    }
    got = cursor_input(mcp)
    assert got["tool_name"] == "mcp__cursor__create_issue" and got["tool_input"] == {"title": "x"}
    assert cursor_input({**mcp, "tool_input": "not json"})["tool_input"] == {"raw": "not json"}
    read = {**COMMON, "hook_event_name": "beforeReadFile", "file_path": "/work/app/.env", "content": "K=1"}
    got = cursor_input(read)
    assert (got["tool_name"], got["tool_input"]) == ("Read", {"file_path": "/work/app/.env"})
    assert reply("PreToolUse", DENY, read) == {"permission": "deny"}  # beforeReadFile takes permission only


def test_prompt_stop_context_and_observed_events() -> None:
    prompt = {**COMMON, "hook_event_name": "beforeSubmitPrompt", "prompt": "ship it", "attachments": []}
    assert cursor_input(prompt)["hook_event_name"] == "UserPromptSubmit"
    blocked = reply("UserPromptSubmit", {"decision": "block", "reason": "no secrets"}, prompt)
    assert blocked == {"continue": False, "user_message": "no secrets"}
    assert reply("UserPromptSubmit", hso("UserPromptSubmit", additionalContext="x"), prompt) == {}
    stop = {**COMMON, "hook_event_name": "stop", "status": "completed", "loop_count": 1}
    got = cursor_input(stop)
    assert got["hook_event_name"] == "Stop" and got["stop_hook_active"] is True
    assert reply("Stop", {"decision": "block", "reason": "tests fail"}, stop) == {"followup_message": "tests fail"}
    assert reply("Stop", hso("Stop", additionalContext="run lint"), stop) == {"followup_message": "run lint"}
    post = {**COMMON, "hook_event_name": "postToolUse", "tool_name": "Write", "tool_input": {"file_path": "/a"}}
    assert reply("PostToolUse", hso("PostToolUse", additionalContext="ok"), post) == {"additional_context": "ok"}
    after = {**COMMON, "hook_event_name": "afterShellExecution", "command": "ls", "output": "a\n", "duration": 3}
    got = cursor_input(after)
    assert got["hook_event_name"] == "PostToolUse" and got["tool_response"] == {"output": "a\n", "duration": 3}
    assert cursor_output("PostToolUse", hso("PostToolUse", additionalContext="x"), after) == {}
    thought = {**COMMON, "hook_event_name": "afterAgentThought", "text": "hm"}
    assert cursor_input(thought)["hook_event_name"] == "afterAgentThought"


@pytest.mark.parametrize("name", ["cursor"])
def test_declarations(name: str) -> None:
    dialect = DIALECTS[name]
    assert set(dialect.capabilities) == set(CAPABILITIES)
    assert dialect.capabilities["ask"].support is Support.NO
    assert dialect.transport == "command" and dialect.verified.startswith("documentation only: ")
