"""An approver's edited input is judged again before it is sent (unit tier)."""

from __future__ import annotations

from bus.approvals.recheck import edit_refusal
from bus.policy.loading import policy_from_text

POLICY = """
hooks:
  PreToolUse:
    - matcher: Bash
      approval: true
      hooks: [{type: rule, ask: ["Bash(git push *)"], deny: ["Bash(rm -rf *)"]}]
    - matcher: Bash
      hooks: [{type: command, if: "Bash(curl *)", command: "exit 2"}]
    - matcher: Bash
      hooks: [{type: command, async: true, command: "cat >/dev/null"}]
"""

CALL = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "git push"}, "cwd": "/w"}


def test_an_edit_a_deny_rule_meets_is_refused_naming_the_rule() -> None:
    why = edit_refusal(policy_from_text(POLICY), CALL, {"command": "rm -rf /"}, "claude")
    assert why is not None and "Bash(rm -rf *)" in why


def test_an_edit_only_another_blocking_handler_could_judge_is_refused() -> None:
    why = edit_refusal(policy_from_text(POLICY), CALL, {"command": "curl https://example.test"}, "claude")
    assert why is not None and "command handler" in why


def test_an_edit_rules_and_async_handlers_alone_see_is_sent() -> None:
    assert edit_refusal(policy_from_text(POLICY), CALL, {"command": "git push --dry-run"}, "claude") is None
