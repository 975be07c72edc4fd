"""Kiro's dialect, from Kiro CLI's documented hook payloads: each event in, each answer out.

Kiro cannot run here (not on npm, AWS's backend only). Its hooks read no JSON: exit 2 blocks
with stderr to the model, and stdout is context on SessionStart and UserPromptSubmit, so the
answers are checked in the shim's exit-code form.
"""

from __future__ import annotations

import pytest

from bus.dialects import DIALECTS
from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, CAPABILITIES, Support
from bus.dialects.kiro import canonical_tool_name, kiro_input, kiro_output
from tests.conftest import hso

DENY = hso("PreToolUse", permissionDecision="deny", permissionDecisionReason="no force pushes")


def test_agent_config_and_hook_file_events_both_become_claude_code_s() -> None:
    sent = {
        "hook_event_name": "preToolUse",
        "cwd": "/work/app",
        "tool_name": "execute_bash",
        "tool_input": {"command": "git push --force", "summary": "push"},
    }
    got = kiro_input(sent)
    assert (got["hook_event_name"], got[AGENT_EVENT_NAME]) == ("PreToolUse", "preToolUse")
    assert (got["tool_name"], got[AGENT_TOOL_NAME]) == ("Bash", "execute_bash")
    assert got["tool_input"] == {"command": "git push --force", "summary": "push"}
    assert got["session_id"] == "kiro:/work/app"  # Kiro sends none: one session per folder
    v3 = kiro_input({**sent, "hook_event_name": "PreToolUse", "session_id": "s-9"})
    assert v3["hook_event_name"] == "PreToolUse" and AGENT_EVENT_NAME not in v3 and v3["session_id"] == "s-9"
    assert kiro_input({"hook_event_name": "agentSpawn", "cwd": "/w"})["hook_event_name"] == "SessionStart"
    assert kiro_input({"hook_event_name": "stop", "cwd": "/w"})["stop_hook_active"] is False
    assert kiro_input({"hook_event_name": "PostFileSave", "cwd": "/w"})["hook_event_name"] == "PostFileSave"


def test_file_tools_and_mcp_names() -> None:
    create = kiro_input(
        {
            "hook_event_name": "preToolUse",
            "cwd": "/work/app",
            "tool_name": "fs_write",
            "tool_input": {"command": "create", "path": "src/a.py", "file_text": "x"},
        }
    )
    assert create["tool_name"] == "Write"
    assert create["tool_input"]["file_path"] == "/work/app/src/a.py" and create["tool_input"]["content"] == "x"
    edit = kiro_input(
        {
            "hook_event_name": "preToolUse",
            "cwd": "/w",
            "tool_name": "fs_write",
            "tool_input": {"command": "str_replace", "path": "/etc/hosts", "old_str": "a", "new_str": "b"},
        }
    )
    assert edit["tool_name"] == "Edit" and (edit["tool_input"]["old_string"], edit["tool_input"]["new_string"]) == (
        "a",
        "b",
    )
    read = kiro_input(
        {
            "hook_event_name": "preToolUse",
            "cwd": "/w",
            "tool_name": "fs_read",
            "tool_input": {"operations": [{"mode": "Line", "path": "b.txt"}]},
        }
    )
    assert (read["tool_name"], read["tool_input"]["file_path"]) == ("Read", "/w/b.txt")
    assert canonical_tool_name("@git/git_status") == "mcp__git__git_status"
    assert canonical_tool_name("use_aws") == "use_aws"


def test_decisions_become_exit_codes_and_context_stdout() -> None:
    assert kiro_output("PreToolUse", DENY) == {"exit_code": 2, "stderr": "no force pushes"}
    asked = kiro_output("PreToolUse", hso("PreToolUse", permissionDecision="ask", permissionDecisionReason="why"))
    assert asked["exit_code"] == 2 and "why" in asked["stderr"]
    assert kiro_output("PreToolUse", hso("PreToolUse", permissionDecision="allow", updatedInput={"command": "x"})) == {}
    assert kiro_output("UserPromptSubmit", {"decision": "block", "reason": "no"}) == {"exit_code": 2, "stderr": "no"}
    context = hso("UserPromptSubmit", additionalContext="the repo is frozen")
    assert kiro_output("UserPromptSubmit", context) == {"stdout": "the repo is frozen"}
    assert kiro_output("SessionStart", hso("SessionStart", additionalContext="hi")) == {"stdout": "hi"}
    assert kiro_output("Stop", {"decision": "block", "reason": "more"}) == {}
    assert kiro_output("PostToolUse", hso("PostToolUse", additionalContext="x")) == {}


def test_declarations() -> None:
    dialect = DIALECTS["kiro"]
    assert set(dialect.capabilities) == set(CAPABILITIES)
    assert dialect.capabilities["ask"].support is Support.NO
    assert dialect.capabilities["add_context"].support is Support.PARTIAL
    assert dialect.transport == "command" and dialect.verified.startswith("documentation only: ")


@pytest.mark.parametrize("name", ["windsurf", "kiro", "auggie"])
@pytest.mark.parametrize(
    "event", ["PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SessionStart", "SessionEnd"]
)
def test_no_json_field_reaches_an_agent_that_reads_only_exit_codes(name: str, event: str) -> None:
    """Everything a canonical output can hold, on every event: only the exit-code form comes out
    (Auggie's Stop and context in Claude Code's form being the documented exceptions)."""
    everything = {
        "continue": True,
        "systemMessage": "note",
        "suppressOutput": True,
        "decision": "block",
        "reason": "because",
        "hookSpecificOutput": {
            "hookEventName": event,
            "permissionDecision": "deny",
            "permissionDecisionReason": "because",
            "updatedInput": {"command": "ls"},
            "additionalContext": "context",
        },
    }
    out = DIALECTS[name].to_agent(event, everything, {})
    allowed = {"exit_code", "stderr", "stdout"}
    if name == "auggie" and event == "Stop":
        allowed = {"decision", "reason"}
    elif name == "auggie" and event in ("SessionStart", "PostToolUse"):
        allowed = {"hookSpecificOutput"}
    assert set(out) <= allowed, out
    assert out.get("exit_code", 2) == 2
