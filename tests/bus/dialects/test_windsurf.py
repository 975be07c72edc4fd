"""Windsurf's dialect, from the documented Cascade Hooks payloads: each event in, each answer out.

Windsurf cannot run here (an IDE with no headless CLI or model base URL), so the inputs are
the documented ones, and the answer is checked as Windsurf uses it: only the exit code and
stderr (``hookbus hook`` turns the exit-code form into them, see tests/hookbus/test_shim.py).
"""

from __future__ import annotations

from typing import Any

from bus.dialects import DIALECTS
from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, CAPABILITIES, Support
from bus.dialects.windsurf import windsurf_input, windsurf_output
from tests.conftest import hso

COMMON = {"trajectory_id": "traj-1", "execution_id": "exec-1", "timestamp": "2026-12-01T10:00:00Z"}
DENY = hso("PreToolUse", permissionDecision="deny", permissionDecisionReason="no force pushes")


def event(name: str, **tool_info: Any) -> dict[str, Any]:
    return {**COMMON, "agent_action_name": name, "tool_info": tool_info}


def test_pre_run_command_is_a_pre_tool_use_on_bash() -> None:
    sent = event("pre_run_command", command_line="git push --force", cwd="/work/app")
    got = windsurf_input(sent)
    assert (got["hook_event_name"], got[AGENT_EVENT_NAME]) == ("PreToolUse", "pre_run_command")
    assert (got["tool_name"], got[AGENT_TOOL_NAME]) == ("Bash", "run_command")
    assert got["tool_input"] == {"command": "git push --force"}
    assert got["session_id"] == "traj-1" and got["cwd"] == "/work/app"
    assert got["tool_info"] == sent["tool_info"] and got["execution_id"] == "exec-1"  # nothing lost


def test_read_write_mcp_prompt_and_response_events() -> None:
    read = windsurf_input(event("pre_read_code", file_path="/work/app/.env"))
    assert (read["tool_name"], read["tool_input"]) == ("Read", {"file_path": "/work/app/.env"})
    edit = windsurf_input(event("pre_write_code", file_path="/a.py", edits=[{"old_string": "a", "new_string": "b"}]))
    assert edit["tool_name"] == "Edit"
    assert edit["tool_input"]["old_string"] == "a" and edit["tool_input"]["new_string"] == "b"
    two = windsurf_input(event("post_write_code", file_path="/a.py", edits=[{}, {}]))
    assert two["hook_event_name"] == "PostToolUse" and "old_string" not in two["tool_input"]
    mcp = windsurf_input(
        event("pre_mcp_tool_use", mcp_server_name="github", mcp_tool_name="create_issue", mcp_tool_arguments={"t": 1})
    )
    assert (mcp["tool_name"], mcp[AGENT_TOOL_NAME], mcp["tool_input"]) == (
        "mcp__github__create_issue",
        "create_issue",
        {"t": 1},
    )
    prompt = windsurf_input(event("pre_user_prompt", user_prompt="ship it"))
    assert (prompt["hook_event_name"], prompt["prompt"]) == ("UserPromptSubmit", "ship it")
    done = windsurf_input(event("post_cascade_response", response="Done."))
    assert (done["hook_event_name"], done["last_assistant_message"]) == ("Stop", "Done.")
    assert windsurf_input(event("post_setup_worktree", worktree_path="/w"))["hook_event_name"] == "post_setup_worktree"


def test_an_input_without_its_event_is_refused() -> None:
    try:
        windsurf_input({"trajectory_id": "t", "tool_info": {}})
    except ValueError as exc:
        assert "agent_action_name" in str(exc)
    else:
        raise AssertionError("accepted an input with no agent_action_name")


def test_decisions_become_exit_codes() -> None:
    assert windsurf_output("PreToolUse", DENY) == {"exit_code": 2, "stderr": "no force pushes"}
    asked = windsurf_output("PreToolUse", hso("PreToolUse", permissionDecision="ask"))
    assert asked["exit_code"] == 2 and "cannot show" in asked["stderr"]  # never a silent allow
    assert windsurf_output("PreToolUse", hso("PreToolUse", permissionDecision="allow")) == {}
    assert windsurf_output("PreToolUse", {"continue": False, "stopReason": "over"}) == {
        "exit_code": 2,
        "stderr": "over",
    }
    rewrite = hso("PreToolUse", updatedInput={"command": "ls"}, additionalContext="x")
    assert windsurf_output("PreToolUse", rewrite) == {}  # nothing Windsurf could read
    assert windsurf_output("UserPromptSubmit", {"decision": "block", "reason": "no"}) == {
        "exit_code": 2,
        "stderr": "no",
    }
    assert windsurf_output("Stop", {"decision": "block", "reason": "keep going"}) == {}
    assert windsurf_output("PostToolUse", {"decision": "block", "reason": "x"}) == {}


def test_declarations() -> None:
    dialect = DIALECTS["windsurf"]
    assert set(dialect.capabilities) == set(CAPABILITIES)
    assert dialect.capabilities["deny"].support is Support.YES
    assert (
        dialect.capabilities["ask"].support is Support.NO and dialect.capabilities["stop_block"].support is Support.NO
    )
    assert dialect.transport == "command" and dialect.verified.startswith("documentation only: ")
