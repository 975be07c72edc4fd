"""Auggie's dialect, from Augment's documented hook payloads: each event in, each answer out.

Auggie cannot run here (Augment's backend only). PreToolUse blocks by exit 2 with stderr,
the one form Augment documents, so a deny is the shim's exit-code form; Stop blocks with
Claude Code's ``decision: "block"``.
"""

from __future__ import annotations

from bus.dialects import DIALECTS
from bus.dialects.auggie import auggie_input, auggie_output
from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, CAPABILITIES, Support
from tests.conftest import hso

DENY = hso("PreToolUse", permissionDecision="deny", permissionDecisionReason="no force pushes")


def test_tools_become_claude_code_s_and_every_field_is_kept() -> None:
    sent = {
        "hook_event_name": "PreToolUse",
        "conversation_id": "c-1",
        "cwd": "/work/app",
        "tool_name": "launch-process",
        "tool_input": {"command": "git push --force", "wait": True},
    }
    got = auggie_input(sent)
    assert got["hook_event_name"] == "PreToolUse" and AGENT_EVENT_NAME not in got
    assert (got["tool_name"], got[AGENT_TOOL_NAME], got["session_id"]) == ("Bash", "launch-process", "c-1")
    assert got["tool_input"] == sent["tool_input"]
    save = auggie_input({**sent, "tool_name": "save-file", "tool_input": {"path": "a.txt", "file_content": "x"}})
    assert save["tool_name"] == "Write"
    assert (save["tool_input"]["file_path"], save["tool_input"]["content"]) == ("/work/app/a.txt", "x")
    edit = auggie_input(
        {
            **sent,
            "tool_name": "str-replace-editor",
            "tool_input": {"command": "str_replace", "path": "/a", "old_str_1": "o", "new_str_1": "n"},
        }
    )
    assert (edit["tool_name"], edit["tool_input"]["old_string"], edit["tool_input"]["new_string"]) == ("Edit", "o", "n")
    assert auggie_input({**sent, "tool_name": "view", "tool_input": {"path": "/r"}})["tool_name"] == "Read"
    assert auggie_input({**sent, "tool_name": "codebase-retrieval"})["tool_name"] == "codebase-retrieval"
    assert auggie_input({"hook_event_name": "SessionStart", "cwd": "/w"})["session_id"] == "auggie:/w"


def test_answers_in_the_forms_augment_documents() -> None:
    assert auggie_output("PreToolUse", DENY) == {"exit_code": 2, "stderr": "no force pushes"}
    assert auggie_output("PreToolUse", hso("PreToolUse", permissionDecision="ask"))["exit_code"] == 2
    assert auggie_output("PreToolUse", hso("PreToolUse", permissionDecision="allow", updatedInput={"a": 1})) == {}
    assert auggie_output("Stop", {"decision": "block", "reason": "tests fail"}) == {
        "decision": "block",
        "reason": "tests fail",
    }
    assert auggie_output("Stop", hso("Stop", additionalContext="lint")) == {"decision": "block", "reason": "lint"}
    context = auggie_output("SessionStart", hso("SessionStart", additionalContext="hi"))
    assert context == {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "hi"}}
    assert auggie_output("PostToolUse", {"decision": "block", "reason": "x"}) == {}
    assert auggie_output("SessionEnd", {"systemMessage": "bye"}) == {}


def test_declarations() -> None:
    dialect = DIALECTS["auggie"]
    assert set(dialect.capabilities) == set(CAPABILITIES)
    assert dialect.capabilities["stop_block"].support is Support.YES
    assert dialect.capabilities["allow"].support is Support.NO
    assert dialect.transport == "command" and dialect.verified.startswith("documentation only: ")
