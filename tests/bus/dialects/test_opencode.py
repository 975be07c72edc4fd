"""OpenCode's dialect: what hookbus's OpenCode plugin posts, both directions, then through a live gateway.

``plugin_does`` below restates what ``hookbus/install/opencode_plugin.js`` does with a reply:
it reads only ``decision`` (``deny`` throws), ``reason``, ``args`` (replaces the call's
arguments), ``context`` (appended) and ``output`` (replaces a tool's output). Replies are
checked through it, and never hold another field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bus.dialects import DIALECTS, dialect_for
from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, CAPABILITIES, Support
from bus.dialects.opencode import (
    ASK_REFUSAL,
    OPENCODE_EVENTS,
    REPLY_FIELDS,
    OpenCode,
    agent_args,
    canonical_tool,
    opencode_input,
    opencode_output,
)
from tests.conftest import BusProbe, async_wait_for

PLUGIN_JS = Path(__file__).resolve().parents[3] / "hookbus" / "install" / "opencode_plugin.js"


def plugin_does(reply: dict[str, Any]) -> tuple[str, Any]:
    """What the plugin does with ``reply``: (throw, reason), (args, new args), (context, text) or (nothing, None)."""
    assert set(reply) <= set(REPLY_FIELDS), reply
    if reply.get("decision") == "deny":
        return "throw", reply.get("reason")
    if isinstance(reply.get("args"), dict):
        return "args", reply["args"]
    if reply.get("context") or reply.get("output"):
        return "context", reply.get("context") or reply.get("output")
    return "nothing", None


def posted(event: str, **fields: Any) -> dict[str, Any]:
    """A body as the plugin posts it."""
    return {
        "event": event,
        "sessionID": "ses_1",
        "directory": "/work/p",
        "worktree": "/work/p",
        "time": 1764640000123,
        **fields,
    }


def tool_call(tool: str, **args: Any) -> dict[str, Any]:
    return posted("tool.execute.before", tool=tool, callID="toolu_1", args=args)


def test_the_dialect_is_registered_and_declares_every_capability() -> None:
    assert isinstance(dialect_for("opencode"), OpenCode)
    assert isinstance(DIALECTS["opencode"], OpenCode)
    caps = OpenCode.capabilities
    assert set(caps) == set(CAPABILITIES)
    assert all(cap.note for cap in caps.values())
    assert caps["deny"].support is Support.YES and caps["rewrite_input"].support is Support.YES
    assert caps["ask"].support is Support.NO and caps["stop_block"].support is Support.NO
    assert OpenCode.transport == "plugin" and "1.18.33" in OpenCode.verified


def test_a_shell_call_becomes_claude_codes_bash_with_every_field_kept() -> None:
    hook = opencode_input(tool_call("bash", command="git push --force origin main", description="d", timeout=5000))
    assert hook["hook_event_name"] == "PreToolUse" and hook[AGENT_EVENT_NAME] == "tool.execute.before"
    assert (hook["tool_name"], hook[AGENT_TOOL_NAME]) == ("Bash", "bash")
    assert hook["tool_input"] == {"command": "git push --force origin main", "description": "d", "timeout": 5000}
    assert (hook["session_id"], hook["cwd"], hook["tool_use_id"]) == ("ses_1", "/work/p", "toolu_1")
    assert hook["timestamp"] == "2025-12-02T01:46:40.123Z"
    assert (hook["sessionID"], hook["worktree"], hook["time"]) == ("ses_1", "/work/p", 1764640000123)


@pytest.mark.parametrize(
    ("tool", "args", "name", "tool_input"),
    [
        ("write", {"filePath": "/etc/hosts", "content": "x"}, "Write", {"file_path": "/etc/hosts", "content": "x"}),
        ("read", {"filePath": "/a", "offset": 2, "limit": 3}, "Read", {"file_path": "/a", "offset": 2, "limit": 3}),
        (
            "edit",
            {"filePath": "/a", "oldString": "x", "newString": "y", "replaceAll": True},
            "Edit",
            {"file_path": "/a", "old_string": "x", "new_string": "y", "replace_all": True},
        ),
        (
            "multiedit",
            {"filePath": "/a", "edits": [{"oldString": "x", "newString": "y"}]},
            "MultiEdit",
            {"file_path": "/a", "edits": [{"old_string": "x", "new_string": "y"}]},
        ),
        ("grep", {"pattern": "p", "include": "*.py"}, "Grep", {"pattern": "p", "glob": "*.py"}),
        ("glob", {"pattern": "**/*.py"}, "Glob", {"pattern": "**/*.py"}),
        ("list", {"path": "/a"}, "LS", {"path": "/a"}),
        ("webfetch", {"url": "https://x", "format": "text"}, "WebFetch", {"url": "https://x", "format": "text"}),
        ("task", {"description": "d", "prompt": "p", "subagent_type": "general"}, "Agent", None),
        ("skill", {"name": "pdf"}, "Skill", {"skill": "pdf"}),
        ("github_create_issue", {"title": "t"}, "mcp__github__create_issue", {"title": "t"}),
        ("myplugintool", {"a": 1}, "myplugintool", {"a": 1}),
    ],
)
def test_tools_and_their_arguments_become_claude_codes(
    tool: str, args: dict[str, Any], name: str, tool_input: dict[str, Any] | None
) -> None:
    hook = opencode_input(tool_call(tool, **args))
    assert (hook["tool_name"], hook[AGENT_TOOL_NAME]) == (name, tool)
    assert hook["tool_input"] == (args if tool_input is None else tool_input)
    assert canonical_tool(tool) == name


def test_a_patch_is_an_edit_of_its_first_file_and_a_write_when_it_only_adds() -> None:
    update = "*** Begin Patch\n*** Update File: /etc/hosts\n@@\n-a\n+b\n*** Add File: /tmp/n\n+n\n*** End Patch"
    hook = opencode_input(tool_call("apply_patch", patchText=update))
    assert (hook["tool_name"], hook["tool_input"]["file_path"]) == ("Edit", "/etc/hosts")
    assert hook["tool_input"]["file_paths"] == ["/etc/hosts", "/tmp/n"]
    added = "*** Begin Patch\n*** Add File: /etc/cron.d/x\n+line one\n+line two\n*** End Patch"
    hook = opencode_input(tool_call("apply_patch", patchText=added))
    assert hook["tool_name"] == "Write"
    assert hook["tool_input"]["file_path"] == "/etc/cron.d/x"
    assert hook["tool_input"]["content"] == "line one\nline two\n"
    assert agent_args("apply_patch", hook["tool_input"]) == {"patchText": added}


def test_other_events_map_to_claude_codes_with_their_fields() -> None:
    after = opencode_input(
        posted("tool.execute.after", tool="bash", callID="c", args={"command": "ls"}, result={"output": "x"})
    )
    assert (after["hook_event_name"], after["tool_response"]) == ("PostToolUse", {"output": "x"})
    prompt = opencode_input(posted("chat.message", prompt="hello", messageID="m"))
    assert (prompt["hook_event_name"], prompt["prompt"]) == ("UserPromptSubmit", "hello")
    assert opencode_input(posted("session.created"))["source"] == "startup"
    stop = opencode_input(posted("session.idle", lastAssistantMessage="Done."))
    assert stop["last_assistant_message"] == "Done."
    assert (stop["hook_event_name"], stop["stop_hook_active"], stop[AGENT_EVENT_NAME]) == (
        "Stop",
        False,
        "session.idle",
    )
    assert opencode_input(posted("experimental.session.compacting"))["trigger"] == "auto"
    assert {OPENCODE_EVENTS[e] for e in OPENCODE_EVENTS} >= {"SessionEnd", "StopFailure", "PostCompact"}
    assert opencode_input(posted("file.edited"))["hook_event_name"] == "file.edited"
    assert "timestamp" not in opencode_input(posted("session.idle", time=float("inf")))


def specific(**fields: Any) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", **fields}}


BASH = tool_call("bash", command="ls")


@pytest.mark.parametrize(
    ("output", "does"),
    [
        (specific(permissionDecision="deny", permissionDecisionReason="no"), ("throw", "no")),
        (specific(permissionDecision="deny"), ("throw", "Denied by hookbus policy")),
        ({"decision": "block", "reason": "legacy"}, ("throw", "legacy")),
        (specific(permissionDecision="ask", permissionDecisionReason="sure?"), ("throw", f"{ASK_REFUSAL}: sure?")),
        ({"continue": False, "stopReason": "halt"}, ("throw", "halt")),
        (specific(permissionDecision="allow"), ("nothing", None)),
        ({}, ("nothing", None)),
        (
            specific(permissionDecision="allow", updatedInput={"command": "ls -la", "description": "d"}),
            ("args", {"command": "ls -la", "description": "d"}),
        ),
        (specific(permissionDecision="deny", updatedInput={"command": "x"}), ("throw", "Denied by hookbus policy")),
    ],
)
def test_pre_tool_use_answers_are_what_the_plugin_carries_out(output: dict[str, Any], does: tuple[str, Any]) -> None:
    assert plugin_does(opencode_output("PreToolUse", output, BASH)) == does


def test_a_deferred_decision_is_a_deny_saying_so() -> None:
    action, reason = plugin_does(opencode_output("PreToolUse", specific(permissionDecision="defer"), BASH))
    assert action == "throw" and "deferred" in reason


def test_a_rewrite_goes_back_in_opencodes_argument_names() -> None:
    edit = tool_call("edit", filePath="/a", oldString="x", newString="y")
    rewrite = specific(updatedInput={"file_path": "/b", "old_string": "x", "new_string": "z", "replace_all": True})
    assert opencode_output("PreToolUse", rewrite, edit) == {
        "args": {"filePath": "/b", "oldString": "x", "newString": "z", "replaceAll": True}
    }


def test_context_and_blocks_on_the_other_events() -> None:
    context = {"hookSpecificOutput": {"hookEventName": "X", "additionalContext": "mind the tests"}}
    assert opencode_output("UserPromptSubmit", context, posted("chat.message")) == {"context": "mind the tests"}
    blocked = opencode_output("UserPromptSubmit", {"decision": "block", "reason": "secret"}, posted("chat.message"))
    assert plugin_does(blocked) == ("throw", "secret")
    after = opencode_output("PostToolUse", {"decision": "block", "reason": "leaked", **context}, posted("x"))
    assert after == {"context": "leaked\n\nmind the tests"}
    replaced = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": "redacted"}}
    assert opencode_output("PostToolUse", replaced, posted("x")) == {"output": "redacted"}
    assert opencode_output("PreCompact", context, posted("x")) == {"context": "mind the tests"}
    assert opencode_output("Stop", {"decision": "block", "reason": "keep going"}, posted("session.idle")) == {}
    assert opencode_output("SessionStart", context, posted("session.created")) == {}


@pytest.mark.parametrize(
    "event", ["PreToolUse", "PostToolUse", "UserPromptSubmit", "PreCompact", "Stop", "SessionStart"]
)
def test_no_reply_holds_a_field_the_plugin_does_not_read(event: str) -> None:
    everything = {
        "continue": True,
        "stopReason": "s",
        "suppressOutput": True,
        "systemMessage": "m",
        "decision": "block",
        "reason": "r",
        "hookSpecificOutput": {
            "hookEventName": event,
            "permissionDecision": "allow",
            "updatedInput": {"command": "ls"},
            "additionalContext": "c",
            "updatedToolOutput": "o",
        },
    }
    reply = opencode_output(event, everything, BASH)
    assert set(reply) <= set(REPLY_FIELDS)
    assert "hookSpecificOutput" not in reply and "permissionDecision" not in json.dumps(reply)


def test_the_plugin_reads_exactly_the_reply_fields() -> None:
    source = PLUGIN_JS.read_text()
    read = {field for field in ("decision", "reason", "args", "context", "output") if f"answer.{field}" in source}
    assert read == set(REPLY_FIELDS)
    assert "process.env.HOOKBUS_TOKEN" in source and "AbortController" in source


POLICY = """
hookbus: {deadlineSeconds: 5.0}
hooks:
  PreToolUse:
    - matcher: Bash|Write
      hooks:
        - {type: rule, deny: ["Bash(git push --force *)", "Write(//etc/**)"], reason: "central policy"}
"""


async def test_opencode_through_a_live_gateway(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(POLICY) as p:
        url = f"{p.url}/v1/hooks?dialect=opencode"
        push = await p.client.post(url, json=tool_call("bash", command="git push --force origin main"))
        etc = await p.client.post(url, json=tool_call("write", filePath="/etc/hosts", content="x"))
        fine = await p.client.post(url, json=tool_call("bash", command="ls -la"))
        idle = await p.client.post(url, json=posted("session.idle"))
    for answer in (push, etc):
        assert answer.status_code == 200, answer.text
        action, reason = plugin_does(answer.json())
        assert action == "throw" and "central policy" in reason
    assert plugin_does(fine.json()) == ("nothing", None)
    assert idle.status_code == 200 and idle.json() == {}
    record = await async_wait_for(lambda: bus.record(push.headers["X-Hookbus-Event-Id"]), timeout_s=5)
    logged = json.loads(record.payload)
    assert (logged["tool_name"], logged[AGENT_TOOL_NAME], logged["hook_event_name"]) == ("Bash", "bash", "PreToolUse")
    assert record.decision == "deny"
