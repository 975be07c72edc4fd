"""Reading handler answers: exit codes, stdout/body parsing, the per-event output schema."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bus.errors import OutputSchemaError
from bus.hooks.output import PREVIEW_CHARS, TEXT_CAP, cap_text, check_output, result_from_body, result_from_exit
from bus.hooks.results import HandlerResult, Outcome
from tests.conftest import hso, pr

OK, BLOCK, ERROR = Outcome.OK, Outcome.BLOCK, Outcome.ERROR


def js(obj: Any) -> str:
    return json.dumps(obj)


DENY = hso("PreToolUse", permissionDecision="deny", permissionDecisionReason="no rm")
ALLOW = hso("PreToolUse", permissionDecision="allow", permissionDecisionReason="looks fine")
PR_ALLOW = hso("PermissionRequest", decision={"behavior": "allow"})
PATH = hso("WorktreeCreate", worktreePath="/tmp/wt/a")
NO_STDERR = "No stderr output"

# (id, event, exit code, stdout, stderr, outcome, output, text, reason)
EXIT_CASES: list[tuple[str, str, int, str, str, Outcome, Any, Any, Any]] = [
    ("0-json", "PreToolUse", 0, js(DENY), "", OK, DENY, None, None),
    ("0-json-padded", "PreToolUse", 0, "\n  " + js(DENY) + "  \n", "ignored", OK, DENY, None, None),
    ("0-json-pretty", "PreToolUse", 0, json.dumps(DENY, indent=2), "", OK, DENY, None, None),
    ("0-empty", "PreToolUse", 0, "", "", OK, None, None, None),
    ("0-blank", "Stop", 0, " \n\t\n", "warn", OK, None, None, None),
    ("0-text", "UserPromptSubmit", 0, "Repo uses pnpm.\n", "", OK, None, "Repo uses pnpm.", None),
    ("0-text-any-event", "PreToolUse", 0, "hello", "", OK, None, "hello", None),
    ("0-brace-not-closed", "SessionStart", 0, '{"a": 1} trailing', "", OK, None, '{"a": 1} trailing', None),
    ("0-banner-then-json", "SessionStart", 0, "Welcome!\n" + js(DENY), "", OK, None, "Welcome!\n" + js(DENY), None),
    ("0-array", "SessionStart", 0, "[1, 2]", "", OK, None, "[1, 2]", None),
    ("0-quoted-string", "SessionStart", 0, '"allow"', "", OK, None, '"allow"', None),
    ("0-jsonlines-plain", "SessionStart", 0, '{"a": 1}\n{"b": 2}', "", OK, None, '{"a": 1}\n{"b": 2}', None),
    ("1-json-honoured", "PreToolUse", 1, js(DENY), "oops", OK, DENY, None, None),
    (
        "1-text",
        "PreToolUse",
        1,
        "some text",
        "\n  boom happened \nsecond line",
        ERROR,
        None,
        None,
        "Failed with non-blocking status code: boom happened",
    ),
    ("1-empty-no-stderr", "Stop", 1, "", "", ERROR, None, None, f"Failed with non-blocking status code: {NO_STDERR}"),
    (
        "127",
        "PreToolUse",
        127,
        "",
        "sh: 1: ./gate.sh: not found\n",
        ERROR,
        None,
        None,
        "Failed with non-blocking status code: sh: 1: ./gate.sh: not found",
    ),
    ("signal", "PreToolUse", -9, "", "", ERROR, None, None, f"Failed with non-blocking status code: {NO_STDERR}"),
    ("2-stderr", "PreToolUse", 2, "", "  rm is forbidden \n", BLOCK, None, None, "rm is forbidden"),
    ("2-nothing", "PreToolUse", 2, "", "", BLOCK, None, None, NO_STDERR),
    ("2-text-stdout", "Stop", 2, "not json", "keep going", BLOCK, None, None, "keep going"),
    (
        "2-json-reason",
        "Stop",
        2,
        js({"decision": "block", "reason": "tests fail"}),
        "stderr",
        BLOCK,
        {"decision": "block", "reason": "tests fail"},
        None,
        "tests fail",
    ),
    ("2-json-deny-reason", "PreToolUse", 2, js(DENY), "stderr", BLOCK, DENY, None, "no rm"),
    ("2-allow-still-blocks", "PreToolUse", 2, js(ALLOW), "denied by exit", BLOCK, ALLOW, None, "denied by exit"),
    (
        "2-approve-reason-not-used",
        "PreToolUse",
        2,
        js({"decision": "approve", "reason": "ok"}),
        "err",
        BLOCK,
        {"decision": "approve", "reason": "ok"},
        None,
        "err",
    ),
    (
        "2-stop-reason",
        "Stop",
        2,
        js({"continue": False, "stopReason": "halt"}),
        "err",
        BLOCK,
        {"continue": False, "stopReason": "halt"},
        None,
        "halt",
    ),
    (
        "2-schema-invalid",
        "PreToolUse",
        2,
        js({"continue": "no", "reason": "x"}),
        "from stderr",
        BLOCK,
        None,
        None,
        "from stderr",
    ),
    ("2-bad-json", "PreToolUse", 2, "{oops}", "from stderr", BLOCK, None, None, "from stderr"),
    (
        "2-elicitation-drops-specific",
        "Elicitation",
        2,
        js({"reason": "r", "hookSpecificOutput": {"hookEventName": "Wrong", "action": "accept"}}),
        "e",
        BLOCK,
        {"reason": "r"},
        None,
        "r",
    ),
    ("2-permission-request-ignored", "PermissionRequest", 2, "", "nope", OK, None, None, None),
    ("2-permission-request-json", "PermissionRequest", 2, js(PR_ALLOW), "nope", OK, PR_ALLOW, None, None),
    ("2-permission-request-bad-json", "PermissionRequest", 2, "{bad}", "nope", OK, None, None, None),
    (
        "1-permission-request-text",
        "PermissionRequest",
        1,
        "x",
        "bad",
        ERROR,
        None,
        None,
        "Failed with non-blocking status code: bad",
    ),
    (
        "worktree-create-path",
        "WorktreeCreate",
        0,
        "\x1b[32mcreating\x1b[0m\n\x1b[1m/tmp/wt/a\x1b[0m\n\n",
        "",
        OK,
        PATH,
        None,
        None,
    ),
    ("worktree-create-json", "WorktreeCreate", 0, js(PATH), "", OK, PATH, None, None),
    ("worktree-create-empty", "WorktreeCreate", 0, "", "", OK, None, None, None),
    ("worktree-create-ansi-only", "WorktreeCreate", 0, "\x1b[0m\n", "", OK, None, None, None),
    ("worktree-create-1", "WorktreeCreate", 1, "/tmp/wt/a", "git failed\n", BLOCK, None, None, "git failed"),
    (
        "worktree-create-1-json",
        "WorktreeCreate",
        1,
        js(PATH),
        "",
        BLOCK,
        None,
        None,
        "WorktreeCreate hook failed with exit code 1",
    ),
    (
        "worktree-create-2",
        "WorktreeCreate",
        2,
        "",
        "",
        BLOCK,
        None,
        None,
        "WorktreeCreate hook failed with exit code 2",
    ),
    ("worktree-remove-0-json", "WorktreeRemove", 0, js({"systemMessage": "x"}), "", OK, None, None, None),
    ("worktree-remove-1", "WorktreeRemove", 1, "", "busy", BLOCK, None, None, "busy"),
]


@pytest.mark.parametrize(
    ("event", "code", "stdout", "stderr", "outcome", "output", "text", "reason"),
    [case[1:] for case in EXIT_CASES],
    ids=[case[0] for case in EXIT_CASES],
)
def test_result_from_exit(
    event: str, code: int, stdout: str, stderr: str, outcome: Outcome, output: Any, text: Any, reason: Any
) -> None:
    result = result_from_exit(event, code, stdout, stderr)
    assert (result.outcome, result.output, result.text, result.reason) == (outcome, output, text, reason)


# (id, event, exit code, stdout, fragment of the error reason)
FAILURE_CASES = [
    ("0-invalid-json", "UserPromptSubmit", 0, "{not: json}", "not valid JSON"),
    ("0-jsonlines-with-field", "UserPromptSubmit", 0, '{"a": 1}\n{"continue": false}', "several JSON values"),
    ("0-jsonlines-one-bad", "UserPromptSubmit", 0, '{"a": 1}\nplain\n{"b": 2}', "not valid JSON"),
    ("0-event-mismatch", "PreToolUse", 0, js(hso("PostToolUse", additionalContext="x")), "hookEventName"),
    ("0-event-missing", "PreToolUse", 0, js({"hookSpecificOutput": {"permissionDecision": "deny"}}), "hookEventName"),
    ("0-schema", "PreToolUse", 0, js(hso("PreToolUse", permissionDecision="maybe")), "permissionDecision"),
    ("1-invalid-json", "PreToolUse", 1, "{oops}", "not valid JSON"),
    ("1-schema", "Stop", 1, js({"decision": "stop"}), "schema validation"),
]


@pytest.mark.parametrize(
    ("event", "code", "stdout", "fragment"), [c[1:] for c in FAILURE_CASES], ids=[c[0] for c in FAILURE_CASES]
)
def test_json_failures_are_non_blocking_errors(event: str, code: int, stdout: str, fragment: str) -> None:
    result = result_from_exit(event, code, stdout, "stderr text")
    assert result.outcome is ERROR
    assert result.output is None and result.text is None
    assert fragment in (result.reason or "")


def test_plain_text_is_capped() -> None:
    result = result_from_exit("SessionStart", 0, "x" * (TEXT_CAP + 1), "")
    assert result.text is not None
    assert result.text.startswith("x" * PREVIEW_CHARS + "\n[hookbus: output truncated")
    assert len(result.text) < PREVIEW_CHARS + 200


# (id, event, body, plain_text_ok, outcome, output, text)
BODY_CASES: list[tuple[str, str, str, bool, Outcome, Any, Any]] = [
    ("http-empty", "PreToolUse", "", False, OK, None, None),
    ("http-json", "PreToolUse", js(DENY), False, OK, DENY, None),
    ("http-text", "UserPromptSubmit", "add this", False, ERROR, None, None),
    ("http-array", "PreToolUse", "[]", False, ERROR, None, None),
    ("http-jsonlines", "UserPromptSubmit", '{"a": 1}\n{"b": 2}', False, ERROR, None, None),
    ("http-bad-json", "PreToolUse", "{x}", False, ERROR, None, None),
    ("http-schema", "PreToolUse", js(hso("Stop")), False, ERROR, None, None),
    ("http-worktree", "WorktreeCreate", js(PATH), False, OK, PATH, None),
    ("http-worktree-text", "WorktreeCreate", "/tmp/wt/a", False, ERROR, None, None),
    ("mcp-text", "UserPromptSubmit", "add this\n", True, OK, None, "add this"),
    ("mcp-json", "PreToolUse", js(DENY), True, OK, DENY, None),
    ("mcp-bad-json", "PreToolUse", "{x}", True, ERROR, None, None),
    ("mcp-worktree-text", "WorktreeCreate", "log\n/tmp/wt/a\n", True, OK, PATH, None),
]


@pytest.mark.parametrize(
    ("event", "body", "plain", "outcome", "output", "text"), [c[1:] for c in BODY_CASES], ids=[c[0] for c in BODY_CASES]
)
def test_result_from_body(event: str, body: str, plain: bool, outcome: Outcome, output: Any, text: Any) -> None:
    result = result_from_body(event, body, plain_text_ok=plain)
    assert isinstance(result, HandlerResult)
    assert (result.outcome, result.output, result.text) == (outcome, output, text)
    assert (result.reason is None) == (outcome is OK)


OSC_TITLE = "\x1b]0;build done\x07"
OSC_NOTIFY_ST = "\x1b]777;notify;hookbus;done\x1b\\"

# (id, event, input, cleaned output)
VALID_CASES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    (
        "universal",
        "Stop",
        {
            "continue": False,
            "stopReason": "s",
            "suppressOutput": True,
            "systemMessage": "m",
            "decision": "block",
            "reason": "r",
        },
        {
            "continue": False,
            "stopReason": "s",
            "suppressOutput": True,
            "systemMessage": "m",
            "decision": "block",
            "reason": "r",
        },
    ),
    ("unknown-keys-dropped", "Stop", {"foo": 1, "continue": True, "async": True}, {"continue": True}),
    ("null-is-absent", "Stop", {"systemMessage": None, "reason": "x", "hookSpecificOutput": None}, {"reason": "x"}),
    ("approve-pretooluse", "PreToolUse", {"decision": "approve"}, {"decision": "approve"}),
    ("approve-elsewhere-dropped", "Stop", {"decision": "approve", "reason": "r"}, {"reason": "r"}),
    ("terminal-osc0-bel", "Stop", {"terminalSequence": OSC_TITLE}, {"terminalSequence": OSC_TITLE}),
    ("terminal-osc777-st", "Stop", {"terminalSequence": OSC_NOTIFY_ST}, {"terminalSequence": OSC_NOTIFY_ST}),
    ("terminal-bel", "Stop", {"terminalSequence": "\x07"}, {"terminalSequence": "\x07"}),
    ("terminal-two", "Stop", {"terminalSequence": OSC_TITLE + "\x07"}, {"terminalSequence": OSC_TITLE + "\x07"}),
    ("terminal-csi-dropped", "Stop", {"terminalSequence": "\x1b[2J", "reason": "r"}, {"reason": "r"}),
    ("terminal-osc8-dropped", "Stop", {"terminalSequence": "\x1b]8;;http://x\x07"}, {}),
    ("terminal-unterminated", "Stop", {"terminalSequence": "\x1b]0;title"}, {}),
    ("terminal-not-string", "Stop", {"terminalSequence": 7}, {}),
    (
        "pretooluse-fields",
        "PreToolUse",
        hso(
            "PreToolUse",
            permissionDecision="ask",
            permissionDecisionReason="why",
            updatedInput={"command": "ls"},
            additionalContext="ctx",
            retry=True,
            foo=1,
        ),
        hso(
            "PreToolUse",
            permissionDecision="ask",
            permissionDecisionReason="why",
            updatedInput={"command": "ls"},
            additionalContext="ctx",
        ),
    ),
    (
        "defer",
        "PreToolUse",
        hso("PreToolUse", permissionDecision="defer"),
        hso("PreToolUse", permissionDecision="defer"),
    ),
    (
        "pre-model-switch-ask",
        "PreModelSwitch",
        hso("PreModelSwitch", permissionDecision="ask"),
        hso("PreModelSwitch", permissionDecision="ask"),
    ),
    ("specific-only-name-dropped", "Notification", hso("Notification", additionalContext="x"), {}),
    (
        "unknown-event-specific-dropped",
        "SomeFutureEvent",
        {"decision": "block", **hso("SomeFutureEvent", x=1)},
        {"decision": "block"},
    ),
    (
        "specific-nulls",
        "SessionStart",
        hso("SessionStart", sessionTitle=None, reloadSkills=True),
        hso("SessionStart", reloadSkills=True),
    ),
    (
        "session-start",
        "SessionStart",
        hso(
            "SessionStart",
            additionalContext="a",
            initialUserMessage="go",
            sessionTitle="t",
            watchPaths=["/a"],
            reloadSkills=False,
        ),
        hso(
            "SessionStart",
            additionalContext="a",
            initialUserMessage="go",
            sessionTitle="t",
            watchPaths=["/a"],
            reloadSkills=False,
        ),
    ),
    (
        "post-tool-use",
        "PostToolUse",
        hso("PostToolUse", updatedToolOutput={"stdout": ""}, classifierContext="c", updatedMCPToolOutput=[1]),
        hso("PostToolUse", updatedToolOutput={"stdout": ""}, classifierContext="c", updatedMCPToolOutput=[1]),
    ),
    (
        "elicitation",
        "Elicitation",
        hso("Elicitation", action="accept", content={"a": 1}),
        hso("Elicitation", action="accept", content={"a": 1}),
    ),
    (
        "pr-allow-drops-deny-fields",
        "PermissionRequest",
        hso(
            "PermissionRequest",
            decision={"behavior": "allow", "updatedInput": {"a": 1}, "message": "m", "interrupt": True, "other": 1},
        ),
        hso("PermissionRequest", decision={"behavior": "allow", "updatedInput": {"a": 1}}),
    ),
    (
        "pr-deny-drops-allow-fields",
        "PermissionRequest",
        hso(
            "PermissionRequest",
            decision={"behavior": "deny", "message": "m", "interrupt": True, "updatedInput": {"a": 1}},
        ),
        hso("PermissionRequest", decision={"behavior": "deny", "message": "m", "interrupt": True}),
    ),
    (
        "pr-permission-updates",
        "PermissionRequest",
        hso(
            "PermissionRequest",
            decision={
                "behavior": "allow",
                "updatedPermissions": [
                    {
                        "type": "addRules",
                        "rules": [{"toolName": "Bash", "ruleContent": "npm run lint"}],
                        "behavior": "allow",
                        "destination": "session",
                    },
                    {"type": "setMode", "mode": "acceptEdits", "destination": "session"},
                    {"type": "addDirectories", "directories": ["/src"], "destination": "localSettings"},
                ],
            },
        ),
        hso(
            "PermissionRequest",
            decision={
                "behavior": "allow",
                "updatedPermissions": [
                    {
                        "type": "addRules",
                        "rules": [{"toolName": "Bash", "ruleContent": "npm run lint"}],
                        "behavior": "allow",
                        "destination": "session",
                    },
                    {"type": "setMode", "mode": "acceptEdits", "destination": "session"},
                    {"type": "addDirectories", "directories": ["/src"], "destination": "localSettings"},
                ],
            },
        ),
    ),
    (
        "discard-notification",
        "Notification",
        {"systemMessage": "m", "continue": False, "suppressOutput": True},
        {"suppressOutput": True},
    ),
    (
        "discard-cwd-changed",
        "CwdChanged",
        {"systemMessage": "m", "continue": False, "stopReason": "s"},
        {"systemMessage": "m"},
    ),
    (
        "discard-task-created",
        "TaskCreated",
        {"continue": False, "stopReason": "s", "decision": "block"},
        {"decision": "block"},
    ),
    (
        "discard-stop-failure",
        "StopFailure",
        {"systemMessage": "m", "terminalSequence": "\x07", "continue": False},
        {"terminalSequence": "\x07"},
    ),
    ("discard-session-end", "SessionEnd", {"systemMessage": "m", "terminalSequence": "\x07"}, {}),
    ("cap-at-limit", "Stop", {"systemMessage": "m" * TEXT_CAP}, {"systemMessage": "m" * TEXT_CAP}),
]


@pytest.mark.parametrize(("event", "obj", "cleaned"), [c[1:] for c in VALID_CASES], ids=[c[0] for c in VALID_CASES])
def test_check_output_cleans(event: str, obj: dict[str, Any], cleaned: dict[str, Any]) -> None:
    assert check_output(event, obj) == cleaned


@pytest.mark.parametrize(
    ("event", "obj"),
    [
        ("Stop", {"systemMessage": "s" * (TEXT_CAP + 1)}),
        ("UserPromptSubmit", hso("UserPromptSubmit", additionalContext="s" * (TEXT_CAP + 1))),
        ("SessionStart", hso("SessionStart", initialUserMessage="s" * (TEXT_CAP + 1))),
    ],
    ids=["systemMessage", "additionalContext", "initialUserMessage"],
)
def test_long_strings_are_capped(event: str, obj: dict[str, Any]) -> None:
    cleaned = json.dumps(check_output(event, obj))
    assert "s" * PREVIEW_CHARS in cleaned
    assert "s" * (PREVIEW_CHARS + 1) not in cleaned
    assert f"of {TEXT_CAP + 1:,} characters" in cleaned


def test_cap_text_keeps_short_text() -> None:
    assert cap_text("short") == "short"


PR = "PermissionRequest"


def upd(**entry: Any) -> dict[str, Any]:
    return pr(behavior="allow", updatedPermissions=[entry])


# (id, event, object, fragment of the error message)
INVALID_CASES: list[tuple[str, str, Any, str]] = [
    ("not-object", "Stop", ["continue"], "expected a JSON object"),
    ("continue-string", "Stop", {"continue": "false"}, "continue: expected a boolean, got 'false'"),
    ("stop-reason-number", "Stop", {"stopReason": 1}, "stopReason: expected a string, got a number"),
    ("suppress-output", "Stop", {"suppressOutput": "yes"}, "suppressOutput: expected a boolean"),
    ("system-message-array", "Stop", {"systemMessage": []}, "systemMessage: expected a string, got an array"),
    ("decision-allow-stop", "Stop", {"decision": "allow"}, "decision: expected one of block"),
    ("decision-deny-pretooluse", "PreToolUse", {"decision": "deny"}, "expected one of approve, block"),
    ("reason-number", "Stop", {"reason": 5}, "reason: expected a string"),
    ("specific-not-object", "Stop", {"hookSpecificOutput": "x"}, "hookSpecificOutput: expected an object"),
    (
        "specific-mismatch",
        "Stop",
        hso("SubagentStop", additionalContext="x"),
        "hookSpecificOutput.hookEventName: expected 'Stop', got 'SubagentStop'",
    ),
    ("specific-missing-name", "Stop", {"hookSpecificOutput": {"additionalContext": "x"}}, "hookEventName"),
    (
        "permission-decision",
        "PreToolUse",
        hso("PreToolUse", permissionDecision="maybe"),
        "permissionDecision: expected one of allow, deny, ask, defer",
    ),
    (
        "model-switch-defer",
        "PreModelSwitch",
        hso("PreModelSwitch", permissionDecision="defer"),
        "expected one of allow, deny, ask",
    ),
    ("updated-input", "PreToolUse", hso("PreToolUse", updatedInput="rm"), "updatedInput: expected an object"),
    ("additional-context", "Stop", hso("Stop", additionalContext=3), "additionalContext: expected a string"),
    ("watch-paths", "CwdChanged", hso("CwdChanged", watchPaths=["/a", 1]), "watchPaths: expected an array of str"),
    ("action", "Elicitation", hso("Elicitation", action="maybe"), "action: expected one of accept"),
    ("retry", "PermissionDenied", hso("PermissionDenied", retry="true"), "retry: expected a boolean"),
    ("pr-decision-string", PR, hso(PR, decision="allow"), "decision: expected an object"),
    ("pr-behavior-missing", PR, pr(message="m"), "decision.behavior: expected one of allow, deny, got null"),
    ("pr-behavior-ask", PR, pr(behavior="ask"), "decision.behavior"),
    ("pr-interrupt", PR, pr(behavior="deny", interrupt="yes"), "decision.interrupt: expected a boolean"),
    ("pr-updated-input", PR, pr(behavior="allow", updatedInput=[]), "decision.updatedInput"),
    ("pr-updates-not-array", PR, pr(behavior="allow", updatedPermissions={}), "updatedPermissions: expected an array"),
    ("pr-update-type", PR, upd(type="grant"), "updatedPermissions[0].type"),
    ("pr-update-destination", PR, upd(type="setMode", mode="plan", destination="cloud"), "destination"),
    ("pr-update-mode", PR, upd(type="setMode", mode="yolo"), "updatedPermissions[0].mode"),
    ("pr-update-rules", PR, upd(type="addRules", behavior="allow", rules=[{"ruleContent": "x"}]), "rules[0].toolName"),
    (
        "pr-update-rule-content",
        PR,
        upd(type="addRules", behavior="deny", rules=[{"toolName": "Bash", "ruleContent": 5}]),
        "rules[0].ruleContent: expected a string",
    ),
    ("pr-update-rule-behavior", PR, upd(type="removeRules", behavior="maybe", rules=[]), "behavior"),
    ("pr-update-directories", PR, upd(type="addDirectories", directories="/src"), "directories"),
]


@pytest.mark.parametrize(
    ("event", "obj", "fragment"), [c[1:] for c in INVALID_CASES], ids=[c[0] for c in INVALID_CASES]
)
def test_check_output_rejects(event: str, obj: Any, fragment: str) -> None:
    with pytest.raises(OutputSchemaError) as info:
        check_output(event, obj)
    assert fragment in str(info.value)
