"""Merging several handlers' results into one Claude Code hook output, event by event."""

from __future__ import annotations

from typing import Any

import pytest

from bus.hooks.events import EVENTS
from bus.hooks.merge import CLASSIFIER_CONTEXT_CAP, MergedDecision, _merge, merge_results
from bus.hooks.output import check_output
from bus.hooks.results import HandlerResult, Outcome
from tests.conftest import hso, pr


def ok(output: dict[str, Any] | None = None, text: str | None = None, **kw: Any) -> HandlerResult:
    return HandlerResult(Outcome.OK, output=output, text=text, **kw)


def block(reason: str | None = "blocked", output: dict[str, Any] | None = None, **kw: Any) -> HandlerResult:
    return HandlerResult(Outcome.BLOCK, output=output, reason=reason, **kw)


def err(reason: str = "boom", **kw: Any) -> HandlerResult:
    return HandlerResult(Outcome.ERROR, reason=reason, **kw)


def timeout(reason: str | None = "timed out after 2s", **kw: Any) -> HandlerResult:
    return HandlerResult(Outcome.TIMEOUT, reason=reason, **kw)


def pre(decision: str | None = None, reason: str | None = None, **fields: Any) -> dict[str, Any]:
    if decision:
        fields["permissionDecision"] = decision
    if reason:
        fields["permissionDecisionReason"] = reason
    return hso("PreToolUse", **fields)


PTU, PMS, PRQ = "PreToolUse", "PreModelSwitch", "PermissionRequest"
FAIL_HTTP = "hookbus: http hook failed (fail-closed): boom"
SET_PLAN = {"type": "setMode", "mode": "plan", "destination": "session"}
PMS_TIMEOUT = "hookbus: http hook timed out (a timeout blocks a model switch): timed out after 2s"

# (id, event, results in policy order, expected output, decision label, reason)
CASES: list[tuple[str, str, list[HandlerResult], dict[str, Any], str, str | None]] = [
    # --- PreToolUse -------------------------------------------------------------------------------
    ("ptu-nothing", PTU, [], {}, "none", None),
    ("ptu-no-opinion", PTU, [ok(), ok({})], {}, "none", None),
    ("ptu-allow", PTU, [ok(pre("allow", "fine"))], pre("allow", "fine"), "allow", "fine"),
    ("ptu-ask-beats-allow", PTU, [ok(pre("allow", "a")), ok(pre("ask", "b"))], pre("ask", "b"), "ask", "b"),
    ("ptu-defer-beats-ask", PTU, [ok(pre("defer")), ok(pre("ask"))], pre("defer"), "defer", None),
    ("ptu-deny-beats-defer", PTU, [ok(pre("defer", "later")), ok(pre("deny", "no"))], pre("deny", "no"), "deny", "no"),
    (
        "ptu-deny-reasons-joined",
        PTU,
        [ok(pre("allow", "a")), ok(pre("deny", "b")), ok(pre("ask", "x")), ok(pre("deny", "c")), ok(pre("deny"))],
        pre("deny", "b\nc"),
        "deny",
        "b\nc",
    ),
    (
        "ptu-exit2-denies",
        PTU,
        [ok(pre("allow", "fine")), block("rm forbidden")],
        pre("deny", "rm forbidden"),
        "deny",
        "rm forbidden",
    ),
    (
        "ptu-exit2-with-allow-json",
        PTU,
        [block("by exit", pre("allow", "fine"))],
        pre("deny", "by exit"),
        "deny",
        "by exit",
    ),
    ("ptu-legacy-approve", PTU, [ok({"decision": "approve", "reason": "ok"})], pre("allow", "ok"), "allow", "ok"),
    (
        "ptu-legacy-block",
        PTU,
        [ok(pre("ask", "q")), ok({"decision": "block", "reason": "old"})],
        pre("deny", "old"),
        "deny",
        "old",
    ),
    (
        "ptu-legacy-vs-specific-most-restrictive",
        PTU,
        [ok({"decision": "block", "reason": "top", **pre("allow", "inner")})],
        pre("deny", "top"),
        "deny",
        "top",
    ),
    (
        "ptu-specific-reason-on-tie",
        PTU,
        [ok({"decision": "block", "reason": "top", **pre("deny", "inner")})],
        pre("deny", "inner"),
        "deny",
        "inner",
    ),
    (
        "ptu-updated-input-last-in-policy-order",
        PTU,
        [ok(pre("allow", updatedInput={"v": 1})), ok(pre(updatedInput={"v": 2})), ok(pre("allow"))],
        pre("allow", updatedInput={"v": 2}),
        "allow",
        None,
    ),
    (
        "ptu-updated-input-without-decision",
        PTU,
        [ok(pre(updatedInput={"v": 1}))],
        pre(updatedInput={"v": 1}),
        "none",
        None,
    ),
    (
        "ptu-updated-input-dropped-on-deny",
        PTU,
        [ok(pre("allow", updatedInput={"v": 1})), ok(pre("deny", "n"))],
        pre("deny", "n"),
        "deny",
        "n",
    ),
    (
        "ptu-defer-drops-input-and-context",
        PTU,
        [ok(pre("allow", updatedInput={"v": 1}, additionalContext="c")), ok(pre("defer"))],
        pre("defer"),
        "defer",
        None,
    ),
    (
        "ptu-context-all-kept",
        PTU,
        [
            ok(pre("allow", additionalContext="one")),
            ok(pre(additionalContext="two")),
            block("x", pre(additionalContext="three")),
        ],
        pre("deny", "x", additionalContext="one\n\ntwo\n\nthree"),
        "deny",
        "x",
    ),
    (
        "ptu-context-kept-on-ask",
        PTU,
        [ok(pre("ask", additionalContext="c"))],
        pre("ask", additionalContext="c"),
        "ask",
        None,
    ),
    ("ptu-text-not-context", PTU, [ok(text="plain stdout")], {}, "none", None),
    ("ptu-errors-fail-open", PTU, [err(), timeout(), ok(pre("allow"))], pre("allow"), "allow", None),
    (
        "ptu-fail-closed-error",
        PTU,
        [ok(pre("allow")), err(handler_type="http", fail_closed=True)],
        pre("deny", FAIL_HTTP),
        "deny",
        FAIL_HTTP,
    ),
    (
        "ptu-fail-closed-timeout",
        PTU,
        [timeout(handler_type="command", fail_closed=True)],
        pre("deny", "hookbus: command hook failed (fail-closed): timed out after 2s"),
        "deny",
        "hookbus: command hook failed (fail-closed): timed out after 2s",
    ),
    (
        "ptu-fail-closed-unnamed",
        PTU,
        [HandlerResult(Outcome.ERROR, fail_closed=True)],
        pre("deny", "hookbus: unknown hook failed (fail-closed): error"),
        "deny",
        "hookbus: unknown hook failed (fail-closed): error",
    ),
    ("ptu-fail-closed-ok-is-fine", PTU, [ok(pre("allow"), fail_closed=True)], pre("allow"), "allow", None),
    (
        "ptu-shadow-skipped",
        PTU,
        [ok(pre("deny", "shadow"), shadow=True), ok(pre("allow"))],
        pre("allow"),
        "allow",
        None,
    ),
    ("ptu-shadow-block-skipped", PTU, [block("x", shadow=True)], {}, "none", None),
    ("ptu-shadow-fail-closed-skipped", PTU, [err(fail_closed=True, shadow=True)], {}, "none", None),
    ("ptu-foreign-specific-ignored", PTU, [ok(hso("PostToolUse", additionalContext="x"))], {}, "none", None),
    # --- PreModelSwitch ---------------------------------------------------------------------------
    (
        "pms-ask-beats-allow",
        PMS,
        [ok(hso(PMS, permissionDecision="allow")), ok(hso(PMS, permissionDecision="ask"))],
        hso(PMS, permissionDecision="ask"),
        "ask",
        None,
    ),
    (
        "pms-deny-beats-ask",
        PMS,
        [
            ok(hso(PMS, permissionDecision="deny", permissionDecisionReason="cost")),
            ok(hso(PMS, permissionDecision="ask")),
        ],
        hso(PMS, permissionDecision="deny", permissionDecisionReason="cost"),
        "deny",
        "cost",
    ),
    (
        "pms-exit2-denies",
        PMS,
        [ok(hso(PMS, permissionDecision="allow")), block("too pricey")],
        hso(PMS, permissionDecision="deny", permissionDecisionReason="too pricey"),
        "deny",
        "too pricey",
    ),
    (
        "pms-decision-block-denies",
        PMS,
        [ok({"decision": "block", "reason": "nope"})],
        hso(PMS, permissionDecision="deny", permissionDecisionReason="nope"),
        "deny",
        "nope",
    ),
    (
        "pms-timeout-blocks",
        PMS,
        [timeout(handler_type="http")],
        hso(PMS, permissionDecision="deny", permissionDecisionReason=PMS_TIMEOUT),
        "deny",
        PMS_TIMEOUT,
    ),
    (
        "pms-error-fails-open",
        PMS,
        [err(), ok(hso(PMS, permissionDecision="allow"))],
        hso(PMS, permissionDecision="allow"),
        "allow",
        None,
    ),
    (
        "pms-system-message-kept",
        PMS,
        [ok({"systemMessage": "switching"})],
        {"systemMessage": "switching"},
        "none",
        None,
    ),
    # --- PermissionRequest ------------------------------------------------------------------------
    (
        "prq-first-deny-wins",
        PRQ,
        [
            ok(pr(behavior="allow", updatedInput={"a": 1})),
            ok(pr(behavior="deny", message="m1", interrupt=True)),
            ok(pr(behavior="deny", message="m2")),
        ],
        pr(behavior="deny", message="m1", interrupt=True),
        "deny",
        "m1",
    ),
    (
        "prq-last-allow-wins",
        PRQ,
        [ok(pr(behavior="allow", updatedInput={"a": 1})), ok(pr(behavior="allow", updatedPermissions=[SET_PLAN]))],
        pr(behavior="allow", updatedPermissions=[SET_PLAN]),
        "allow",
        None,
    ),
    ("prq-exit2-ignored", PRQ, [block("nope"), ok(pr(behavior="allow"))], pr(behavior="allow"), "allow", None),
    ("prq-exit2-only", PRQ, [block("nope")], {}, "none", None),
    (
        "prq-block-output-still-read",
        PRQ,
        [ok(pr(behavior="allow")), block("x", pr(behavior="deny", message="m"))],
        pr(behavior="deny", message="m"),
        "deny",
        "m",
    ),
    (
        "prq-fail-closed-denies",
        PRQ,
        [ok(pr(behavior="allow")), err(handler_type="http", fail_closed=True)],
        pr(behavior="deny", message=FAIL_HTTP),
        "deny",
        FAIL_HTTP,
    ),
    ("prq-deny-without-message", PRQ, [ok(pr(behavior="deny"))], pr(behavior="deny"), "deny", None),
    ("prq-nothing", PRQ, [ok({}), err()], {}, "none", None),
    # --- top-level decision events ----------------------------------------------------------------
    (
        "stop-blocks-joined",
        "Stop",
        [ok({"decision": "block", "reason": "tests fail"}), ok({}), block("lint fails")],
        {"decision": "block", "reason": "tests fail\nlint fails"},
        "block",
        "tests fail\nlint fails",
    ),
    ("stop-block-without-reason", "Stop", [ok({"decision": "block"})], {"decision": "block"}, "block", None),
    (
        "stop-context-joined",
        "Stop",
        [ok(hso("Stop", additionalContext="a")), ok(hso("Stop", additionalContext="b"))],
        hso("Stop", additionalContext="a\n\nb"),
        "none",
        None,
    ),
    ("stop-error-fails-open", "Stop", [err(), timeout()], {}, "none", None),
    (
        "stop-fail-closed",
        "Stop",
        [err(handler_type="http", fail_closed=True)],
        {"decision": "block", "reason": FAIL_HTTP},
        "block",
        FAIL_HTTP,
    ),
    (
        "post-tool-use",
        "PostToolUse",
        [
            block("bad output"),
            ok(hso("PostToolUse", updatedToolOutput={"v": 1}, classifierContext="c1")),
            ok(hso("PostToolUse", updatedToolOutput={"v": 2}, updatedMCPToolOutput=[1], classifierContext="c2")),
        ],
        {
            "decision": "block",
            "reason": "bad output",
            **hso("PostToolUse", updatedToolOutput={"v": 2}, classifierContext="c1\nc2", updatedMCPToolOutput=[1]),
        },
        "block",
        "bad output",
    ),
    (
        "user-prompt-submit-extras",
        "UserPromptSubmit",
        [
            ok(text="from stdout"),
            ok(hso("UserPromptSubmit", additionalContext="json", sessionTitle="t1", suppressOriginalPrompt=False)),
            ok(hso("UserPromptSubmit", sessionTitle="t2", suppressOriginalPrompt=True)),
            ok(hso("UserPromptSubmit", suppressOriginalPrompt=False)),
        ],
        hso(
            "UserPromptSubmit", additionalContext="from stdout\n\njson", sessionTitle="t2", suppressOriginalPrompt=True
        ),
        "none",
        None,
    ),
    (
        "user-prompt-expansion-text",
        "UserPromptExpansion",
        [ok(text="ctx"), block("no")],
        {"decision": "block", "reason": "no", **hso("UserPromptExpansion", additionalContext="ctx")},
        "block",
        "no",
    ),
    (
        "teammate-idle-exit2",
        "TeammateIdle",
        [block("keep working")],
        {"decision": "block", "reason": "keep working"},
        "block",
        "keep working",
    ),
    (
        "task-completed-exit2",
        "TaskCompleted",
        [block("tests missing")],
        {"decision": "block", "reason": "tests missing"},
        "block",
        "tests missing",
    ),
    ("task-created-ignores-continue", "TaskCreated", [ok({"continue": False, "stopReason": "s"})], {}, "none", None),
    # --- continue / universal fields --------------------------------------------------------------
    (
        "continue-false-wins",
        PTU,
        [ok(pre("allow")), ok({"continue": False, "stopReason": "s1"}), ok({"continue": False, "stopReason": "s2"})],
        {"continue": False, "stopReason": "s1\ns2", **pre("allow")},
        "block",
        "s1\ns2",
    ),
    (
        "continue-false-no-reason",
        "Stop",
        [ok({"continue": False}), ok({"decision": "block", "reason": "r"})],
        {"decision": "block", "reason": "r", "continue": False},
        "block",
        "r",
    ),
    ("continue-true-ignored", "Stop", [ok({"continue": True, "stopReason": "s"})], {}, "none", None),
    (
        "universal-joined",
        "Stop",
        [
            ok({"systemMessage": "m1", "terminalSequence": "\x07"}),
            ok({"suppressOutput": True}),
            ok({"systemMessage": "m2", "suppressOutput": False, "terminalSequence": "\x1b]0;t\x07"}),
        ],
        {"systemMessage": "m1\nm2", "suppressOutput": True, "terminalSequence": "\x1b]0;t\x07"},
        "none",
        None,
    ),
    (
        "notification-discards",
        "Notification",
        [ok({"continue": False, "systemMessage": "m", "decision": "block"}), block("x")],
        {},
        "none",
        None,
    ),
    (
        "stop-failure-terminal-only",
        "StopFailure",
        [ok({"systemMessage": "m", "terminalSequence": "\x07"})],
        {"terminalSequence": "\x07"},
        "none",
        None,
    ),
    # --- other events -----------------------------------------------------------------------------
    (
        "permission-denied-retry",
        "PermissionDenied",
        [ok(hso("PermissionDenied", retry=False)), ok(hso("PermissionDenied", retry=True)), block("ignored")],
        hso("PermissionDenied", retry=True),
        "none",
        None,
    ),
    ("permission-denied-no-retry", "PermissionDenied", [ok(hso("PermissionDenied", retry=False))], {}, "none", None),
    (
        "elicitation-last-accept",
        "Elicitation",
        [
            ok(hso("Elicitation", action="accept", content={"v": 1})),
            ok(hso("Elicitation", action="accept")),
            ok(hso("Elicitation", action="accept", content={"v": 2})),
            ok(hso("Elicitation", action="accept")),
        ],
        hso("Elicitation", action="accept", content={"v": 2}),
        "none",
        None,
    ),
    (
        "elicitation-cancel-beats-accept",
        "Elicitation",
        [ok(hso("Elicitation", action="accept", content={"v": 1})), ok(hso("Elicitation", action="cancel"))],
        hso("Elicitation", action="cancel"),
        "none",
        None,
    ),
    (
        "elicitation-decline-beats-cancel",
        "Elicitation",
        [ok(hso("Elicitation", action="decline")), ok(hso("Elicitation", action="cancel"))],
        hso("Elicitation", action="decline"),
        "none",
        None,
    ),
    (
        "elicitation-exit2-declines",
        "Elicitation",
        [block("no secrets"), ok(hso("Elicitation", action="accept"))],
        hso("Elicitation", action="decline"),
        "none",
        "no secrets",
    ),
    (
        "elicitation-result-exit2",
        "ElicitationResult",
        [
            ok(hso("ElicitationResult", action="accept", content={"a": 1})),
            block("override"),
            ok({"systemMessage": "dropped"}),
        ],
        hso("ElicitationResult", action="decline"),
        "none",
        "override",
    ),
    (
        "message-display-last",
        "MessageDisplay",
        [ok(hso("MessageDisplay", displayContent="a")), ok(hso("MessageDisplay", displayContent="b"))],
        hso("MessageDisplay", displayContent="b"),
        "none",
        None,
    ),
    (
        "worktree-create-last-path",
        "WorktreeCreate",
        [ok(hso("WorktreeCreate", worktreePath="/a")), ok(), ok(hso("WorktreeCreate", worktreePath="/b"))],
        hso("WorktreeCreate", worktreePath="/b"),
        "none",
        None,
    ),
    (
        "worktree-create-failure",
        "WorktreeCreate",
        [ok(hso("WorktreeCreate", worktreePath="/a")), block("git failed")],
        {},
        "block",
        "git failed",
    ),
    (
        "worktree-create-http-error",
        "WorktreeCreate",
        [ok(hso("WorktreeCreate", worktreePath="/a")), err("HTTP 500"), timeout(None, handler_type="http")],
        {},
        "block",
        "HTTP 500\nhttp timeout",
    ),
    ("worktree-remove-failure", "WorktreeRemove", [ok(), block("busy")], {}, "block", "busy"),
    ("worktree-remove-ok", "WorktreeRemove", [ok(), ok({"systemMessage": "x"})], {}, "none", None),
    (
        "cwd-changed-watch-union",
        "CwdChanged",
        [ok(hso("CwdChanged", watchPaths=["/a", "/b"])), ok(hso("CwdChanged", watchPaths=["/b", "/c"]))],
        hso("CwdChanged", watchPaths=["/a", "/b", "/c"]),
        "none",
        None,
    ),
    (
        "file-changed-watch-clear",
        "FileChanged",
        [ok(hso("FileChanged", watchPaths=[])), ok({})],
        hso("FileChanged", watchPaths=[]),
        "none",
        None,
    ),
    (
        "cwd-changed-exit2-message",
        "CwdChanged",
        [block("cd denied"), ok({"continue": False})],
        {"systemMessage": "cd denied"},
        "none",
        None,
    ),
    (
        "session-start-extras",
        "SessionStart",
        [
            ok(text="stdout ctx"),
            ok(
                hso(
                    "SessionStart",
                    additionalContext="json ctx",
                    sessionTitle="a",
                    initialUserMessage="i1",
                    watchPaths=["/x"],
                    reloadSkills=False,
                )
            ),
            ok(
                hso(
                    "SessionStart",
                    sessionTitle="b",
                    initialUserMessage="i2",
                    watchPaths=["/y", "/x"],
                    reloadSkills=True,
                )
            ),
            block("session hook error", {"systemMessage": "json msg"}),
        ],
        {
            "systemMessage": "session hook error\njson msg",
            **hso(
                "SessionStart",
                additionalContext="stdout ctx\n\njson ctx",
                sessionTitle="b",
                initialUserMessage="i2",
                watchPaths=["/x", "/y"],
                reloadSkills=True,
            ),
        },
        "none",
        None,
    ),
    (
        "post-model-switch-text",
        "PostModelSwitch",
        [ok(text="now on opus"), ok(text="")],
        hso("PostModelSwitch", additionalContext="now on opus"),
        "none",
        None,
    ),
    (
        "subagent-start-exit2",
        "SubagentStart",
        [block("warn"), ok(hso("SubagentStart", additionalContext="c"))],
        {"systemMessage": "warn", **hso("SubagentStart", additionalContext="c")},
        "none",
        None,
    ),
    ("subagent-start-text-not-context", "SubagentStart", [ok(text="plain")], {}, "none", None),
    # --- agent-loop events and unknown events -----------------------------------------------------------
    (
        "seed-start-block",
        "Start",
        [block("not today")],
        {"decision": "block", "reason": "not today"},
        "block",
        "not today",
    ),
    (
        "seed-pre-sampling-modify",
        "PreSampling",
        [
            ok(hso("PreSampling", updatedMessages=[{"role": "user", "content": "a"}])),
            ok(hso("PreSampling", updatedMessages=[{"role": "user", "content": "b"}])),
        ],
        hso("PreSampling", updatedMessages=[{"role": "user", "content": "b"}]),
        "none",
        None,
    ),
    (
        "seed-post-sampling-block",
        "PostSampling",
        [ok({"decision": "block", "reason": "r"})],
        {"decision": "block", "reason": "r"},
        "block",
        "r",
    ),
    ("seed-error-block", "Error", [block("e")], {"decision": "block", "reason": "e"}, "block", "e"),
    (
        "unknown-universal-only",
        "FutureEvent",
        [ok({"systemMessage": "m", "decision": "block", "reason": "r", **hso("FutureEvent", x=1)}), ok(text="t")],
        {"decision": "block", "reason": "r", "systemMessage": "m"},
        "block",
        "r",
    ),
]


@pytest.mark.parametrize(
    ("event", "results", "output", "decision", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_merge(
    event: str, results: list[HandlerResult], output: dict[str, Any], decision: str, reason: str | None
) -> None:
    merged = merge_results(event, results)
    assert merged.output == output
    assert (merged.decision, merged.reason) == (decision, reason)


@pytest.mark.parametrize(("event", "results"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_merged_output_is_valid_for_its_event(event: str, results: list[HandlerResult]) -> None:
    output = merge_results(event, results).output
    assert check_output(event, output) == output


def test_classifier_context_is_capped() -> None:
    long = hso("PostToolUse", classifierContext="c" * (CLASSIFIER_CONTEXT_CAP + 10))
    merged = merge_results("PostToolUse", [ok(long)])
    assert merged.output["hookSpecificOutput"]["classifierContext"] == "c" * CLASSIFIER_CONTEXT_CAP


def test_merge_does_not_mutate_results() -> None:
    first = ok(pre("allow", updatedInput={"v": 1}))
    failing = err(handler_type="http", fail_closed=True)
    merge_results(PTU, [first, failing])
    assert first.output == pre("allow", updatedInput={"v": 1})
    assert (failing.outcome, failing.reason) == (Outcome.ERROR, "boom")


@pytest.mark.parametrize("event", [*EVENTS, "SomeFutureEvent"])
def test_silent_results_skip_the_merge_and_say_what_the_merge_says(event: str) -> None:
    silent = [HandlerResult(Outcome.OK, output={}), HandlerResult(Outcome.OK), HandlerResult(Outcome.OK, output={})]
    fast = merge_results(event, silent)
    assert fast == _merge(event, silent) == MergedDecision({}, "none", None)
    # One handler saying anything takes the whole merge.
    spoken = [*silent, HandlerResult(Outcome.BLOCK, reason="no")]
    assert merge_results(event, spoken) == _merge(event, spoken)
