"""Which ask goes to the queue, the answers each outcome gives, and "approve always" rules (unit tier)."""

from __future__ import annotations

import pytest

from bus.approvals.approval import OUTCOMES, Approval, Status, answer_output, pending_output, verdict_output
from bus.approvals.asking import always_rule, applies, approved_always, approvers_needed, call_digest, queued_ask
from bus.policy.approvals import ApprovalsSettings, merged_setting
from bus.policy.loading import policy_from_text
from bus.runtime.approvalmetrics import APPROVAL_OUTCOMES

POLICY = """
hookbus: {approvals: {enabled: true}}
hooks:
  PreToolUse:
    - matcher: Bash
      approval: true
      hooks: [{type: rule, ask: ["Bash(git push *)"]}]
    - matcher: Bash
      hooks: [{type: rule, ask: ["Bash(npm publish *)"]}]
"""


def _approval(**fields: object) -> Approval:
    base: dict[str, object] = {
        "id": "0123456789abcdef",
        "tenant": "acme",
        "event_id": "e1",
        "event": "PreToolUse",
        "session_id": "s",
        "agent": "claude",
        "tool_name": "Bash",
        "tool_input": {"command": "git push"},
        "reason": "r",
        "rule": "k",
        "requester": "t",
        "created_ms": 0,
        "deadline_ms": 1000,
    }
    return Approval(**{**base, **fields})  # type: ignore[arg-type]


def test_only_the_ask_of_a_handler_marked_approval_goes_to_the_queue() -> None:
    policy = policy_from_text(POLICY)
    entries = policy.by_event["PreToolUse"]
    marked, plain = entries[0].handler_id, entries[1].handler_id
    settings = policy.settings.approvals
    queued = queued_ask(settings, entries, "PreToolUse", "ask", [marked], "hookbus: ask by rule Bash(git push *)")
    assert queued is not None and queued["reason"] == "hookbus: ask by rule Bash(git push *)"
    assert queued_ask(settings, entries, "PreToolUse", "ask", [plain], "x") is None
    assert queued_ask(settings, entries, "PreToolUse", "deny", [marked], "x") is None
    assert queued_ask(ApprovalsSettings(), entries, "PreToolUse", "ask", [marked], "x") is None  # not enabled


def test_the_ask_carries_the_permission_rule_its_marked_handler_matched() -> None:
    policy = policy_from_text(POLICY)
    entries = policy.by_event["PreToolUse"]
    marked, plain = entries[0].handler_id, entries[1].handler_id
    settings = policy.settings.approvals
    rules = {marked: "Bash(git push *)", plain: "Bash(npm publish *)"}
    queued = queued_ask(settings, entries, "PreToolUse", "ask", [marked, plain], "merged", rules)
    assert queued is not None and queued["matched"] == "Bash(git push *)"
    unmatched = queued_ask(settings, entries, "PreToolUse", "ask", [marked], "merged", {plain: "Bash(npm publish *)"})
    assert unmatched is not None and "matched" not in unmatched


def test_the_two_person_rule_names_the_rule_that_asked_or_a_text_in_the_reason() -> None:
    settings = ApprovalsSettings(enabled=True, twoPerson=["Bash(git push *)", "deploy"])
    assert approvers_needed(settings, {"reason": "pushes need a person", "matched": "Bash(git push *)"}) == 2
    assert approvers_needed(settings, {"reason": "a deploy script", "matched": "Bash(./run *)"}) == 2  # in the reason
    assert approvers_needed(settings, {"reason": "pushes need a person", "matched": "Bash(git push-docs *)"}) == 1
    assert approvers_needed(settings, {"reason": "no rule named"}) == 1
    assert approvers_needed(ApprovalsSettings(enabled=True), {"reason": "deploy", "matched": "Bash(git push *)"}) == 1


def test_the_section_scopes_tenants_agents_events_and_headless() -> None:
    settings = ApprovalsSettings(enabled=True, tenants=["acme"], agents=["claude", "codex"], when="headless")
    assert applies(settings, "acme", "codex", "PreToolUse", headless=False, asks=False)  # Codex cannot ask
    assert not applies(settings, "acme", "claude", "PreToolUse", headless=False, asks=True)  # Claude asks itself
    assert applies(settings, "acme", "claude", "PreToolUse", headless=True, asks=True)
    assert not applies(settings, "beta", "codex", "PreToolUse", headless=True, asks=False)
    assert not applies(settings, "acme", "gemini", "PreToolUse", headless=True, asks=False)
    assert not applies(settings, "acme", "codex", "PermissionRequest", headless=True, asks=False)


def test_a_timeout_is_never_an_allow() -> None:
    with pytest.raises(ValueError):
        ApprovalsSettings.model_validate({"onTimeout": "allow"})
    expired = _approval(status=Status.EXPIRED)
    assert answer_output(expired)[1] == "deny"
    assert answer_output(_approval(status=Status.EXPIRED, on_timeout="ask"))[1] == "ask"
    assert pending_output(_approval(), defer=False)[1] == "deny"
    assert pending_output(_approval(), defer=True)[1] == "defer"


def test_answers_in_each_event_s_shape() -> None:
    edited = {"command": "git push --dry-run"}
    approved = _approval(status=Status.APPROVED, answer={"for": "once", "by": "dana", "input": edited})
    output, decision = answer_output(approved)
    assert decision == "allow" and output["hookSpecificOutput"]["updatedInput"] == edited
    denied = _approval(status=Status.DENIED, answer={"reason": "no", "by": "dana"})
    assert "no" in answer_output(denied)[0]["hookSpecificOutput"]["permissionDecisionReason"]
    permission = verdict_output("PermissionRequest", "deny", "no")
    assert permission["hookSpecificOutput"]["decision"] == {"behavior": "deny", "message": "no"}
    assert verdict_output("PermissionRequest", "allow", "ok", edited)["hookSpecificOutput"]["decision"] == {
        "behavior": "allow",
        "updatedInput": edited,
    }
    assert verdict_output("PermissionRequest", "ask", "?") == {}


def test_approve_always_names_the_exact_call_and_allows_it_in_every_part_only() -> None:
    rule = always_rule("Bash", {"command": "git push origin main"})
    assert rule == "Bash(git push origin main)"
    with pytest.raises(ValueError):
        always_rule("Bash", {"command": "rm -rf *"})  # a '*' would be a wildcard
    with pytest.raises(ValueError):
        always_rule("WebSearch", {"query": "x"})
    settings = ApprovalsSettings(approved=[rule])
    call = {"tool_name": "Bash", "tool_input": {"command": "git push origin main"}}
    assert approved_always(settings, call) == rule
    assert approved_always(settings, {**call, "tool_input": {"command": "git push origin main && rm -rf /"}}) is None


def test_layers_add_to_the_approved_list_and_keep_the_orgs_settings() -> None:
    org = {"enabled": True, "timeoutSeconds": 60, "approved": ["Bash(make)"]}
    merged = merged_setting("approvals", org, {"approved": ["Bash(git push origin main)"]})
    assert merged == {"enabled": True, "timeoutSeconds": 60, "approved": ["Bash(make)", "Bash(git push origin main)"]}
    assert merged_setting("stopBlockLimit", 3, 4) == 4


def test_a_retry_is_the_same_call_and_another_session_is_not() -> None:
    call = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "x", "b": 1}}
    assert call_digest("s", call) == call_digest("s", {**call, "tool_input": {"b": 1, "command": "x"}})
    assert call_digest("s", call) != call_digest("t", call)


def test_the_metric_knows_every_outcome() -> None:
    assert tuple(OUTCOMES) == APPROVAL_OUTCOMES
