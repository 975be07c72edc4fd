"""GitHub Copilot CLI's dialect: its payloads (as 1.0.102 sends them) in, its answers out.

The inputs below are copied from what the real CLI sent to a command hook (PascalCase and
camelCase hook files). ``copilot_reads`` restates which top-level fields Copilot acts on per
event (observed on the real CLI: Claude Code's ``hookSpecificOutput`` on PermissionRequest,
``continue: false`` and ``systemMessage`` are not carried out); every answer is checked
against it, so a field Copilot would drop cannot hide a decision.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from bus.dialects import dialect_for, from_dialect, to_dialect
from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, CAPABILITIES, Support
from bus.dialects.copilot import (
    COPILOT_TOOLS,
    CopilotCli,
    agent_tool_input,
    canonical_tool_input,
    copilot_input,
    copilot_output,
)
from tests.conftest import BusProbe, async_wait_for
from tests.hookbus.test_shim import shim

SESSION = "9aeb6ff7-c9bc-4af7-bc05-04df19d10f5c"
#: The fields Copilot CLI reads from a hook's answer, per (Claude Code) event.
COPILOT_READS: dict[str, set[str]] = {
    "PreToolUse": {"permissionDecision", "permissionDecisionReason", "modifiedArgs", "additionalContext"},
    "PermissionRequest": {"behavior", "message", "interrupt"},
    "PostToolUse": {"additionalContext", "decision", "reason", "modifiedResult"},
    "PostToolUseFailure": {"additionalContext", "decision", "reason"},
    "UserPromptSubmit": {"additionalContext", "decision", "reason"},
    "SessionStart": {"additionalContext"},
    "SubagentStart": {"additionalContext"},
    "Stop": {"decision", "reason"},
    "SubagentStop": {"decision", "reason"},
}


def pascal(event: str, **fields: Any) -> dict[str, Any]:
    return {
        "hook_event_name": event,
        "session_id": SESSION,
        "timestamp": "2026-12-02T00:48:31.158Z",
        "cwd": "/work",
        **fields,
    }


def camel(**fields: Any) -> dict[str, Any]:
    return {"sessionId": SESSION, "timestamp": 1796172511158, "cwd": "/work", **fields}


# -- input ----------------------------------------------------------------------------------


def test_pascal_case_bash_keeps_claude_fields_and_names_the_agent_tool() -> None:
    raw = pascal("PreToolUse", tool_name="Bash", tool_input={"command": "git push --force x", "description": "d"})
    translated, body = from_dialect("copilot", raw, orjson.dumps(raw))
    assert translated["hook_event_name"] == "PreToolUse" and AGENT_EVENT_NAME not in translated
    assert translated["tool_name"] == "Bash" and translated[AGENT_TOOL_NAME] == "bash"
    assert translated["tool_input"] == {"command": "git push --force x", "description": "d"}
    assert orjson.loads(body) == translated and AGENT_TOOL_NAME not in raw  # the input is left alone


@pytest.mark.parametrize(
    ("claude", "agent", "args", "canonical"),
    [
        (
            "Write",
            "create",
            {"path": "/etc/x", "file_text": "hi\n"},
            {"file_path": "/etc/x", "content": "hi\n"},
        ),
        ("Read", "view", {"path": "/w/a.txt"}, {"file_path": "/w/a.txt"}),
        ("Read", "view", {"path": "/w/a", "view_range": [3, 7]}, {"file_path": "/w/a", "offset": 3, "limit": 5}),
        ("Read", "view", {"path": "/w/a", "view_range": [3, -1]}, {"file_path": "/w/a", "offset": 3}),
        (
            "Edit",
            "edit",
            {"path": "/w/a", "old_str": "hello", "new_str": "bye"},
            {"file_path": "/w/a", "old_string": "hello", "new_string": "bye"},
        ),
        ("Glob", "glob", {"pattern": "*.txt", "paths": ["/w"]}, {"pattern": "*.txt", "path": "/w"}),
        ("Grep", "grep", {"pattern": "x", "paths": ["/a", "/b"]}, {"pattern": "x", "paths": ["/a", "/b"]}),
        (
            "Agent",
            "task",
            {"name": "x", "prompt": "p", "agent_type": "explore", "description": "d"},
            {"name": "x", "prompt": "p", "subagent_type": "explore", "description": "d"},
        ),
    ],
)
def test_tool_arguments_become_claude_codes(
    claude: str, agent: str, args: dict[str, Any], canonical: dict[str, Any]
) -> None:
    pascal_form = copilot_input(pascal("PreToolUse", tool_name=claude, tool_input=args))
    camel_form = copilot_input(camel(toolName=agent, toolArgs=args))
    for translated in (pascal_form, camel_form):
        assert (translated["tool_name"], translated[AGENT_TOOL_NAME]) == (claude, agent)
        assert translated["tool_input"] == canonical
    assert canonical_tool_input(claude, args) == canonical
    if "view_range" not in args and "paths" not in args:
        assert agent_tool_input(claude, canonical) == args  # and back, for modifiedArgs


def test_camel_case_inputs_get_an_event_and_claude_fields() -> None:
    pre = copilot_input(camel(toolName="bash", toolArgs={"command": "ls", "description": "d"}))
    assert pre["hook_event_name"] == "PreToolUse" and pre["session_id"] == SESSION
    assert pre["timestamp"] == "2026-12-02T00:48:31.158Z" and "sessionId" not in pre
    assert pre["tool_name"] == "Bash" and pre["tool_input"] == {"command": "ls", "description": "d"}
    post = copilot_input(
        camel(
            toolName="bash",
            toolArgs={"command": "ls"},
            toolResult={"resultType": "success", "textResultForLlm": "a\nb"},
        )
    )
    assert post["hook_event_name"] == "PostToolUse"
    assert post["tool_result"] == {"result_type": "success", "text_result_for_llm": "a\nb"} == post["tool_response"]
    stop = copilot_input(camel(transcriptPath="/t.jsonl", stopReason="end_turn", stop_hook_active=False))
    assert (stop["hook_event_name"], stop["transcript_path"], stop["stop_reason"]) == ("Stop", "/t.jsonl", "end_turn")
    sub = copilot_input(camel(stopReason="end_turn", agentId="a1", agentType="explore", parentAgentId="p"))
    assert (sub["hook_event_name"], sub["agent_id"], sub["agent_type"]) == ("SubagentStop", "a1", "explore")
    start = copilot_input(camel(source="new", initialPrompt="do it"))
    assert (start["hook_event_name"], start["initial_prompt"]) == ("SessionStart", "do it")
    assert copilot_input(camel(prompt="hi"))["hook_event_name"] == "UserPromptSubmit"
    assert copilot_input(camel(reason="complete"))["hook_event_name"] == "SessionEnd"
    assert copilot_input(camel(error={"message": "x"}))["hook_event_name"] == "StopFailure"
    assert "hook_event_name" not in copilot_input(camel())  # nothing to tell: the gateway refuses it
    for odd in (10**30, float("nan"), -(10**20)):
        assert copilot_input(camel(prompt="x", timestamp=odd))["timestamp"] is odd  # kept, never an error


def test_subagent_events_as_copilot_sends_them() -> None:
    ids = {"transcriptPath": "/t.jsonl", "agentName": "explore"}
    # SubagentStart comes camel-ish and unnamed even from a PascalCase file.
    start = copilot_input(camel(**ids, agent_id="a1", agent_type="explore", parent_agent_id="p"))
    assert (start["hook_event_name"], start["agent_id"], start["agent_type"]) == ("SubagentStart", "a1", "explore")
    assert start["agent_name"] == "explore" and start["transcript_path"] == "/t.jsonl"
    camel_start = copilot_input(camel(**ids, agentId="a1", agentType="explore", parentAgentId="p"))
    assert (camel_start["hook_event_name"], camel_start["agent_id"]) == ("SubagentStart", "a1")
    stop = copilot_input(
        camel(
            **ids,
            agentId="a1",
            agentType="explore",
            response="All done.",
            stopReason="end_turn",
            stop_hook_active=False,
        )
    )
    assert (stop["hook_event_name"], stop["last_assistant_message"]) == ("SubagentStop", "All done.")


def test_permission_request_arrives_camel_case_named_by_hook_name() -> None:
    raw = camel(
        hookName="permissionRequest",
        toolName="bash",
        toolInput={"command": "touch made.txt"},
        permissionSuggestions=[],
        extra_field=1,
    )
    translated = copilot_input(raw)
    assert translated["hook_event_name"] == "PermissionRequest"
    assert translated[AGENT_EVENT_NAME] == "permissionRequest" and "hookName" not in translated
    assert (translated["tool_name"], translated[AGENT_TOOL_NAME]) == ("Bash", "bash")
    assert translated["tool_input"] == {"command": "touch made.txt"} and translated["permission_suggestions"] == []
    assert translated["extra_field"] == 1  # unknown fields are kept


@pytest.mark.parametrize(
    ("agent", "claude"),
    [
        ("agentStop", "Stop"),
        ("userPromptSubmitted", "UserPromptSubmit"),
        ("preMcpToolCall", "PreToolUse"),
        ("errorOccurred", "StopFailure"),
        ("ErrorOccurred", "StopFailure"),
    ],
)
def test_copilot_event_names_map_to_claude_codes(agent: str, claude: str) -> None:
    translated = copilot_input(pascal(agent))
    assert (translated["hook_event_name"], translated[AGENT_EVENT_NAME]) == (claude, agent)
    assert CopilotCli().canonical_event(agent) == claude


def test_mcp_tools_and_unknown_tools() -> None:
    # Copilot names an MCP tool <server>-<tool> in both forms, with no server field.
    mcp = copilot_input(pascal("PreToolUse", tool_name="memo-remember", tool_input={"note": "hi"}))
    assert (mcp["tool_name"], mcp[AGENT_TOOL_NAME], mcp["tool_input"]) == (
        "mcp__memo__remember",
        "memo-remember",
        {"note": "hi"},
    )
    github = copilot_input(camel(toolName="github-mcp-server-get_issue", toolArgs={"n": 1}))
    assert github["tool_name"] == "mcp__github-mcp-server__get_issue"
    named = copilot_input(pascal("PreToolUse", tool_name="mcp__github__get_issue", tool_input={}))
    assert named["tool_name"] == "mcp__github__get_issue" == named[AGENT_TOOL_NAME]
    odd = copilot_input(camel(toolName="read_bash", toolArgs={"shellId": "0"}))
    assert odd["tool_name"] == "read_bash" == odd[AGENT_TOOL_NAME] and odd["tool_input"] == {"shellId": "0"}
    assert set(COPILOT_TOOLS.values()) >= {"Bash", "Read", "Write", "Edit", "Glob", "Grep", "Agent"}
    assert not any("-" in name for name in COPILOT_TOOLS)


# -- output ---------------------------------------------------------------------------------


def pre(decision: str | None = None, **more: Any) -> dict[str, Any]:
    specific: dict[str, Any] = {"hookEventName": "PreToolUse", **more}
    if decision is not None:
        specific |= {"permissionDecision": decision, "permissionDecisionReason": f"because {decision}"}
    return {"hookSpecificOutput": specific}


def copilot_reads(event: str, reply: dict[str, Any]) -> None:
    """Fail when ``reply`` holds a field Copilot does not act on for ``event``."""
    assert set(reply) <= COPILOT_READS.get(event, set()), (event, reply)


def test_pretooluse_decisions_are_top_level() -> None:
    bash = pascal("PreToolUse", tool_name="Bash", tool_input={"command": "ls"})
    deny = to_dialect("copilot", "PreToolUse", pre("deny"), bash)
    assert deny == {"permissionDecision": "deny", "permissionDecisionReason": "because deny"}
    assert to_dialect("copilot", "PreToolUse", pre("allow"), bash)["permissionDecision"] == "allow"
    assert to_dialect("copilot", "PreToolUse", pre("ask"), bash)["permissionDecision"] == "ask"
    deferred = copilot_output("PreToolUse", pre("defer"))
    assert deferred["permissionDecision"] == "deny" and "cannot defer" in deferred["permissionDecisionReason"]
    halted = copilot_output("PreToolUse", {"continue": False, "stopReason": "halt", **pre("allow")})
    assert halted == {"permissionDecision": "deny", "permissionDecisionReason": "halt"}
    legacy = copilot_output("PreToolUse", {"decision": "block", "reason": "old form"})
    assert legacy == {"permissionDecision": "deny", "permissionDecisionReason": "old form"}
    bare = copilot_output(
        "PreToolUse", {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny"}}
    )
    assert bare["permissionDecisionReason"] == "Denied by hookbus policy"
    assert copilot_output("PreToolUse", {}) == {} and copilot_output("PreToolUse", {"systemMessage": "x"}) == {}
    for reply in (deny, deferred, halted, legacy):
        copilot_reads("PreToolUse", reply)
        assert "hookSpecificOutput" not in reply and "continue" not in reply


def test_rewrites_become_modified_args_in_copilots_names() -> None:
    write = pascal("PreToolUse", tool_name="Write", tool_input={"path": "/w/a", "file_text": "x"})
    rewritten = to_dialect(
        "copilot", "PreToolUse", pre("allow", updatedInput={"file_path": "/w/b", "content": "y"}), write
    )
    assert rewritten["modifiedArgs"] == {"path": "/w/b", "file_text": "y"}
    shell = camel(toolName="bash", toolArgs={"command": "rm -rf /"})
    rewrite = pre(None, updatedInput={"command": "echo safe", "description": "d"})
    assert to_dialect("copilot", "PreToolUse", rewrite, shell) == {
        "modifiedArgs": {"command": "echo safe", "description": "d"}
    }
    denied = copilot_output("PreToolUse", pre("deny", updatedInput={"command": "x"}), "Bash")
    assert "modifiedArgs" not in denied  # a deny never runs anything
    context = copilot_output("PreToolUse", pre(None, additionalContext="mind the tests"))
    assert context == {"additionalContext": "mind the tests"}
    copilot_reads("PreToolUse", rewritten)


def permission(**decision: Any) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}


def test_permission_request_decision_object_moves_to_the_top_level() -> None:
    deny = copilot_output("PermissionRequest", permission(behavior="deny", message="no", interrupt=True))
    assert deny == {"behavior": "deny", "message": "no", "interrupt": True}
    assert copilot_output("PermissionRequest", permission(behavior="deny")) == {
        "behavior": "deny",
        "message": "Denied by hookbus policy",
    }
    assert copilot_output("PermissionRequest", permission(behavior="allow")) == {"behavior": "allow"}
    # Copilot cannot rewrite here: an allow that rewrites is left to Copilot's own flow, never an allow.
    assert copilot_output("PermissionRequest", permission(behavior="allow", updatedInput={"command": "x"})) == {}
    halted = copilot_output("PermissionRequest", {"continue": False, "stopReason": "stop now"})
    assert halted == {"behavior": "deny", "message": "stop now", "interrupt": True}
    for reply in (deny, halted):
        copilot_reads("PermissionRequest", reply)


def test_block_and_context_events() -> None:
    context = {"hookSpecificOutput": {"hookEventName": "X", "additionalContext": "CTX"}}
    for event in ("SessionStart", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "SubagentStart"):
        assert copilot_output(event, context) == {"additionalContext": "CTX"}
    block = {"decision": "block", "reason": "keep going"}
    for event in ("Stop", "SubagentStop", "UserPromptSubmit", "PostToolUse"):
        assert copilot_output(event, block) == block
    assert copilot_output("Stop", context) == {"decision": "block", "reason": "CTX"}  # continues the turn
    assert copilot_output("UserPromptSubmit", {"continue": False, "stopReason": "no"}) == {
        "decision": "block",
        "reason": "no",
    }
    assert copilot_output("Stop", {"continue": False}) == {}  # it stops anyway
    for event in ("SessionEnd", "Notification", "PreCompact", "StopFailure"):
        assert copilot_output(event, {**block, **context, "systemMessage": "m"}) == {}
    for event in COPILOT_READS:
        for output in (block, context, pre("deny"), permission(behavior="deny"), {"continue": False}):
            copilot_reads(event, copilot_output(event, output))


def test_a_replaced_tool_output_is_copilots_modified_result() -> None:
    post = pascal("PostToolUse", tool_name="Bash", tool_result={"result_type": "success", "text_result_for_llm": "k"})

    def replaced(value: Any) -> Any:
        reply = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": value}}
        answer = to_dialect("copilot", "PostToolUse", reply, post)
        copilot_reads("PostToolUse", answer)
        assert answer["modifiedResult"]["resultType"] == "success"
        return answer["modifiedResult"]["textResultForLlm"]

    assert replaced("[hidden]") == "[hidden]"
    assert replaced({"stdout": "out", "stderr": "err", "interrupted": False}) == "out\nerr"
    assert replaced([{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]) == "a\nb"
    assert replaced({"text_result_for_llm": "t"}) == "t" and replaced({"n": 1}) == '{"n": 1}'
    failed = camel(toolName="bash", toolArgs={}, toolResult={"resultType": "failure", "textResultForLlm": "x"})
    mcp = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedMCPToolOutput": "y"}}
    assert to_dialect("copilot", "PostToolUse", mcp, failed)["modifiedResult"] == {
        "textResultForLlm": "y",
        "resultType": "failure",
    }
    assert "modifiedResult" not in copilot_output("PostToolUseFailure", mcp)


# -- live -----------------------------------------------------------------------------------

LIVE_POLICY = """
hookbus: {deadlineSeconds: 5.0}
hooks:
  PreToolUse:
    - matcher: Write
      hooks:
        - {type: rule, deny: ["Write(//etc/**)"], reason: "not in /etc"}
  PermissionRequest:
    - matcher: Bash
      hooks:
        - {type: rule, deny: ["Bash(rm *)"], reason: "no rm"}
"""


async def test_copilot_through_a_live_gateway(platform: Callable[..., Any], bus: BusProbe) -> None:
    write = pascal("PreToolUse", tool_name="Write", tool_input={"path": "/etc/passwd", "file_text": "x"})
    rm = camel(
        hookName="permissionRequest", toolName="bash", toolInput={"command": "rm -rf /w"}, permissionSuggestions=[]
    )
    async with platform(LIVE_POLICY) as p:
        denied = await p.client.post(f"{p.url}/v1/hooks?dialect=copilot", json=write)
        refused = await p.post(rm, headers={"X-Hookbus-Dialect": "copilot"})
        fine = await p.post(
            {**write, "tool_input": {"path": "/w/a", "file_text": "x"}}, headers={"X-Hookbus-Dialect": "copilot"}
        )
    assert denied.status_code == 200 and denied.json() == {
        "permissionDecision": "deny",
        "permissionDecisionReason": "not in /etc (rule: Write(//etc/**))",
    }
    assert refused.json() == {"behavior": "deny", "message": "no rm (rule: Bash(rm *))"}
    assert fine.json() == {}
    record = await async_wait_for(lambda: bus.record(denied.headers["X-Hookbus-Event-Id"]), timeout_s=5)
    logged = json.loads(record.payload)
    assert (record.agent, record.tool_name) == ("copilot", "Write")
    assert logged[AGENT_TOOL_NAME] == "create" and logged["tool_input"] == {"file_path": "/etc/passwd", "content": "x"}
    permission = await async_wait_for(lambda: bus.record(refused.headers["X-Hookbus-Event-Id"]), timeout_s=5)
    assert (permission.event, permission.tool_name, permission.decision) == ("PermissionRequest", "Bash", "deny")


#: preToolUse's input as GitHub's Copilot CLI hooks reference shows it: ``toolArgs`` a JSON
#: string, no session id.
DOCUMENTED = {
    "timestamp": 1704614600000,
    "cwd": "/path/to/project",
    "toolName": "bash",
    "toolArgs": '{"command":"rm -rf /","description":"Clean up"}',
}
DENY_RM_POLICY = """
hookbus: {deadlineSeconds: 5.0}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {type: rule, deny: ["Bash(rm -rf *)"], reason: "no rm -rf"}
"""


def test_the_documented_camel_case_input_decodes_its_arguments_and_gets_a_session() -> None:
    translated = copilot_input(DOCUMENTED)
    assert translated["hook_event_name"] == "PreToolUse" and translated["tool_name"] == "Bash"
    assert translated["tool_input"] == {"command": "rm -rf /", "description": "Clean up"}
    assert translated["session_id"] == "copilot:/path/to/project"  # one per working folder
    assert copilot_input({k: v for k, v in DOCUMENTED.items() if k != "cwd"})["session_id"] == "copilot"
    assert copilot_input({**DOCUMENTED, "sessionId": "s-1"})["session_id"] == "s-1"


@pytest.mark.parametrize("args", ["rm -rf /", '{"command": "rm -rf /"', "[" * 2000 + "]" * 2000])
def test_tool_args_that_are_not_json_are_not_a_copilot_input(args: str) -> None:
    with pytest.raises(ValueError, match="toolArgs is a string that is not JSON"):
        copilot_input({**DOCUMENTED, "toolArgs": args})


async def test_rm_rf_in_the_documented_form_is_denied_through_the_shim(platform: Callable[..., Any]) -> None:
    deep = {**DOCUMENTED, "toolArgs": '{"command": "rm -rf /", "pad": ' + "[" * 100 + "]" * 100 + "}"}
    broken = {**DOCUMENTED, "toolArgs": '{"command": "rm -rf /"'}
    async with platform(DENY_RM_POLICY) as p:
        code, out, err = await shim("--url", p.url, "--agent", "copilot", stdin=orjson.dumps(DOCUMENTED))
        refusals = [await shim("--url", p.url, "--agent", "copilot", stdin=orjson.dumps(b)) for b in (deep, broken)]
    assert code == 0, err
    assert json.loads(out) == {
        "permissionDecision": "deny",
        "permissionDecisionReason": "no rm -rf (rule: Bash(rm -rf *))",
    }
    for code, out, err in refusals:  # nested past nestingDepth, or not JSON: cannot be judged, denied
        assert code == 2 and b"cannot judge" in err, err
        assert json.loads(out)["permissionDecision"] == "deny"


# -- declarations ---------------------------------------------------------------------------


def test_capabilities_are_declared_completely_and_honestly() -> None:
    dialect = dialect_for("Copilot")
    assert isinstance(dialect, CopilotCli) and dialect.name == "copilot" and dialect.transport == "command"
    assert set(dialect.capabilities) == set(CAPABILITIES)
    for name, capability in dialect.capabilities.items():
        assert capability.support in Support, name
        if capability.support is not Support.YES:
            assert capability.note, name  # every limit says how hookbus maps it
    assert dialect.capabilities["ask"].support is Support.PARTIAL
    assert dialect.capabilities["fail_closed"].support is Support.PARTIAL
