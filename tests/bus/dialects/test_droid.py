"""Factory Droid's dialect: both directions as units, then Droid-shaped traffic through a live gateway.

The payloads are the ones Droid 0.225.2 (``droid exec``) sent its hooks, field for field.
``droid_reads`` restates what Droid did with a reply on the real CLI: PreToolUse acts on
``hookSpecificOutput.permissionDecision`` only (``ask`` runs the tool under ``--auto high``, a
top-level ``decision: block`` is ignored), ``continue: false`` ends the run; Stop keeps working
on ``decision: block``; PostToolUse and SessionStart pass ``additionalContext`` to the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bus.dialects import DIALECTS
from bus.dialects.base import AGENT_TOOL_NAME, CAPABILITIES, Support
from bus.dialects.droid import ASK_SUFFIX, DROID_TOOLS, droid_input, droid_output
from tests.conftest import BusProbe, async_wait_for

SESSION = "ee2b4a75-635a-449f-8883-415fda401d81"
#: The top-level fields Droid acts on.
DROID_FIELDS = {"continue", "stopReason", "suppressOutput", "systemMessage", "decision", "reason", "hookSpecificOutput"}


def droid_event(event: str, **fields: Any) -> dict[str, Any]:
    """A hook input as Droid 0.225.2 sends it."""
    return {
        "session_id": SESSION,
        "transcript_path": f"/home/u/.factory/sessions/-work-proj/{SESSION}.jsonl",
        "cwd": "/work/proj",
        "permission_mode": "auto-high",
        "hook_event_name": event,
        **fields,
    }


def execute(command: str, event: str = "PreToolUse", **more: Any) -> dict[str, Any]:
    tool_input = {"command": command, "summary": "Run a test command", "riskLevel": "low", "riskLevelReason": "x"}
    return droid_event(event, tool_name="Execute", tool_input={**tool_input, **more})


def droid_reads(event: str, reply: dict[str, Any]) -> tuple[str, Any]:
    """What Droid 0.225.2 did with ``reply`` on ``event`` (observed with the real CLI)."""
    specific = reply.get("hookSpecificOutput") or {}
    if event == "PreToolUse":
        if reply.get("continue") is False:
            return "stop", reply.get("stopReason")
        decision = specific.get("permissionDecision")
        if decision == "deny":
            return "deny", specific.get("permissionDecisionReason")
        if decision == "allow":
            return "allow", specific.get("updatedInput")
        return "run", None  # ask, a top-level decision and no decision all run the tool
    if event in ("Stop", "SubagentStop"):
        return ("keep working", reply.get("reason")) if reply.get("decision") == "block" else ("stop", None)
    return "context", specific.get("additionalContext")


@pytest.mark.parametrize(
    ("droid", "claude", "tool_input", "canonical_input"),
    [
        ("Execute", "Bash", {"command": "ls", "timeout": 30}, {"command": "ls", "timeout": 30000}),
        ("Create", "Write", {"file_path": "/etc/x", "content": "hi"}, {"file_path": "/etc/x", "content": "hi"}),
        (
            "Edit",
            "Edit",
            {"file_path": "/a", "old_str": "x", "new_str": "y", "change_all": True},
            {"file_path": "/a", "old_string": "x", "new_string": "y", "replace_all": True},
        ),
        ("Read", "Read", {"file_path": "/a", "offset": 1}, {"file_path": "/a", "offset": 1}),
        ("LS", "LS", {"directory_path": "/a"}, {"path": "/a"}),
        ("Grep", "Grep", {"pattern": "p", "glob_pattern": "*.py"}, {"pattern": "p", "glob": "*.py"}),
        ("Glob", "Glob", {"patterns": ["*.js", "*.ts"]}, {"patterns": ["*.js", "*.ts"], "pattern": "*.js"}),
        ("FetchUrl", "WebFetch", {"url": "https://x"}, {"url": "https://x"}),
        ("Task", "Agent", {"subagent_type": "w", "prompt": "p"}, {"subagent_type": "w", "prompt": "p"}),
        ("mcp__github__create_issue", "mcp__github__create_issue", {"title": "t"}, {"title": "t"}),
    ],
)
def test_tools_and_their_inputs_become_claude_codes(
    droid: str, claude: str, tool_input: dict[str, Any], canonical_input: dict[str, Any]
) -> None:
    sent = droid_event("PreToolUse", tool_name=droid, tool_input=tool_input)
    out = droid_input(sent)
    assert (out["tool_name"], out[AGENT_TOOL_NAME], out["tool_input"]) == (claude, droid, canonical_input)
    assert sent["tool_name"] == droid and sent["tool_input"] == tool_input  # the input is not modified


def test_the_shell_keeps_droids_own_fields_and_every_unknown_field_stays() -> None:
    out = droid_input(execute("git push --force origin main", future_field=1) | {"tool_use_id": "t1"})
    assert out["tool_name"] == "Bash" and out["tool_input"]["command"] == "git push --force origin main"
    assert out["tool_input"]["riskLevel"] == "low" and out["tool_input"]["future_field"] == 1
    assert (out["permission_mode"], out["droid_permission_mode"]) == ("auto", "auto-high")
    assert out["tool_use_id"] == "t1" and out["transcript_path"].endswith(".jsonl")
    start = droid_input(droid_event("SessionStart", permission_mode="off", source="startup", CLAUDE_ENV_FILE="/e"))
    assert (start["permission_mode"], start["CLAUDE_ENV_FILE"], start["source"]) == ("default", "/e", "startup")
    stop = droid_input(droid_event("Stop", stop_hook_active=False, message_id="m", elapsed_time=459))
    assert stop["hook_event_name"] == "Stop" and stop["elapsed_time"] == 459 and "agent_event_name" not in stop


def test_an_apply_patch_is_judged_by_the_files_it_touches() -> None:
    patch = "*** Begin Patch\n*** Add File: /etc/evil\n+x\n*** Update File: src/a.py\n-a\n+b\n*** End Patch\n"
    out = droid_input(droid_event("PreToolUse", tool_name="ApplyPatch", tool_input={"patch": patch}))
    assert out["tool_name"] == "Write" and out["tool_input"]["file_paths"] == ["/etc/evil", "/work/proj/src/a.py"]
    assert out["tool_input"]["patch"] == patch and "input" not in out["tool_input"]


def pre(**specific: Any) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", **specific}}


def test_pretooluse_decisions_in_the_form_droid_acts_on() -> None:
    sent = execute("ls")
    deny = droid_output("PreToolUse", pre(permissionDecision="deny", permissionDecisionReason="central"), sent)
    assert droid_reads("PreToolUse", deny) == ("deny", "central")
    assert droid_reads("PreToolUse", droid_output("PreToolUse", pre(permissionDecision="deny"), sent))[1]
    allow = droid_output("PreToolUse", pre(permissionDecision="allow", permissionDecisionReason="ok"), sent)
    assert allow["hookSpecificOutput"]["permissionDecision"] == "allow"
    ask = droid_output("PreToolUse", pre(permissionDecision="ask", permissionDecisionReason="sure?"), sent)
    assert droid_reads("PreToolUse", ask) == ("deny", "sure?" + ASK_SUFFIX)  # never a run
    legacy = droid_output("PreToolUse", {"decision": "block", "reason": "old style"}, sent)
    assert droid_reads("PreToolUse", legacy) == ("deny", "old style") and "decision" not in legacy
    stopped = droid_output("PreToolUse", {"continue": False, "stopReason": "halt"}, sent)
    assert droid_reads("PreToolUse", stopped) == ("stop", "halt")
    context = droid_output("PreToolUse", pre(additionalContext="c"), sent)
    assert context == {}  # Droid drops PreToolUse context; nothing else to say
    assert droid_output("PreToolUse", {}, sent) == {}


def test_a_rewrite_is_an_allow_with_the_input_in_droids_names() -> None:
    edit = droid_event("PreToolUse", tool_name="Edit", tool_input={"file_path": "/a", "old_str": "x", "new_str": "y"})
    canonical = droid_input(edit)["tool_input"] | {"new_string": "z"}
    reply = droid_output("PreToolUse", pre(permissionDecision="allow", updatedInput=canonical), edit)
    assert droid_reads("PreToolUse", reply) == ("allow", {"file_path": "/a", "old_str": "x", "new_str": "z"})
    shell = execute("rm -rf build", timeout=30)
    rewritten = droid_input(shell)["tool_input"] | {"command": "rm -rf ./build"}
    reply = droid_output("PreToolUse", pre(updatedInput=rewritten), shell)
    updated = droid_reads("PreToolUse", reply)[1]
    assert (updated["command"], updated["timeout"], updated["summary"]) == ("rm -rf ./build", 30, "Run a test command")
    asked = droid_output("PreToolUse", pre(permissionDecision="ask", updatedInput=rewritten), shell)
    assert droid_reads("PreToolUse", asked)[0] == "deny"


def test_stop_posttooluse_prompt_and_session_start_outputs() -> None:
    block = droid_output("Stop", {"decision": "block", "reason": "run the tests", "continue": True}, {})
    assert block == {"decision": "block", "reason": "run the tests"}
    assert droid_reads("Stop", droid_output("Stop", {}, {})) == ("stop", None)
    context = {"hookSpecificOutput": {"hookEventName": "Stop", "additionalContext": "more"}}
    assert droid_reads("SubagentStop", droid_output("SubagentStop", context, {})) == ("keep working", "more")
    post = droid_output("PostToolUse", {"decision": "block", "reason": "leaked a key"}, execute("ls", "PostToolUse"))
    assert "decision" not in post and "leaked a key" in post["hookSpecificOutput"]["additionalContext"]
    start = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "hello"}}
    assert droid_reads("SessionStart", droid_output("SessionStart", start, {})) == ("context", "hello")
    prompt = droid_output("UserPromptSubmit", {"decision": "block", "reason": "no secrets"}, {})
    assert prompt == {"decision": "block", "reason": "no secrets"}
    end = droid_output("SessionEnd", {"systemMessage": "bye", "decision": "block", "reason": "r"}, {})
    assert end == {"systemMessage": "bye"}


EVERY_EVENT = [
    "PreToolUse",
    "PostToolUse",
    "Notification",
    "UserPromptSubmit",
    "Stop",
    "SubagentStop",
    "PreCompact",
    "SessionStart",
    "SessionEnd",
    "PermissionRequest",
    "Unknown",
]


@pytest.mark.parametrize("event", EVERY_EVENT)
def test_no_reply_holds_a_field_droid_does_not_act_on(event: str) -> None:
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
            "retry": True,
            "decision": {"behavior": "allow"},
        },
    }
    reply = droid_output(event, everything, execute("ls", event))
    assert set(reply) <= DROID_FIELDS, event
    specific = reply.get("hookSpecificOutput", {})
    assert set(specific) <= {"hookEventName", "permissionDecision", "permissionDecisionReason", "additionalContext"}
    if event == "PreToolUse":
        assert droid_reads(event, reply)[0] == "deny"  # an ask with a rewrite is never an allow
        assert "additionalContext" not in specific
    if event in ("Stop", "SubagentStop"):
        assert "continue" not in reply and reply["decision"] == "block"


def test_capabilities_are_declared_for_every_name() -> None:
    droid = DIALECTS["droid"]
    assert set(droid.capabilities) == set(CAPABILITIES) and droid.transport == "command"
    assert droid.capabilities["ask"].support is Support.NO
    assert droid.capabilities["add_context"].support is Support.PARTIAL
    for name in ("deny", "allow", "rewrite_input", "stop_block", "fail_closed"):
        assert droid.capabilities[name].support is Support.YES, name
    assert all(c.note for c in droid.capabilities.values()) and droid.verified.startswith("real CLI")
    assert droid.canonical_tool("Execute") == "Bash" and droid.canonical_tool("Create") == "Write"
    assert len(set(DROID_TOOLS)) == len(DROID_TOOLS)


# -- live: Droid-shaped payloads through the gateway, one policy in Claude Code's terms --------

POLICY = """
hookbus: {deadlineSeconds: 5.0}
hooks:
  PreToolUse:
    - matcher: Bash|Write
      hooks:
        - {type: rule, deny: ["Bash(git push --force *)", "Write(//etc/**)"], reason: "central policy"}
"""


async def test_droid_through_a_live_gateway(platform: Callable[..., Any], bus: BusProbe, tmp_path: Path) -> None:
    create = droid_event("PreToolUse", tool_name="Create", tool_input={"file_path": "/etc/hosts", "content": "x"})
    async with platform(POLICY) as p:
        push = await p.client.post(f"{p.url}/v1/hooks?dialect=droid", json=execute("git push --force origin main"))
        etc = await p.post(create, headers={"X-Hookbus-Dialect": "droid"})
        fine = await p.client.post(f"{p.url}/v1/hooks?dialect=droid", json=execute("ls -la"))
    for answer in (push, etc):
        assert answer.status_code == 200 and answer.headers["X-Hookbus-Outcome"] == "decided", answer.text
        action, reason = droid_reads("PreToolUse", answer.json())
        assert action == "deny" and "central policy" in reason
        assert set(answer.json()) <= DROID_FIELDS
    assert droid_reads("PreToolUse", fine.json())[0] == "run"
    record = await async_wait_for(lambda: bus.record(push.headers["X-Hookbus-Event-Id"]), timeout_s=5)
    logged = json.loads(record.payload)
    assert (logged["tool_name"], logged[AGENT_TOOL_NAME]) == ("Bash", "Execute")
    assert (logged["permission_mode"], logged["droid_permission_mode"]) == ("auto", "auto-high")
    assert record.decision == "deny"
