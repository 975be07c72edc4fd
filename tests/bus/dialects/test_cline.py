"""Cline's dialect: both directions as units, then Cline-shaped traffic through a live gateway.

The inputs are the shapes the ``cline`` CLI 3.0.65 (``@cline/core`` 0.0.86) sends to file
hooks, captured from the real CLI (``tests/agents/test_cline.py`` runs it). ``cline_reads``
restates what Cline reads from a hook's stdout (``cancel``, ``errorMessage``, ``context`` /
``contextModification``, ``overrideInput``; ``review`` is parsed and ignored): every reply is
checked through it, so a Claude Code field Cline ignores (``hookSpecificOutput``,
``decision``) can never be what carries a decision, and ``errorMessage`` never travels
without ``cancel`` (alone, Cline hands it to the model as context).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from bus.dialects import DIALECTS, from_dialect
from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, CAPABILITIES, Support
from bus.dialects.cline import CLINE_EVENTS, canonical_tool_call, cline_input, cline_output, denied_command
from tests.conftest import BusProbe, async_wait_for

CLINE_FIELDS = {"cancel", "errorMessage", "context", "contextModification", "overrideInput"}
WS = "/home/dev/project"


def cline_reads(reply: dict[str, Any]) -> dict[str, Any]:
    """The reply as Cline reads it; AssertionError for anything it would not act on."""
    assert set(reply) <= CLINE_FIELDS, set(reply) - CLINE_FIELDS
    if "errorMessage" in reply:
        assert reply.get("cancel") is True, "without cancel, Cline gives errorMessage to the model as context"
    if reply.get("cancel") is True:
        assert reply.get("errorMessage"), "a cancel without a reason leaves only 'aborted' in Cline's log"
    return reply


def cline_event(hook: str, **fields: Any) -> dict[str, Any]:
    """A hook input as the cline CLI 3.0.65 sends it."""
    return {
        "clineVersion": "",
        "timestamp": "2026-12-02T01:27:46.309Z",
        "taskId": "conv_1796174865645_689zmu2",
        "sessionContext": {"rootSessionId": "1796174865199_leie3"},
        "workspaceRoots": [WS],
        "workspaceInfo": {"rootPath": WS, "hint": "project"},
        "userId": "unknown",
        "agent_id": "agent_1796174865523_80e0z5",
        "parent_agent_id": None,
        "hookName": hook,
        **fields,
    }


def stringly(tool_input: dict[str, Any]) -> dict[str, str]:
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in tool_input.items()}


def tool_call(name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return cline_event(
        "tool_call",
        iteration=1,
        tool_call={"id": "toolu_1", "name": name, "input": tool_input},
        preToolUse={"toolName": name, "parameters": stringly(tool_input)},
    )


def shell(*commands: str) -> dict[str, Any]:
    return tool_call("run_commands", {"commands": list(commands)})


# -- input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("hook", "canonical"), sorted(CLINE_EVENTS.items()))
def test_events_become_claude_events_with_a_session_and_cwd(hook: str, canonical: str) -> None:
    out = cline_input(cline_event(hook))
    assert (out["hook_event_name"], out[AGENT_EVENT_NAME]) == (canonical, hook)
    assert (out["session_id"], out["cwd"]) == ("conv_1796174865645_689zmu2", WS)
    assert out["timestamp"] == "2026-12-02T01:27:46.309Z" and out["sessionContext"]["rootSessionId"]


def test_a_file_name_as_the_event_is_read_too_and_cwd_falls_back_to_workspace_info() -> None:
    out = cline_input({**cline_event("PreToolUse"), "workspaceRoots": []})
    assert (out["hook_event_name"], out[AGENT_EVENT_NAME], out["cwd"]) == ("PreToolUse", "tool_call", WS)


@pytest.mark.parametrize(
    ("name", "tool_input", "canonical", "expected"),
    [
        ("run_commands", {"commands": ["git status", "git push --force x"]}, "Bash",
         {"command": "git status\ngit push --force x"}),
        ("run_commands", {"commands": [{"command": "rm", "args": ["-rf", "a b"]}]}, "Bash",
         {"command": "rm -rf 'a b'"}),
        ("execute_command", {"command": "ls", "requires_approval": "false"}, "Bash", {"command": "ls"}),
        ("read_files", {"files": [{"path": "a.txt"}, {"path": "/etc/shadow", "start_line": 1}]}, "Read",
         {"file_path": f"{WS}/a.txt", "file_paths": [f"{WS}/a.txt", "/etc/shadow"]}),
        ("read_file", {"path": "src/x.py"}, "Read", {"file_path": f"{WS}/src/x.py"}),
        ("editor", {"path": "/etc/hosts", "new_text": "x"}, "Write", {"file_path": "/etc/hosts", "content": "x"}),
        ("editor", {"path": "a.py", "old_text": "1", "new_text": "2"}, "Edit",
         {"file_path": f"{WS}/a.py", "old_string": "1", "new_string": "2"}),
        ("editor", {"path": "a.py", "new_text": "2", "insert_line": 3}, "Edit", {"old_string": "", "new_string": "2"}),
        ("write_to_file", {"path": "../out.txt", "content": "c"}, "Write", {"file_path": "/home/dev/out.txt"}),
        ("replace_in_file", {"path": "a.py", "diff": "<<<"}, "Edit", {"file_path": f"{WS}/a.py", "diff": "<<<"}),
        ("apply_patch", {"input": "*** Begin Patch\n*** Add File: /etc/cron.d/x\n+job\n*** End Patch"}, "Write",
         {"file_path": "/etc/cron.d/x", "content": "job\n"}),
        ("search_codebase", {"queries": ["TODO", "FIXME"]}, "Grep", {"pattern": "TODO"}),
        ("search_files", {"path": "src", "regex": "x+", "file_pattern": "*.py"}, "Grep",
         {"pattern": "x+", "glob": "*.py", "path": f"{WS}/src"}),
        ("list_files", {"path": "."}, "LS", {"path": WS}),
        ("fetch_web_content", {"requests": [{"url": "https://a.example", "prompt": "sum"}]}, "WebFetch",
         {"url": "https://a.example", "prompt": "sum"}),
        ("web_search", {"query": "q"}, "WebSearch", {"query": "q"}),
        ("ask_question", {"question": "ok?", "options": ["y"]}, "AskUserQuestion",
         {"questions": [{"question": "ok?"}]}),
        ("spawn_agent", {"task": "t"}, "Task", {"task": "t"}),
        ("github__create_issue", {"title": "t"}, "mcp__github__create_issue", {"title": "t"}),
        ("use_mcp_tool", {"server_name": "db", "tool_name": "drop", "arguments": '{"table": "users"}'},
         "mcp__db__drop", {"table": "users"}),
        ("submit_and_exit", {"result": "r"}, "submit_and_exit", {"result": "r"}),
    ],
)  # fmt: skip
def test_tools_and_their_inputs_become_claude_tools(
    name: str, tool_input: dict[str, Any], canonical: str, expected: dict[str, Any]
) -> None:
    out = cline_input(tool_call(name, tool_input))
    assert (out["tool_name"], out[AGENT_TOOL_NAME], out["tool_use_id"]) == (canonical, name, "toolu_1")
    assert expected.items() <= out["tool_input"].items(), out["tool_input"]
    if name != "use_mcp_tool":  # its MCP name is in its input
        assert DIALECTS["cline"].canonical_tool(name) in (canonical, "Edit")  # editor, apply_patch: Edit by name


def test_the_stringly_parameters_are_read_when_there_is_no_tool_call_object() -> None:
    raw = shell("touch a")
    del raw["tool_call"]
    out = cline_input(raw)
    assert (out["tool_name"], out["tool_input"]["command"], out["tool_input"]["commands"]) == (
        "Bash",
        "touch a",
        ["touch a"],
    )


def test_event_specific_fields() -> None:
    result = cline_event(
        "tool_result",
        tool_result={
            "id": "toolu_1",
            "name": "run_commands",
            "input": {"commands": ["ls"]},
            "output": [{"success": True}],
        },
        postToolUse={"toolName": "run_commands", "parameters": {"commands": '["ls"]'}, "result": "[]", "success": True},
    )
    out = cline_input(result)
    assert (out["hook_event_name"], out["tool_name"], out["tool_response"]) == (
        "PostToolUse",
        "Bash",
        [{"success": True}],
    )
    failed = cline_input({**result, "tool_result": {**result["tool_result"], "error": "exit 1"}})
    assert (failed["hook_event_name"], failed["error"]) == ("PostToolUseFailure", "exit 1")
    prompt = cline_input(cline_event("prompt_submit", userPromptSubmit={"prompt": "hi", "attachments": []}))
    assert prompt["prompt"] == "hi" and AGENT_TOOL_NAME not in prompt
    start, resume = cline_input(cline_event("agent_start")), cline_input(cline_event("agent_resume"))
    assert (start["source"], resume["source"]) == ("startup", "resume")
    end = cline_input(cline_event("agent_end", turn={"outputText": "All done.", "status": "completed"}))
    assert (end["last_assistant_message"], end["stop_hook_active"]) == ("All done.", False)
    error = cline_input(cline_event("agent_error", error={"name": "Error", "message": "boom"}))
    assert (error["hook_event_name"], error["error"]) == ("StopFailure", "boom")


def test_through_from_dialect() -> None:
    raw = shell("ls")
    translated, body = from_dialect("cline", raw, orjson.dumps(raw))
    assert json.loads(body) == translated and translated["tool_name"] == "Bash"


# -- output ---------------------------------------------------------------------------------


def pre(decision: str | None, **more: Any) -> dict[str, Any]:
    specific: dict[str, Any] = {"hookEventName": "PreToolUse", **more}
    if decision:
        specific |= {"permissionDecision": decision, "permissionDecisionReason": f"because {decision}"}
    return {"hookSpecificOutput": specific}


@pytest.mark.system
def test_a_denied_shell_call_is_replaced_by_one_that_says_why_and_fails() -> None:
    reply = cline_reads(cline_output("PreToolUse", pre("deny"), shell("git push --force")))
    assert "cancel" not in reply and reply["context"] == "hookbus denied the call: because deny"
    [replacement] = reply["overrideInput"]["commands"]
    ran = subprocess.run(["bash", "-c", replacement], capture_output=True, text=True, check=False, timeout=10)
    assert (ran.returncode, ran.stdout, ran.stderr) == (1, "", "hookbus denied this command: because deny\n")
    legacy = cline_reads(cline_output("PreToolUse", pre("deny"), tool_call("execute_command", {"command": "x"})))
    assert legacy["overrideInput"]["command"] == denied_command("because deny")


@pytest.mark.system
def test_a_reason_cannot_break_out_of_the_replacement_command() -> None:
    evil = "it's $(touch pwned) `id`; exit 0"
    ran = subprocess.run(["bash", "-c", denied_command(evil)], capture_output=True, text=True, check=False, timeout=10)
    assert (ran.returncode, ran.stderr) == (1, f"hookbus denied this command: {evil}\n")
    assert shlex.split(denied_command(evil))[2] == f"hookbus denied this command: {evil}"


def test_other_denials_ask_and_continue_false_cancel_the_task_with_the_reason() -> None:
    write = tool_call("editor", {"path": "/etc/hosts", "new_text": "x"})
    assert cline_reads(cline_output("PreToolUse", pre("deny"), write)) == {
        "cancel": True,
        "errorMessage": "hookbus denied editor: because deny",
    }
    asked = cline_reads(cline_output("PreToolUse", pre("ask"), write))
    assert asked["cancel"] is True and "Cline cannot do: denied instead" in asked["errorMessage"]
    asked_shell = cline_reads(cline_output("PreToolUse", pre("ask"), shell("ls")))
    assert "Cline cannot do" in asked_shell["context"] and "overrideInput" in asked_shell
    legacy = cline_reads(cline_output("PreToolUse", {"decision": "block", "reason": "old style"}, write))
    assert legacy["errorMessage"].endswith("old style")
    for event in ("PreToolUse", "PostToolUse"):
        stop = cline_reads(cline_output(event, {"continue": False, "stopReason": "enough"}, write))
        assert stop == {"cancel": True, "errorMessage": "enough"}


def test_allow_and_defer_send_nothing_and_context_is_kept() -> None:
    assert cline_output("PreToolUse", pre("allow"), shell("ls")) == {}
    assert cline_output("PreToolUse", pre("defer"), shell("ls")) == {}
    assert cline_output("PreToolUse", {}, shell("ls")) == {}
    added = cline_reads(cline_output("PreToolUse", pre("allow", additionalContext="mind the tests"), shell("ls")))
    assert added == {"context": "mind the tests"}


def test_rewrites_become_override_input_under_cline_names() -> None:
    updated = {"command": "touch rewritten.txt", "commands": ["touch rewrite-me.txt"]}
    reply = cline_reads(cline_output("PreToolUse", pre("allow", updatedInput=updated), shell("touch rewrite-me.txt")))
    assert reply == {"overrideInput": {"commands": ["touch rewritten.txt"]}}
    unchanged = cline_output("PreToolUse", pre("allow", updatedInput={"command": "ls"}), shell("ls"))
    assert unchanged == {"overrideInput": {"commands": ["ls"]}}
    edit = tool_call("editor", {"path": "/w/a.py", "old_text": "1", "new_text": "2"})
    moved = cline_output("PreToolUse", pre("allow", updatedInput={"file_path": "/w/b.py", "old_string": "1"}), edit)
    assert moved == {"overrideInput": {"path": "/w/b.py", "old_text": "1", "new_text": "2"}}
    read = tool_call("read_files", {"files": [{"path": "/a", "end_line": 3}, {"path": "/b"}]})
    reread = cline_output("PreToolUse", pre(None, updatedInput={"file_path": "/c"}), read)
    assert reread == {"overrideInput": {"files": [{"path": "/c", "end_line": 3}, {"path": "/b"}]}}
    mcp = tool_call("db__query", {"sql": "drop table"})
    refused = cline_reads(cline_output("PreToolUse", pre("allow", updatedInput={"sql": "select 1"}), mcp))
    assert refused["cancel"] is True and "cannot do for Cline's db__query" in refused["errorMessage"]


def test_post_tool_use_block_and_context_reach_the_model_as_context() -> None:
    block = {"decision": "block", "reason": "that output is secret", "hookSpecificOutput": {"additionalContext": "c"}}
    assert cline_output("PostToolUse", block, {}) == {"context": "that output is secret\nc"}
    assert cline_output("PostToolUseFailure", pre(None, additionalContext="retry"), {}) == {"context": "retry"}


@pytest.mark.parametrize(
    "event", ["Stop", "UserPromptSubmit", "SessionStart", "SessionEnd", "StopFailure", "TaskCancel"]
)
def test_events_cline_runs_detached_get_nothing(event: str) -> None:
    outputs: list[dict[str, Any]] = [
        {"decision": "block", "reason": "keep going"},
        {"hookSpecificOutput": {"hookEventName": event, "additionalContext": "x"}},
        {"continue": False, "stopReason": "stop"},
        {"systemMessage": "hello"},
    ]
    assert all(cline_output(event, output, {}) == {} for output in outputs)


@pytest.mark.parametrize("event", ["PreToolUse", "PostToolUse", "PostToolUseFailure"])
@pytest.mark.parametrize("decision", ["deny", "ask", "allow", "defer", None])
@pytest.mark.parametrize("tool", ["run_commands", "execute_command", "editor", "read_files", "apply_patch", "x__y"])
def test_no_reply_holds_a_field_cline_does_not_act_on(event: str, decision: str | None, tool: str) -> None:
    output = pre(decision, additionalContext="ctx", updatedInput={"command": "ls", "file_path": "/x"})
    output |= {"systemMessage": "s", "suppressOutput": True, "decision": "block", "reason": "r"}
    cline_reads(cline_output(event, output, tool_call(tool, {"commands": ["ls"], "path": "/a"})))


def test_capabilities_are_declared_and_honest() -> None:
    dialect = DIALECTS["cline"]
    assert set(dialect.capabilities) == set(CAPABILITIES)
    assert (dialect.transport, dialect.title, dialect.name) == ("command", "Cline", "cline")
    assert dialect.verified.startswith("real CLI: cline 3.0.65")
    supports = {name: capability.support for name, capability in dialect.capabilities.items()}
    assert supports == {
        "deny": Support.PARTIAL,
        "ask": Support.NO,
        "allow": Support.NO,
        "rewrite_input": Support.PARTIAL,
        "stop_block": Support.NO,
        "add_context": Support.PARTIAL,
        "fail_closed": Support.PARTIAL,
    }
    assert all(capability.note for capability in dialect.capabilities.values())


def test_the_tool_name_alone_maps_for_matchers() -> None:
    assert canonical_tool_call("run_commands", {}, None)[0] == "Bash"
    assert canonical_tool_call("fs__write", {}, None)[0] == "mcp__fs__write"
    assert canonical_tool_call("mcp__fs__write", {}, None)[0] == "mcp__fs__write"


# -- live: Cline-shaped payloads through the gateway ----------------------------------------

LIVE_POLICY = """
hookbus: {deadlineSeconds: 5.0}
hooks:
  PreToolUse:
    - matcher: "Bash|Write"
      hooks:
        - {type: rule, deny: ["Bash(git push --force *)", "Write(//etc/**)"], reason: "central rule"}
"""


async def test_cline_through_a_live_gateway(platform: Callable[..., Any], bus: BusProbe) -> None:
    push = shell("git status", "git push --force origin main")
    etc = tool_call("editor", {"path": "/etc/hosts", "new_text": "x"})
    fine = shell("git status")
    async with platform(LIVE_POLICY) as p:
        denied = await p.client.post(f"{p.url}/v1/hooks?dialect=cline", json=push)
        written = await p.post(etc, headers={"X-Hookbus-Dialect": "cline"})
        allowed = await p.post(fine, headers={"X-Hookbus-Dialect": "cline"})
        started = await p.post(cline_event("agent_start"), headers={"X-Hookbus-Dialect": "cline"})
    assert denied.status_code == 200 and denied.headers["X-Hookbus-Outcome"] == "decided"
    reply = cline_reads(denied.json())
    assert "central rule" in reply["context"] and "central rule" in reply["overrideInput"]["commands"][0]
    assert cline_reads(written.json())["cancel"] is True
    assert allowed.json() == {} and started.status_code == 200 and started.json() == {}
    record = await async_wait_for(lambda: bus.record(denied.headers["X-Hookbus-Event-Id"]), timeout_s=5)
    logged = json.loads(record.payload)
    assert (record.tool_name, logged[AGENT_TOOL_NAME], logged[AGENT_EVENT_NAME]) == (
        "Bash",
        "run_commands",
        "tool_call",
    )
    assert record.event == "PreToolUse" and record.decision == "deny"
    assert logged["session_id"] == "conv_1796174865645_689zmu2"
    if hasattr(record, "agent"):
        assert record.agent == "cline"
