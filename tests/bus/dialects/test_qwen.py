"""Qwen Code's dialect: both directions as units, then Qwen-shaped traffic through a live gateway.

``qwen_reads`` below restates how Qwen Code 0.24.4 acts on a reply (``createHookOutput`` and
the code that calls it): PreToolUse takes ``hookSpecificOutput.permissionDecision`` (else the
top-level ``decision``) and never ``updatedInput``; Stop and SubagentStop keep working on
``decision`` block/deny *or* ``continue: false``; todo, prompt and batch events block on
``decision`` block/deny; the universal fields are read on every event. Replies are checked
through it, as Qwen would read them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.dialects import DIALECTS, from_dialect, to_dialect
from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, CAPABILITIES, Support
from bus.dialects.qwen import QWEN_TOOLS, qwen_input, qwen_output
from tests.conftest import BusProbe, async_wait_for

#: The fields Qwen's http runner keeps from a reply (``normalizeOutput``): nothing else is ever read.
QWEN_FIELDS = {"continue", "stopReason", "suppressOutput", "systemMessage", "decision", "reason", "hookSpecificOutput"}


def qwen_reads(event: str, reply: dict[str, Any]) -> tuple[str, Any]:
    """What Qwen Code 0.24.4 does with ``reply`` on its ``event`` (its own event name)."""
    specific = reply.get("hookSpecificOutput") or {}
    decision = reply.get("decision")
    if event == "PreToolUse":
        chosen = specific.get("permissionDecision")
        if chosen not in ("allow", "deny", "ask"):
            chosen = {"approve": "allow", "allow": "allow", "block": "deny", "deny": "deny"}.get(decision or "")
        reason = specific.get("permissionDecisionReason", reply.get("reason"))
        if chosen == "deny":
            return "deny", reason
        if chosen == "ask":
            return "ask", reason or "User confirmation required"
        if reply.get("continue") is False:
            return "stop", reply.get("stopReason") or reply.get("reason")
        return ("allow" if chosen == "allow" else "run"), specific.get("additionalContext")
    if event in ("Stop", "SubagentStop"):
        if decision in ("block", "deny") or reply.get("continue") is False:
            return "keep working", reply.get("stopReason") or reply.get("reason") or "No reason provided"
        return "stop", None
    if event in ("UserPromptSubmit", "UserPromptExpansion", "PostToolBatch", "TodoCreated", "TodoCompleted"):
        if decision in ("block", "deny"):
            return "block", reply.get("reason")
    if event == "PermissionRequest" and isinstance(specific.get("decision"), dict):
        return specific["decision"].get("behavior"), specific["decision"]
    if reply.get("continue") is False:
        return "stop", reply.get("stopReason")
    return "context", specific.get("additionalContext")


def qwen_event(event: str, **fields: Any) -> dict[str, Any]:
    """A hook input as Qwen Code 0.24.4 sends it (fields seen from the real CLI)."""
    return {
        "session_id": "6d1f0c3e-0b7a-4c55-9a55-3f1c9b1f2a10",
        "transcript_path": "/home/u/.qwen/projects/work/chats/6d1f.jsonl",
        "cwd": "/work",
        "hook_event_name": event,
        "timestamp": "2026-12-02T00:50:01.123Z",
        **fields,
    }


def shell(command: str, event: str = "PreToolUse", **more: Any) -> dict[str, Any]:
    return qwen_event(
        event,
        permission_mode="yolo",
        tool_name="run_shell_command",
        tool_input={"command": command, "description": "run it", "is_background": False},
        tool_use_id="call_1",
        tool_call_id="call_1",
        **more,
    )


# -- input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("qwen", "claude", "tool_input"),
    [
        ("run_shell_command", "Bash", {"command": "git push --force origin main"}),
        ("write_file", "Write", {"file_path": "/etc/passwd", "content": "x"}),
        ("edit", "Edit", {"file_path": "/w/a.py", "old_string": "a", "new_string": "b"}),
        ("replace", "Edit", {"file_path": "/w/a.py", "old_string": "a", "new_string": "b"}),
        ("read_file", "Read", {"file_path": "/w/a.py", "offset": 1, "limit": 5}),
        ("grep_search", "Grep", {"pattern": "x", "path": "/w"}),
        ("glob", "Glob", {"pattern": "*.py"}),
        ("list_directory", "LS", {"path": "/w"}),
        ("web_fetch", "WebFetch", {"url": "https://example.com", "prompt": "p"}),
        ("web_search", "WebSearch", {"query": "q"}),
        ("agent", "Agent", {"subagent_type": "Explorer", "prompt": "p"}),
        ("todo_write", "TodoWrite", {"todos": []}),
        ("notebook_edit", "NotebookEdit", {"notebook_path": "/w/n.ipynb", "new_source": "x"}),
        ("mcp__github__create_issue", "mcp__github__create_issue", {"title": "t"}),
        ("save_memory", "save_memory", {"fact": "f"}),
    ],
)
def test_tools_become_claude_tools_and_keep_the_agents_name(qwen: str, claude: str, tool_input: dict[str, Any]) -> None:
    raw = qwen_event("PreToolUse", permission_mode="default", tool_name=qwen, tool_input=tool_input)
    translated = qwen_input(raw)
    assert translated["tool_name"] == claude and translated[AGENT_TOOL_NAME] == qwen
    assert translated["tool_input"] == tool_input  # Qwen's inputs already use Claude Code's names
    assert raw["tool_name"] == qwen  # the agent's input is left alone
    assert DIALECTS["qwen"].canonical_tool(qwen) == claude


def test_input_fields_become_claude_fields_and_unknown_ones_stay() -> None:
    raw = shell("sleep 9", new_field={"x": 1})
    raw["tool_input"]["is_background"] = True
    translated, body = from_dialect("qwen", raw, orjson.dumps(raw))
    assert translated["tool_input"] == {
        "command": "sleep 9",
        "description": "run it",
        "is_background": True,
        "run_in_background": True,
    }
    assert (translated["permission_mode"], translated["qwen_permission_mode"]) == ("bypassPermissions", "yolo")
    assert translated["timestamp"] == "2026-12-02T00:50:01.123Z" and translated["new_field"] == {"x": 1}
    assert translated["tool_call_id"] == "call_1" and AGENT_EVENT_NAME not in translated
    assert json.loads(body) == translated
    old = qwen_input(qwen_event("PreToolUse", tool_name="read_file", tool_input={"absolute_path": "/w/a"}))
    assert old["tool_input"] == {"absolute_path": "/w/a", "file_path": "/w/a"}
    for mode, claude in [("default", "default"), ("plan", "plan"), ("auto_edit", "acceptEdits"), ("auto", "auto")]:
        got = qwen_input(qwen_event("Stop", permission_mode=mode))
        assert got["permission_mode"] == claude and got.get("qwen_permission_mode") == (
            None if mode == claude else mode
        )


def test_todo_events_become_task_events_and_batches_are_translated_call_by_call() -> None:
    todo = qwen_input(
        qwen_event("TodoCreated", todo_id="t1", todo_content="ship it", todo_status="pending", phase="validation")
    )
    assert (todo["hook_event_name"], todo[AGENT_EVENT_NAME]) == ("TaskCreated", "TodoCreated")
    assert (todo["task_id"], todo["task_subject"], todo["phase"]) == ("t1", "ship it", "validation")
    assert qwen_input(qwen_event("TodoCompleted"))["hook_event_name"] == "TaskCompleted"
    batch = qwen_input(
        qwen_event(
            "PostToolBatch",
            tool_calls=[
                {"tool_name": "run_shell_command", "tool_input": {"command": "ls"}, "status": "success"},
                {"tool_name": "write_file", "tool_input": {"file_path": "/a", "content": ""}, "status": "error"},
                "not a call",
            ],
        )
    )
    assert [c["tool_name"] for c in batch["tool_calls"][:2]] == ["Bash", "Write"]
    assert batch["tool_calls"][0][AGENT_TOOL_NAME] == "run_shell_command" and batch["tool_calls"][2] == "not a call"
    start = qwen_event("SessionStart", permission_mode="default", source="startup", model="qwen3-coder")
    body = orjson.dumps(start)
    assert from_dialect("qwen", start, body) == (start, body)  # nothing to translate: same bytes
    assert qwen_input(qwen_event("SessionDelete"))["hook_event_name"] == "SessionDelete"


# -- output ---------------------------------------------------------------------------------


def pre(decision: str | None, **more: Any) -> dict[str, Any]:
    specific: dict[str, Any] = {"hookEventName": "PreToolUse", **more}
    if decision is not None:
        specific |= {"permissionDecision": decision, "permissionDecisionReason": f"because {decision}"}
    return {"hookSpecificOutput": specific}


def test_pretooluse_decisions() -> None:
    deny = qwen_output("PreToolUse", pre("deny"))
    assert deny == pre("deny") and qwen_reads("PreToolUse", deny) == ("deny", "because deny")
    assert qwen_reads("PreToolUse", qwen_output("PreToolUse", pre("allow", additionalContext="ctx"))) == (
        "allow",
        "ctx",
    )
    assert qwen_reads("PreToolUse", qwen_output("PreToolUse", pre("ask"))) == ("ask", "because ask")
    bare = qwen_output(
        "PreToolUse", {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny"}}
    )
    assert qwen_reads("PreToolUse", bare) == ("deny", "Denied by hookbus policy")
    defer = qwen_output("PreToolUse", pre("defer"))
    assert defer == {} and qwen_reads("PreToolUse", defer) == ("run", None)
    legacy = qwen_output("PreToolUse", {"decision": "block", "reason": "old style"})
    assert qwen_reads("PreToolUse", legacy) == ("deny", "old style")
    assert qwen_reads("PreToolUse", qwen_output("PreToolUse", {"continue": False, "stopReason": "halt"})) == (
        "stop",
        "halt",
    )


@pytest.mark.parametrize("decision", ["allow", "ask", None])
def test_a_rewrite_qwen_cannot_apply_is_a_deny_that_gives_the_model_the_rewritten_input(decision: str | None) -> None:
    reply = qwen_output("PreToolUse", pre(decision, updatedInput={"command": "git push origin main"}))
    action, reason = qwen_reads("PreToolUse", reply)
    assert action == "deny" and "updatedInput" not in reply["hookSpecificOutput"]
    assert '{"command": "git push origin main"}' in reason and "Qwen Code cannot run a rewritten call" in reason
    assert ("because" in reason) == (decision is not None)
    denied = qwen_output("PreToolUse", pre("deny", updatedInput={"command": "x"}))
    assert denied == pre("deny")  # a deny stays the deny it was


def test_stop_outputs_keep_qwen_working_only_when_hookbus_blocks() -> None:
    block = qwen_output("Stop", {"decision": "block", "reason": "tests fail", "systemMessage": "m"})
    assert block == {"decision": "block", "reason": "tests fail", "systemMessage": "m"}
    assert qwen_reads("Stop", block) == ("keep working", "tests fail")
    context = qwen_output(
        "SubagentStop", {"hookSpecificOutput": {"hookEventName": "SubagentStop", "additionalContext": "go"}}
    )
    assert qwen_reads("SubagentStop", context) == ("keep working", "go")
    # Claude Code's continue:false means "stop now"; Qwen would read it as "keep working".
    halt = qwen_output("Stop", {"continue": False, "stopReason": "budget spent"})
    assert halt == {} and qwen_reads("Stop", halt) == ("stop", None)
    assert (
        qwen_output("Stop", {}) == {} and qwen_reads("Stop", qwen_output("Stop", {"decision": "approve"}))[0] == "stop"
    )


def test_other_event_outputs() -> None:
    prompt = qwen_output(
        "UserPromptSubmit",
        {
            "decision": "block",
            "reason": "no secrets",
            "suppressOutput": True,
            "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "c", "sessionTitle": "t"},
        },
    )
    assert prompt == {
        "decision": "block",
        "reason": "no secrets",
        "suppressOutput": True,
        "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "c"},
    }
    start = qwen_output(
        "SessionStart",
        {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "fleet", "watchPaths": ["/w"]}},
    )
    assert start == {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "fleet"}}
    post = qwen_output(
        "PostToolUse",
        {
            "decision": "block",
            "reason": "output leaks a secret",
            "hookSpecificOutput": {
                "hookEventName": "PostToolUse",
                "additionalContext": "ctx",
                "updatedToolOutput": "x",
            },
        },
    )
    assert post == {
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "output leaks a secret\n\nctx"}
    }
    todo = qwen_output("TaskCreated", {"continue": False, "stopReason": "no todos on Fridays"}, "TodoCreated")
    assert (
        todo == {"decision": "block", "reason": "no todos on Fridays"} and qwen_reads("TodoCreated", todo)[0] == "block"
    )
    request = {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "no", "interrupt": True, "extra": 1},
        }
    }
    assert qwen_output("PermissionRequest", request)["hookSpecificOutput"]["decision"] == {
        "behavior": "deny",
        "message": "no",
        "interrupt": True,
    }
    ignored = qwen_output(
        "PermissionDenied",
        {
            "continue": False,
            "systemMessage": "m",
            "hookSpecificOutput": {"hookEventName": "PermissionDenied", "retry": True},
        },
    )
    assert ignored == {"systemMessage": "m"}
    assert to_dialect("qwen", "TaskCompleted", {"decision": "block", "reason": "r"}, qwen_event("TodoCompleted")) == {
        "decision": "block",
        "reason": "r",
    }
    ctx = to_dialect(
        "qwen",
        "TaskCreated",
        {"hookSpecificOutput": {"hookEventName": "TaskCreated", "additionalContext": "c"}},
        qwen_event("TodoCreated"),
    )
    assert ctx == {}  # Qwen reads no context on todo events


EVERY_EVENT = [
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "UserPromptSubmit",
    "UserPromptExpansion",
    "SessionStart",
    "SessionEnd",
    "Stop",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "Notification",
    "PermissionRequest",
    "PermissionDenied",
    "TaskCreated",
    "TaskCompleted",
    "StopFailure",
    "MessageDisplay",
    "InstructionsLoaded",
    "Unknown",
]


@pytest.mark.parametrize("event", EVERY_EVENT)
def test_no_reply_holds_a_field_qwen_does_not_read(event: str) -> None:
    everything = {
        "continue": True,
        "decision": "block",
        "reason": "r",
        "systemMessage": "m",
        "terminalSequence": "\x07",
        "hookSpecificOutput": {
            "hookEventName": event,
            "permissionDecision": "ask",
            "permissionDecisionReason": "why",
            "updatedInput": {"command": "ls"},
            "additionalContext": "c",
            "updatedToolOutput": "x",
            "updatedMCPToolOutput": {"content": []},
            "watchPaths": [],
            "sessionTitle": "t",
            "initialUserMessage": "hi",
            "retry": True,
            "decision": {"behavior": "allow", "updatedInput": {"a": 1}},
        },
    }
    reply = qwen_output(event, everything)
    assert set(reply) <= QWEN_FIELDS, event
    specific = reply.get("hookSpecificOutput", {})
    assert set(specific) <= {
        "hookEventName",
        "permissionDecision",
        "permissionDecisionReason",
        "additionalContext",
        "decision",
    }
    for never in ("updatedInput", "updatedToolOutput", "updatedMCPToolOutput", "watchPaths", "sessionTitle", "retry"):
        assert never not in specific, (event, never)
    if event == "PreToolUse":
        assert qwen_reads(event, reply)[0] == "deny"  # an ask with a rewrite is never an allow
    if event in ("Stop", "SubagentStop"):
        assert "continue" not in reply


def test_capabilities_are_declared_for_every_name() -> None:
    qwen = DIALECTS["qwen"]
    assert set(qwen.capabilities) == set(CAPABILITIES) and qwen.transport == "http"
    assert qwen.capabilities["rewrite_input"].support is Support.NO
    assert qwen.capabilities["ask"].support is Support.PARTIAL
    assert qwen.capabilities["allow"].support is Support.PARTIAL  # PreToolUse runs after Qwen's own approval
    assert qwen.capabilities["stop_block"].support is Support.YES
    assert all(c.note for c in qwen.capabilities.values())
    assert qwen.canonical_event("TodoCompleted") == "TaskCompleted" and qwen.canonical_event("Stop") == "Stop"
    assert len(set(QWEN_TOOLS)) == len(QWEN_TOOLS)


# -- live: Qwen-shaped payloads through the gateway, one policy in Claude Code's terms --------

POLICY = """
hookbus: {deadlineSeconds: 5.0}
hooks:
  PreToolUse:
    - matcher: Bash|Write
      hooks:
        - {type: rule, deny: ["Bash(git push --force *)", "Write(//etc/**)"], reason: "central policy"}
"""


async def test_qwen_through_a_live_gateway(platform: Callable[..., Any], bus: BusProbe, tmp_path: Path) -> None:
    write = qwen_event(
        "PreToolUse",
        permission_mode="auto_edit",
        tool_name="write_file",
        tool_input={"file_path": "/etc/hosts", "content": "x"},
        tool_use_id="c2",
    )
    async with platform(POLICY) as p:
        push = await p.client.post(f"{p.url}/v1/hooks?dialect=qwen", json=shell("git push --force origin main"))
        etc = await p.post(write, headers={"X-Hookbus-Dialect": "qwen"})
        fine = await p.client.post(f"{p.url}/v1/hooks?dialect=qwen", json=shell("ls -la"))
        todo = await p.client.post(f"{p.url}/v1/hooks?dialect=qwen", json=qwen_event("TodoCreated", todo_id="t"))
    for answer in (push, etc):
        assert answer.status_code == 200 and answer.headers["X-Hookbus-Outcome"] == "decided", answer.text
        action, reason = qwen_reads("PreToolUse", answer.json())
        assert action == "deny" and "central policy" in reason
    assert qwen_reads("PreToolUse", fine.json())[0] == "run"
    assert todo.status_code == 200 and set(todo.json()) <= QWEN_FIELDS
    record = await async_wait_for(lambda: bus.record(push.headers["X-Hookbus-Event-Id"]), timeout_s=5)
    logged = json.loads(record.payload)
    assert (logged["tool_name"], logged[AGENT_TOOL_NAME]) == ("Bash", "run_shell_command")
    assert (logged["permission_mode"], logged["qwen_permission_mode"]) == ("bypassPermissions", "yolo")
    assert record.decision == "deny"
