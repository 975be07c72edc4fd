"""Codex CLI's dialect: its inputs in Claude Code's terms, and every reply checked as Codex reads it.

Each reply is validated against Codex's own output schema for the event (``tests/data/codex``,
from the pinned binary) and against the semantic rules Codex's output parser adds on top
(:func:`codex_rejects`, restated from the parser's error messages): a reply failing either is a
*failed* hook, and Codex then runs the tool.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bus.dialects import dialect_for, from_dialect, to_dialect
from bus.dialects.base import AGENT_TOOL_NAME, CAPABILITIES, Support
from bus.dialects.codex import ASK_SUFFIX, CodexCli, codex_input, codex_output, parse_patch
from bus.rules.permissions import parse_rule, rule_matches

SCHEMAS = Path(__file__).resolve().parents[2] / "data" / "codex"
SCHEMA_FILES = {
    "PreToolUse": "pre-tool-use",
    "PermissionRequest": "permission-request",
    "PostToolUse": "post-tool-use",
    "UserPromptSubmit": "user-prompt-submit",
    "Stop": "stop",
    "SubagentStop": "subagent-stop",
    "SessionStart": "session-start",
    "SubagentStart": "subagent-start",
    "PreCompact": "pre-compact",
    "PostCompact": "post-compact",
    "Interrupt": "interrupt",
}
CWD = "/work/repo"


def schema(event: str, kind: str = "output") -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / f"{SCHEMA_FILES[event]}.command.{kind}.schema.json").read_text())
    return loaded


def codex_rejects(event: str, reply: dict[str, Any]) -> str | None:
    """Why Codex would mark ``reply`` Failed on ``event`` (None when it accepts it)."""
    if event == "SessionEnd":
        return None if reply == {} else "SessionEnd reads no reply"
    errors = sorted(jsonschema.Draft7Validator(schema(event)).iter_errors(reply), key=str)
    if errors:
        return f"schema: {errors[0].message}"
    specific = reply.get("hookSpecificOutput") or {}
    if event == "PreToolUse":
        for key in ("suppressOutput", "stopReason"):
            if key in reply:
                return f"unsupported {key}"
        if reply.get("continue") is False:
            return "unsupported continue:false"
        if reply.get("decision") == "approve":
            return "unsupported decision:approve"
        if "reason" in reply and "decision" not in reply:
            return "reason without decision"
        decision = specific.get("permissionDecision")
        if decision == "ask":
            return "unsupported permissionDecision:ask"
        if decision == "allow" and "updatedInput" not in specific:
            return "unsupported permissionDecision:allow"
        if "updatedInput" in specific and decision != "allow":
            return "updatedInput without permissionDecision:allow"
        if "updatedInput" in specific and not isinstance(specific["updatedInput"].get("command"), str):
            return "updatedInput without string field `command`"
        if "permissionDecisionReason" in specific and decision is None:
            return "permissionDecisionReason without permissionDecision"
        if decision == "deny" and not str(specific.get("permissionDecisionReason") or "").strip():
            return "deny without a non-empty permissionDecisionReason"
    if event == "PermissionRequest":
        for key in ("suppressOutput", "stopReason"):
            if key in reply:
                return f"unsupported {key}"
        if reply.get("continue") is False:
            return "unsupported continue:false"
        request = specific.get("decision") or {}
        for key in ("updatedInput", "updatedPermissions"):
            if key in request:
                return f"unsupported {key}"
        if request.get("interrupt") is True:
            return "unsupported interrupt:true"
    if event == "PostToolUse" and "suppressOutput" in reply:
        return "unsupported suppressOutput"
    if "reason" in reply and reply.get("decision") != "block":
        return "reason without decision"
    if reply.get("decision") == "block" and not str(reply.get("reason") or "").strip():
        return "decision:block without a non-empty reason"
    return None


def pre(tool_name: str = "Bash", tool_input: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A PreToolUse input as Codex 0.171 sends it."""
    return {
        "session_id": "019a-thread",
        "turn_id": "019a-turn",
        "transcript_path": None,
        "cwd": CWD,
        "hook_event_name": "PreToolUse",
        "model": "gpt-5-codex",
        "permission_mode": "bypassPermissions",
        "tool_name": tool_name,
        "tool_input": {"command": "git push --force origin main"} if tool_input is None else tool_input,
        "tool_use_id": "call_1",
        **extra,
    }


def patch(*body: str) -> str:
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"]) + "\n"


def specific(event: str, **fields: Any) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event, **fields}}


# --- Input ------------------------------------------------------------------------------


def test_the_sample_inputs_are_codex_shaped() -> None:
    errors = list(jsonschema.Draft7Validator(schema("PreToolUse", "input")).iter_errors(pre()))
    assert errors == []


def test_bash_keeps_its_name_and_input() -> None:
    out = codex_input(pre(future_field=1))
    assert out["tool_name"] == "Bash"
    assert out["tool_input"] == {"command": "git push --force origin main"}
    assert out[AGENT_TOOL_NAME] == "Bash"
    assert out["turn_id"] == "019a-turn" and out["future_field"] == 1
    assert "agent_event_name" not in out


@pytest.mark.parametrize(
    ("tool", "tool_input", "command"),
    [
        ("exec_command", {"cmd": "ls -la", "workdir": "/tmp"}, "ls -la"),
        ("shell", {"command": ["git", "push", "--force", "a b"]}, "git push --force 'a b'"),
        ("local_shell", {"command": "echo hi"}, "echo hi"),
    ],
)
def test_other_shell_names_are_bash(tool: str, tool_input: dict[str, Any], command: str) -> None:
    out = codex_input(pre(tool, tool_input))
    assert out["tool_name"] == "Bash" and out[AGENT_TOOL_NAME] == tool
    assert out["tool_input"]["command"] == command
    assert {k: v for k, v in out["tool_input"].items() if k != "command"} == {
        k: v for k, v in tool_input.items() if k != "command"
    }


def test_a_patch_that_adds_a_file_is_a_write() -> None:
    out = codex_input(pre("apply_patch", {"command": patch("*** Add File: notes/a.txt", "+one", "+two")}))
    assert out["tool_name"] == "Write" and out[AGENT_TOOL_NAME] == "apply_patch"
    assert out["tool_input"]["file_path"] == f"{CWD}/notes/a.txt"
    assert out["tool_input"]["content"] == "one\ntwo\n"
    assert out["tool_input"]["file_paths"] == [f"{CWD}/notes/a.txt"]
    assert out["tool_input"]["command"].startswith("*** Begin Patch")  # kept as sent


def test_a_patch_that_updates_a_file_is_an_edit() -> None:
    text = patch("*** Update File: /etc/hosts", "@@ localhost", " 127.0.0.1 localhost", "-::1 old", "+::1 new")
    out = codex_input(pre("apply_patch", {"command": text}))
    assert out["tool_name"] == "Edit"
    assert out["tool_input"]["file_path"] == "/etc/hosts"
    assert out["tool_input"]["old_string"] == "127.0.0.1 localhost\n::1 old"
    assert out["tool_input"]["new_string"] == "127.0.0.1 localhost\n::1 new"


def test_deletes_and_moves_are_writes_of_every_path() -> None:
    text = patch(
        "*** Update File: src/a.py", "*** Move to: src/b.py", "@@", "-x", "+y", "*** Delete File: ../secret.txt"
    )
    out = codex_input(pre("apply_patch", {"command": text}))
    assert out["tool_name"] == "Write"
    assert out["tool_input"]["file_paths"] == [f"{CWD}/src/a.py", f"{CWD}/src/b.py", "/work/secret.txt"]
    assert [f.kind for f in parse_patch(text)] == ["update", "delete"]


@pytest.mark.parametrize(
    ("rule", "kind", "expected"),
    [
        ("Write(/etc/**)", "deny", False),  # cwd-anchored: /work/repo/etc/**
        ("Write(//etc/**)", "deny", True),  # the second file is under /etc
        ("Edit(//etc/**)", "deny", True),  # Edit rules cover Write
        ("Edit(//etc/**)", "allow", False),  # an allow must cover every file
        ("Write(//**)", "allow", True),
        ("Edit(src/**)", "allow", False),
    ],
)
def test_a_rule_on_any_file_of_a_patch_applies(rule: str, kind: Any, expected: bool) -> None:
    text = patch("*** Add File: src/ok.py", "+print(1)", "*** Update File: /etc/passwd", "@@", "-a", "+b")
    out = codex_input(pre("apply_patch", {"command": text}))
    assert out["tool_input"]["file_path"] == f"{CWD}/src/ok.py"
    assert rule_matches(parse_rule(rule), out["tool_name"], out["tool_input"], CWD, kind=kind) is expected


def test_a_path_rule_still_judges_a_single_file_the_same() -> None:
    plain = {"file_path": "/etc/passwd"}
    assert rule_matches(parse_rule("Edit(//etc/**)"), "Edit", plain, CWD, kind="allow")
    assert not rule_matches(parse_rule("Edit(//etc/**)"), "Edit", {"file_paths": "not a list"}, CWD, kind="allow")


def test_mcp_and_unknown_tools_pass_through_and_view_image_is_read() -> None:
    mcp = codex_input(pre("mcp__github__create_issue", {"title": "x"}))
    assert mcp["tool_name"] == "mcp__github__create_issue" and mcp["tool_input"] == {"title": "x"}
    image = codex_input(pre("view_image", {"path": "shot.png"}))
    assert image["tool_name"] == "Read" and image["tool_input"]["file_path"] == f"{CWD}/shot.png"
    event = {"session_id": "s", "hook_event_name": "Stop", "stop_hook_active": False}
    assert codex_input(event) is event


def test_the_gateway_path_translates_the_body() -> None:
    source = pre("apply_patch", {"command": patch("*** Add File: x", "+1")})
    translated, body = from_dialect("codex", source, json.dumps(source).encode())
    assert translated["tool_name"] == "Write" and json.loads(body)["tool_name"] == "Write"
    assert dialect_for("CODEX").canonical_tool("apply_patch") == "Edit"


# --- Output -----------------------------------------------------------------------------

DENY = specific("PreToolUse", permissionDecision="deny", permissionDecisionReason="no force pushes")
PRE_TOOL_USE_OUTPUTS: list[dict[str, Any]] = [
    {},
    DENY,
    {**DENY, "systemMessage": "seen", "suppressOutput": True, "continue": True},
    specific("PreToolUse", permissionDecision="deny"),
    specific("PreToolUse", permissionDecision="ask", permissionDecisionReason="confirm the push"),
    specific("PreToolUse", permissionDecision="ask"),
    specific("PreToolUse", permissionDecision="allow"),
    specific("PreToolUse", permissionDecision="allow", permissionDecisionReason="fine"),
    specific("PreToolUse", permissionDecision="defer"),
    specific("PreToolUse", permissionDecision="allow", updatedInput={"command": "git push origin main"}),
    specific("PreToolUse", updatedInput={"command": "git push origin main"}),
    specific("PreToolUse", permissionDecision="deny", updatedInput={"command": "true"}, permissionDecisionReason="x"),
    specific("PreToolUse", permissionDecision="allow", updatedInput={"command": "git push --force origin main"}),
    specific("PreToolUse", permissionDecision="allow", updatedInput={"command": "ls", "timeout": 5}),
    specific("PreToolUse", additionalContext="remember the style guide"),
    {"decision": "block", "reason": "legacy block"},
    {"decision": "approve", "reason": "legacy approve"},
    {"continue": False, "stopReason": "budget exhausted"},
    {"continue": False},
    {"systemMessage": "", "hookSpecificOutput": None},
]


@pytest.mark.parametrize("output", PRE_TOOL_USE_OUTPUTS)
def test_every_pre_tool_use_reply_is_accepted(output: dict[str, Any]) -> None:
    reply = to_dialect("codex", "PreToolUse", output, pre())
    assert codex_rejects("PreToolUse", reply) is None, reply


def test_deny_keeps_the_reason_and_ask_becomes_a_deny_saying_so() -> None:
    assert codex_output("PreToolUse", DENY, pre()) == DENY
    asked = codex_output("PreToolUse", PRE_TOOL_USE_OUTPUTS[4], pre())["hookSpecificOutput"]
    assert asked["permissionDecision"] == "deny"
    assert asked["permissionDecisionReason"] == "confirm the push" + ASK_SUFFIX
    assert (
        "Codex cannot"
        in codex_output("PreToolUse", PRE_TOOL_USE_OUTPUTS[5], pre())["hookSpecificOutput"]["permissionDecisionReason"]
    )
    legacy = codex_output("PreToolUse", {"decision": "block", "reason": "legacy block"}, pre())
    assert legacy == specific("PreToolUse", permissionDecision="deny", permissionDecisionReason="legacy block")
    stopped = codex_output("PreToolUse", {"continue": False, "stopReason": "budget exhausted"}, pre())
    assert stopped["hookSpecificOutput"]["permissionDecisionReason"] == "budget exhausted"


@pytest.mark.parametrize("index", [6, 7, 8, 12, 16])
def test_an_allow_without_a_change_is_no_decision(index: int) -> None:
    assert codex_output("PreToolUse", PRE_TOOL_USE_OUTPUTS[index], pre()) == {}


def test_a_command_rewrite_is_allow_with_only_the_command() -> None:
    for output in (PRE_TOOL_USE_OUTPUTS[9], PRE_TOOL_USE_OUTPUTS[10]):
        assert codex_output("PreToolUse", output, pre()) == specific(
            "PreToolUse", permissionDecision="allow", updatedInput={"command": "git push origin main"}
        )


def test_a_rewrite_codex_cannot_carry_out_is_a_deny() -> None:
    other_field = codex_output("PreToolUse", PRE_TOOL_USE_OUTPUTS[13], pre())["hookSpecificOutput"]
    assert other_field["permissionDecision"] == "deny" and "timeout" in other_field["permissionDecisionReason"]
    source = pre("apply_patch", {"command": patch("*** Add File: a.txt", "+1")})
    canonical = codex_input(source)["tool_input"]
    moved = specific("PreToolUse", permissionDecision="allow", updatedInput={**canonical, "file_path": "/tmp/b"})
    reply = to_dialect("codex", "PreToolUse", moved, source)
    assert reply["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert codex_rejects("PreToolUse", reply) is None
    new_patch = patch("*** Add File: b.txt", "+2")
    rewritten = specific("PreToolUse", permissionDecision="allow", updatedInput={**canonical, "command": new_patch})
    assert to_dialect("codex", "PreToolUse", rewritten, source)["hookSpecificOutput"]["updatedInput"] == {
        "command": new_patch
    }


PERMISSION_OUTPUTS: list[dict[str, Any]] = [
    specific("PermissionRequest", decision={"behavior": "deny", "message": "no", "interrupt": True}),
    specific("PermissionRequest", decision={"behavior": "deny"}),
    specific("PermissionRequest", decision={"behavior": "allow", "updatedPermissions": [{"type": "addRules"}]}),
    specific("PermissionRequest", decision={"behavior": "allow", "updatedInput": {"command": "ls"}}),
    specific("PermissionRequest", decision={"behavior": "allow", "message": "ok"}),
    {"continue": False, "stopReason": "stop", "suppressOutput": True, "systemMessage": "m"},
]


@pytest.mark.parametrize("output", PERMISSION_OUTPUTS)
def test_every_permission_request_reply_is_accepted(output: dict[str, Any]) -> None:
    agent_input = {**pre(), "hook_event_name": "PermissionRequest"}
    reply = codex_output("PermissionRequest", output, agent_input)
    assert codex_rejects("PermissionRequest", reply) is None, reply


def test_permission_request_decisions() -> None:
    agent_input = {**pre(), "hook_event_name": "PermissionRequest"}
    behaviors = [
        codex_output("PermissionRequest", o, agent_input)["hookSpecificOutput"]["decision"]["behavior"]
        for o in PERMISSION_OUTPUTS
    ]
    assert behaviors == ["deny", "deny", "allow", "deny", "allow", "deny"]


OTHER_OUTPUTS: list[dict[str, Any]] = [
    {},
    {"decision": "block", "reason": "tests fail: keep going"},
    {"decision": "block"},
    {"continue": False, "stopReason": "quota", "systemMessage": "hi", "suppressOutput": True},
    {"hookSpecificOutput": {"hookEventName": "X", "additionalContext": "ctx", "updatedMCPToolOutput": {"a": 1}}},
    {"reason": "dangling", "decision": "approve"},
]


@pytest.mark.parametrize("event", [e for e in SCHEMA_FILES if e not in ("PreToolUse", "PermissionRequest")])
@pytest.mark.parametrize("output", OTHER_OUTPUTS)
def test_every_other_reply_is_accepted(event: str, output: dict[str, Any]) -> None:
    for tool in ("Bash", "mcp__srv__tool"):
        reply = codex_output(event, output, {"tool_name": tool})
        assert codex_rejects(event, reply) is None, (event, reply)


def test_stop_blocks_and_context_arrives_where_codex_takes_it() -> None:
    assert codex_output("Stop", OTHER_OUTPUTS[1], {}) == {"decision": "block", "reason": "tests fail: keep going"}
    assert codex_output("Stop", OTHER_OUTPUTS[4], {}) == {"decision": "block", "reason": "ctx"}
    assert codex_output("SessionStart", OTHER_OUTPUTS[4], {}) == specific("SessionStart", additionalContext="ctx")
    assert codex_output("PostToolUse", OTHER_OUTPUTS[4], {"tool_name": "Bash"}) == specific(
        "PostToolUse", additionalContext="ctx"
    )
    assert codex_output("PostToolUse", OTHER_OUTPUTS[4], {"tool_name": "mcp__s__t"}) == specific(
        "PostToolUse", additionalContext="ctx", updatedMCPToolOutput={"a": 1}
    )
    assert codex_output("PreCompact", OTHER_OUTPUTS[1], {}) == {}
    assert codex_output("UserPromptSubmit", OTHER_OUTPUTS[3], {}) == {
        "continue": False,
        "stopReason": "quota",
        "systemMessage": "hi",
    }
    assert codex_output("Interrupt", OTHER_OUTPUTS[3], {}) == {"systemMessage": "hi"}
    assert codex_output("SessionEnd", OTHER_OUTPUTS[3], {}) == {}
    assert codex_output("Notification", OTHER_OUTPUTS[1], {}) == {}


def test_suppress_output_and_nulls_are_never_sent() -> None:
    outputs = PRE_TOOL_USE_OUTPUTS + PERMISSION_OUTPUTS + OTHER_OUTPUTS
    for event in [*SCHEMA_FILES, "SessionEnd"]:
        for output in outputs:
            text = json.dumps(codex_output(event, output, pre()))
            assert "suppressOutput" not in text and "null" not in text and '"ask"' not in text


def test_capabilities_are_declared_completely_and_honestly() -> None:
    caps = CodexCli.capabilities
    assert set(caps) == set(CAPABILITIES)
    assert all(cap.note for cap in caps.values())
    assert caps["ask"].support is Support.NO
    assert caps["deny"].support is Support.YES and caps["stop_block"].support is Support.YES
    assert caps["allow"].support is Support.PARTIAL and caps["rewrite_input"].support is Support.PARTIAL
    assert CodexCli.transport == "command" and dialect_for("codex").name == "codex"


@pytest.mark.parametrize(
    "reply",
    [
        specific("PreToolUse", permissionDecision="ask"),
        specific("PreToolUse", permissionDecision="allow"),
        specific("PreToolUse", updatedInput={"command": "ls"}),
        {**DENY, "continue": False},
        {**DENY, "suppressOutput": True},
        {**DENY, "unknownField": 1},
        specific("PreToolUse", permissionDecision="deny"),
        {"decision": "approve"},
    ],
)
def test_the_checker_refuses_what_codex_refuses(reply: dict[str, Any]) -> None:
    assert codex_rejects("PreToolUse", reply) is not None


@pytest.mark.parametrize(
    ("command", "paths"),
    [
        ("apply_patch <<'EOF'\n" + patch("*** Add File: a.txt", "+hi").rstrip("\n") + "\nEOF", [f"{CWD}/a.txt"]),
        (
            'cd sub && apply_patch <<"PATCH"\n' + patch("*** Delete File: b").rstrip("\n") + "\nPATCH\n",
            [f"{CWD}/sub/b"],
        ),
        ("applypatch " + shlex.quote(patch("*** Add File: /etc/x", "+1")), ["/etc/x"]),
    ],
)
def test_a_shell_apply_patch_is_the_patch_tool(command: str, paths: list[str]) -> None:
    out = codex_input(pre("Bash", {"command": command}))
    assert out["tool_name"] == "Write" and out[AGENT_TOOL_NAME] == "Bash"
    assert out["tool_input"]["file_paths"] == paths and out["tool_input"]["command"] == command
    rewritten = specific("PreToolUse", updatedInput={**out["tool_input"], "command": "true"})
    assert codex_output("PreToolUse", rewritten, pre("Bash", {"command": command})) == specific(
        "PreToolUse", permissionDecision="allow", updatedInput={"command": "true"}
    )


@pytest.mark.parametrize(
    "command",
    [
        "echo apply_patch",
        "apply_patch <<EOF\nx\nEOF\nrm -rf /",
        "apply_patch <<EOF\n*** Begin Patch\n*** Add File: a\n+1\n*** End Patch\nEOF\nrm -rf /\nEOF",
        "ls; apply_patch x",
        "apply_patch <<'EOF' && rm -rf /\n*** Begin Patch\n*** Add File: a\n+1\n*** End Patch\nEOF",
        "cd /;rm${IFS}-rf${IFS}/ && apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: a\n+1\n*** End Patch\nEOF",
        "apply_patch <<EOF\n*** Begin Patch\n*** Add File: a\n+$(rm -rf /)\n*** End Patch\nEOF",
        "cd \"$(rm -rf /)\" && apply_patch '*** Begin Patch\n*** Add File: a\n+1\n*** End Patch'",
        'apply_patch "*** Begin Patch\n*** Add File: a\n+`rm -rf /`\n*** End Patch"',
    ],
)
def test_other_shell_commands_stay_bash(command: str) -> None:
    assert codex_input(pre("Bash", {"command": command}))["tool_name"] == "Bash"
