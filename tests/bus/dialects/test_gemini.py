"""Gemini CLI's dialect: both directions as units, then Gemini-shaped traffic through a live gateway.

The inputs are the shapes Gemini CLI 0.61.0 sends (captured from the real CLI; see
``tests/agents/test_gemini.py`` for the CLI itself). ``gemini_reads`` restates which output
fields Gemini reads (``hookTypes.ts``: the common fields, ``decision`` in
allow/deny/block/ask/approve, an untagged ``hookSpecificOutput``); every reply is checked
through it, so a Claude Code field that Gemini would ignore (``permissionDecision``,
``hookEventName``, ``updatedInput``) can never be what carries a decision.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from bus.dialects import DIALECTS, from_dialect, to_dialect
from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, CAPABILITIES, Support
from bus.dialects.gemini import canonical_tool_name, gemini_input, gemini_output
from bus.policy.rulelists import compile_lists, first_verdict
from tests.conftest import BusProbe, async_wait_for

GEMINI_FIELDS = {
    "continue",
    "stopReason",
    "suppressOutput",
    "systemMessage",
    "decision",
    "reason",
    "hookSpecificOutput",
}
GEMINI_SPECIFIC = {
    "additionalContext",
    "tool_input",
    "tailToolCallRequest",
    "clearContext",
    "llm_request",
    "llm_response",
    "toolConfig",
}
GEMINI_DECISIONS = {"allow", "deny", "block", "ask", "approve"}


def gemini_reads(reply: dict[str, Any]) -> dict[str, Any]:
    """The reply as Gemini reads it; AssertionError for anything it would not understand."""
    assert set(reply) <= GEMINI_FIELDS, set(reply) - GEMINI_FIELDS
    assert reply.get("decision") in GEMINI_DECISIONS | {None}, reply.get("decision")
    specific = reply.get("hookSpecificOutput", {})
    assert isinstance(specific, dict) and set(specific) <= GEMINI_SPECIFIC, specific
    if reply.get("decision") in ("deny", "block"):
        assert reply.get("reason"), "Gemini shows the reason to the model; an empty one says nothing"
    return reply


def gemini_event(event: str, **fields: Any) -> dict[str, Any]:
    """A hook input as Gemini CLI 0.61.0 sends it."""
    return {
        "session_id": "3e61c412-4a11-4d19-b4e5-e02bc7d50dde",
        "transcript_path": "/home/u/.gemini/tmp/proj/chats/session-2026-12-02T00-48-3e61c412.jsonl",
        "cwd": "/work/proj",
        "hook_event_name": event,
        "timestamp": "2026-12-02T00:48:51.786Z",
        **fields,
    }


def shell(command: str, **more: Any) -> dict[str, Any]:
    return gemini_event(
        "BeforeTool", tool_name="run_shell_command", tool_input={"command": command, "description": "d", **more}
    )


# -- input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "canonical"),
    [
        ("BeforeTool", "PreToolUse"),
        ("AfterTool", "PostToolUse"),
        ("BeforeAgent", "UserPromptSubmit"),
        ("AfterAgent", "Stop"),
        ("PreCompress", "PreCompact"),
        ("SessionStart", "SessionStart"),
        ("SessionEnd", "SessionEnd"),
        ("Notification", "Notification"),
        ("BeforeModel", "BeforeModel"),
        ("AfterModel", "AfterModel"),
        ("BeforeToolSelection", "BeforeToolSelection"),
    ],
)
def test_events_become_claude_events(event: str, canonical: str) -> None:
    translated = gemini_input(gemini_event(event))
    assert translated["hook_event_name"] == canonical
    assert translated.get(AGENT_EVENT_NAME) == (None if event == canonical else event)
    assert translated["timestamp"] == "2026-12-02T00:48:51.786Z" and translated["session_id"].startswith("3e61")


@pytest.mark.parametrize(
    ("tool", "args", "claude", "expected"),
    [
        (
            "run_shell_command",
            {"command": "git push --force origin main", "description": "push", "is_background": False},
            "Bash",
            {"command": "git push --force origin main", "description": "push", "run_in_background": False},
        ),
        (
            "write_file",
            {"file_path": "notes.md", "content": "x"},
            "Write",
            {"file_path": "/work/proj/notes.md", "content": "x"},
        ),
        (
            "write_file",
            {"file_path": "../../etc/passwd", "content": "x"},
            "Write",
            {"file_path": "/etc/passwd", "content": "x"},
        ),
        (
            "replace",
            {
                "file_path": "/abs/a.py",
                "old_string": "a",
                "new_string": "b",
                "allow_multiple": True,
                "instruction": "i",
            },
            "Edit",
            {"file_path": "/abs/a.py", "old_string": "a", "new_string": "b", "replace_all": True, "instruction": "i"},
        ),
        (
            "read_file",
            {"file_path": "src/x.py", "start_line": 3},
            "Read",
            {"file_path": "/work/proj/src/x.py", "start_line": 3},
        ),
        ("glob", {"pattern": "**/*.py", "dir_path": "src"}, "Glob", {"pattern": "**/*.py", "path": "src"}),
        (
            "grep_search",
            {"pattern": "TODO", "dir_path": "/x", "include_pattern": "*.py"},
            "Grep",
            {"pattern": "TODO", "path": "/x", "glob": "*.py"},
        ),
        ("list_directory", {"dir_path": "."}, "LS", {"path": "."}),
        (
            "web_fetch",
            {"prompt": "summarise https://example.com/a?b=1, please"},
            "WebFetch",
            {"prompt": "summarise https://example.com/a?b=1, please", "url": "https://example.com/a?b=1"},
        ),
        ("google_web_search", {"query": "q"}, "WebSearch", {"query": "q"}),
        ("write_todos", {"todos": []}, "TodoWrite", {"todos": []}),
        ("update_topic", {"title": "t"}, "update_topic", {"title": "t"}),
    ],
)
def test_tools_and_their_inputs_become_claude_tools(
    tool: str, args: dict[str, Any], claude: str, expected: dict[str, Any]
) -> None:
    raw = gemini_event("BeforeTool", tool_name=tool, tool_input=args)
    translated = gemini_input(raw)
    assert (translated["tool_name"], translated[AGENT_TOOL_NAME]) == (claude, tool)
    assert translated["tool_input"] == expected
    assert raw["tool_input"] == args and raw["tool_name"] == tool  # the agent's input is left alone


def test_mcp_tools_are_named_like_claude_code_names_them() -> None:
    context = {"server_name": "git_hub", "tool_name": "create_issue", "command": "npx"}
    assert canonical_tool_name("mcp_git_hub_create_issue", context) == "mcp__git_hub__create_issue"
    assert canonical_tool_name("mcp_github_create_issue") == "mcp__github__create_issue"
    assert canonical_tool_name("mcp__already__claude") == "mcp__already__claude"
    assert canonical_tool_name("mcp_") == "mcp_" and canonical_tool_name("mcp_only") == "mcp_only"
    translated = gemini_input(
        gemini_event("AfterTool", tool_name="mcp_git_hub_create_issue", tool_input={}, mcp_context=context)
    )
    assert translated["tool_name"] == "mcp__git_hub__create_issue" and translated["mcp_context"] == context
    assert DIALECTS["gemini"].canonical_tool("run_shell_command") == "Bash"


def test_event_specific_fields() -> None:
    stop = gemini_input(gemini_event("AfterAgent", prompt="p", prompt_response="all done", stop_hook_active=True))
    assert (stop["last_assistant_message"], stop["prompt_response"], stop["stop_hook_active"]) == (
        "all done",
        "all done",
        True,
    )
    post = gemini_input(
        gemini_event(
            "AfterTool",
            tool_name="run_shell_command",
            tool_input={"command": "false"},
            tool_response={
                "llmContent": "x",
                "returnDisplay": "",
                "error": {"type": "execution_failed", "message": "exit 1"},
            },
        )
    )
    assert (post["hook_event_name"], post["error"], post[AGENT_EVENT_NAME]) == (
        "PostToolUseFailure",
        "exit 1",
        "AfterTool",
    )
    ok = gemini_input(gemini_event("AfterTool", tool_name="glob", tool_input={}, tool_response={"llmContent": "x"}))
    assert ok["hook_event_name"] == "PostToolUse" and "error" not in ok
    note = gemini_input(gemini_event("Notification", notification_type="ToolPermission", message="m", details={}))
    assert (note["notification_type"], note["agent_notification_type"]) == ("permission_prompt", "ToolPermission")
    prompt = gemini_input(gemini_event("BeforeAgent", prompt="hello"))
    assert prompt["prompt"] == "hello" and AGENT_TOOL_NAME not in prompt


def shell_result(content: str) -> dict[str, Any]:
    """An AfterTool of ``run_shell_command`` as Gemini CLI sends it (its result wrapped as untrusted)."""
    response = {"llmContent": f"<untrusted_context>\n{content}\n</untrusted_context>", "returnDisplay": ""}
    return gemini_event("AfterTool", tool_name="run_shell_command", tool_input={"command": "x"}, tool_response=response)


@pytest.mark.parametrize(
    ("content", "event", "error"),
    [
        ("Output: ls: /no: No such file\nExit Code: 2\nProcess Group PGID: 41", "PostToolUseFailure", "Exit Code: 2"),
        (
            "Output: (empty)\nExit Code: 1\nSignal: 15\nBackground PIDs: 7\nProcess Group PGID: 9",
            "PostToolUseFailure",
            "Exit Code: 1",
        ),
        ("Output: fine\nProcess Group PGID: 41", "PostToolUse", None),
        # What a command prints cannot hide a failure, nor fake a success after the tool's own lines.
        ("Output: Exit Code: 0\nExit Code: 3\nProcess Group PGID: 5", "PostToolUseFailure", "Exit Code: 3"),
        ("Output: Exit Code: 7\nmore output\nProcess Group PGID: 5", "PostToolUse", None),
    ],
)
def test_a_shell_command_that_exits_non_zero_is_a_failure(content: str, event: str, error: str | None) -> None:
    translated = gemini_input(shell_result(content))
    assert (translated["hook_event_name"], translated.get("error")) == (event, error)


def test_an_exit_code_line_means_nothing_on_other_tools() -> None:
    read = gemini_event("AfterTool", tool_name="read_file", tool_input={}, tool_response={"llmContent": "Exit Code: 2"})
    assert gemini_input(read)["hook_event_name"] == "PostToolUse"


def test_through_from_dialect() -> None:
    raw = shell("ls")
    translated, body = from_dialect("gemini", raw, orjson.dumps(raw))
    assert json.loads(body) == translated and translated["tool_name"] == "Bash"
    assert from_dialect("GEMINI", raw, orjson.dumps(raw))[0] == translated


# -- output ---------------------------------------------------------------------------------


def pre(decision: str | None, **more: Any) -> dict[str, Any]:
    specific: dict[str, Any] = {"hookEventName": "PreToolUse", **more}
    if decision:
        specific |= {"permissionDecision": decision, "permissionDecisionReason": f"because {decision}"}
    return {"hookSpecificOutput": specific}


def test_pretooluse_decisions() -> None:
    agent = shell("git push --force")
    assert gemini_reads(gemini_output("PreToolUse", pre("deny"), agent)) == {
        "decision": "deny",
        "reason": "because deny",
    }
    assert gemini_output("PreToolUse", pre("ask"), agent) == {"decision": "ask", "reason": "because ask"}
    assert gemini_output("PreToolUse", pre("allow"), agent) == {"decision": "allow", "reason": "because allow"}
    assert gemini_output("PreToolUse", pre("defer"), agent) == {}
    bare = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny"}}
    assert gemini_output("PreToolUse", bare, agent) == {"decision": "deny", "reason": "Denied by hookbus policy"}
    legacy = gemini_output("PreToolUse", {"decision": "block", "reason": "old style"}, agent)
    assert legacy == {"decision": "deny", "reason": "old style"}
    context_only = gemini_output("PreToolUse", pre(None, additionalContext="dropped"), agent)
    assert context_only == {}  # BeforeTool has no context field: nothing Gemini would misread


def test_rewrites_send_only_changed_parameters_under_gemini_names() -> None:
    agent = shell("rm -rf build", is_background=False)
    claude_input = gemini_input(agent)["tool_input"]
    rewritten = {**claude_input, "command": "rm -rf ./build", "run_in_background": True, "timeout": 5}
    reply = gemini_reads(gemini_output("PreToolUse", pre("allow", updatedInput=rewritten), agent))
    # timeout is a Claude Code Bash parameter run_shell_command does not take: it would fail validation
    assert reply["hookSpecificOutput"] == {"tool_input": {"command": "rm -rf ./build", "is_background": True}}
    unchanged = gemini_output("PreToolUse", pre(None, updatedInput=claude_input), agent)
    assert unchanged == {}
    denied = gemini_output("PreToolUse", pre("deny", updatedInput=rewritten), agent)
    assert "hookSpecificOutput" not in denied
    write = gemini_event("BeforeTool", tool_name="write_file", tool_input={"file_path": "a.txt", "content": "x"})
    moved = {"file_path": "/work/proj/b.txt", "content": "x"}
    assert gemini_output("PreToolUse", pre(None, updatedInput=moved), write) == {
        "hookSpecificOutput": {"tool_input": {"file_path": "/work/proj/b.txt"}}
    }
    same_path = {"file_path": "/work/proj/a.txt", "content": "y"}  # the absolute form of what the model sent
    assert gemini_output("PreToolUse", pre(None, updatedInput=same_path), write) == {
        "hookSpecificOutput": {"tool_input": {"content": "y"}}
    }
    mcp = gemini_event("BeforeTool", tool_name="mcp_s_t", tool_input={"a": 1})
    assert gemini_output("PreToolUse", pre(None, updatedInput={"a": 1, "b": 2}), mcp) == {
        "hookSpecificOutput": {"tool_input": {"b": 2}}
    }


def test_other_event_outputs() -> None:
    block = {"decision": "block", "reason": "r", "hookSpecificOutput": {"hookEventName": "X", "additionalContext": "c"}}
    post = gemini_reads(gemini_output("PostToolUse", block, {}))
    assert post == {"decision": "deny", "reason": "r"}
    context = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "note this"}}
    assert gemini_output("PostToolUse", context, {}) == {"hookSpecificOutput": {"additionalContext": "note this"}}
    assert gemini_output("PostToolUseFailure", context, {}) == {
        "hookSpecificOutput": {"additionalContext": "note this"}
    }
    prompt = gemini_output("UserPromptSubmit", {"decision": "block", "reason": "no secrets", "systemMessage": "s"}, {})
    assert prompt == {"decision": "deny", "reason": "no secrets", "systemMessage": "s"}
    assert gemini_output("UserPromptSubmit", {**context, "suppressOutput": True}, {}) == {
        "suppressOutput": True,
        "hookSpecificOutput": {"additionalContext": "note this"},
    }
    assert gemini_output("Stop", {"decision": "block", "reason": "run the tests"}, {}) == {
        "decision": "deny",
        "reason": "run the tests",
    }
    stop_context = {"hookSpecificOutput": {"hookEventName": "Stop", "additionalContext": "go on"}}
    assert gemini_output("Stop", stop_context, {}) == {"decision": "deny", "reason": "go on"}
    start = gemini_output(
        "SessionStart",
        {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "fleet", "watchPaths": []}},
        {},
    )
    assert start == {"hookSpecificOutput": {"additionalContext": "fleet"}}
    assert gemini_output("PreCompact", {"decision": "block", "reason": "no", "systemMessage": "m"}, {}) == {
        "systemMessage": "m"
    }
    halt = gemini_output("PreToolUse", {"continue": False, "stopReason": "halt", "terminalSequence": "\x07"}, {})
    assert halt == {"continue": False, "stopReason": "halt"}
    assert gemini_output("SessionEnd", {"continue": False}, {}) == {}
    assert to_dialect("gemini", "Stop", {}) == {} and to_dialect("claude", "Stop", pre("deny")) == pre("deny")


@pytest.mark.parametrize(
    "event",
    [
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "UserPromptSubmit",
        "SessionStart",
        "Stop",
        "SessionEnd",
        "PreCompact",
        "Notification",
        "BeforeModel",
    ],
)
@pytest.mark.parametrize("decision", ["deny", "ask", "allow", "defer"])
def test_no_reply_holds_a_field_gemini_does_not_read(event: str, decision: str) -> None:
    everything = {
        "continue": True,
        "decision": "block",
        "reason": "r",
        "systemMessage": "m",
        "suppressOutput": False,
        "terminalSequence": "\x07",
        "hookSpecificOutput": {
            "hookEventName": event,
            "permissionDecision": decision,
            "permissionDecisionReason": "pr",
            "updatedInput": {"command": "x", "timeout": 1},
            "additionalContext": "c",
            "updatedToolOutput": "x",
            "watchPaths": [],
            "initialUserMessage": "u",
            "sessionTitle": "t",
        },
    }
    reply = gemini_reads(gemini_output(event, everything, shell("ls")))
    text = json.dumps(reply)
    for claude_only in ("permissionDecision", "hookEventName", "updatedInput", "terminalSequence", "watchPaths"):
        assert claude_only not in text


def test_capabilities_are_declared_and_honest() -> None:
    dialect = DIALECTS["gemini"]
    assert set(dialect.capabilities) == set(CAPABILITIES)
    assert dialect.transport == "command" and dialect.title == "Gemini CLI"
    assert dialect.capabilities["deny"].support is Support.YES
    assert dialect.capabilities["stop_block"].support is Support.YES
    for name in ("ask", "allow", "rewrite_input", "add_context"):
        assert dialect.capabilities[name].support is Support.PARTIAL and dialect.capabilities[name].note


# -- live: Gemini-shaped payloads through the gateway ----------------------------------------

LIVE_POLICY = """
hookbus: {deadlineSeconds: 5.0}
hooks:
  PreToolUse:
    - matcher: "Bash|Write"
      hooks:
        - {type: rule, deny: ["Bash(git push --force *)", "Write(//etc/**)"], reason: "central rule"}
"""


async def test_gemini_through_a_live_gateway(platform: Callable[..., Any], bus: BusProbe) -> None:
    push = shell("git push --force origin main")
    etc = gemini_event(
        "BeforeTool", tool_name="write_file", tool_input={"file_path": "hosts", "content": "x"}, cwd="/etc"
    )
    fine = shell("git status")
    async with platform(LIVE_POLICY) as p:
        denied = await p.client.post(f"{p.url}/v1/hooks?dialect=gemini", json=push)
        written = await p.post(etc, headers={"X-Hookbus-Dialect": "gemini"})
        allowed = await p.post(fine, headers={"X-Hookbus-Dialect": "gemini"})
        prompt = await p.post(gemini_event("BeforeAgent", prompt="hi"), headers={"X-Hookbus-Dialect": "gemini"})
    assert denied.status_code == 200 and denied.headers["X-Hookbus-Outcome"] == "decided"
    reply = gemini_reads(denied.json())
    assert reply["decision"] == "deny" and "central rule" in reply["reason"]
    assert gemini_reads(written.json())["decision"] == "deny"
    assert allowed.json() == {} and prompt.json() == {}
    record = await async_wait_for(lambda: bus.record(denied.headers["X-Hookbus-Event-Id"]), timeout_s=5)
    logged = json.loads(record.payload)
    assert (record.tool_name, logged[AGENT_TOOL_NAME], logged[AGENT_EVENT_NAME]) == (
        "Bash",
        "run_shell_command",
        "BeforeTool",
    )
    assert record.event == "PreToolUse" and record.decision == "deny"
    if hasattr(record, "agent"):
        assert record.agent == "gemini"


def test_a_home_path_is_below_the_agents_home_never_the_gateways(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/gateway")
    call = {"tool_name": "read_file", "tool_input": {"file_path": "~/.ssh/id_rsa"}}
    out = gemini_input(gemini_event("BeforeTool", transcript_path="/home/dev/.gemini/tmp/x/chats/s.json", **call))
    assert out["tool_input"]["file_path"] == "/home/dev/.ssh/id_rsa"
    unknown = gemini_input({**gemini_event("BeforeTool", **call), "transcript_path": None})
    assert unknown["tool_input"]["file_path"] == "~/.ssh/id_rsa"  # the rules judge it below every home
    deny = compile_lists(("Read(~/.ssh/**)",), (), ())
    assert first_verdict(deny, out) == ("deny", "Read(~/.ssh/**)")
    assert first_verdict(deny, unknown) == ("deny", "Read(~/.ssh/**)")
