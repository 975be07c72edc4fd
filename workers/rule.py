"""``rule`` handlers: permission rules evaluated in-process, no subprocess (contract §4).

The ``deny``, ``ask`` and ``allow`` lists are checked in that order and the first rule that
matches the tool call decides. On PreToolUse the verdict is a ``permissionDecision``; on
PermissionRequest a ``decision.behavior`` (``ask`` has no equivalent there and yields no
decision); on the other tool events a ``deny`` becomes ``decision: "block"``. Events with
no tool call get no decision from a rule handler.
"""

from __future__ import annotations

import functools
from typing import Any

from bus.permissions import PermissionRule, parse_rule, rule_matches
from bus.results import HandlerResult, Outcome
from bus.schema import RuleHandler
from workers.context import HookContext

_BLOCK_EVENTS = frozenset({"PostToolUse", "PostToolUseFailure"})


@functools.lru_cache(maxsize=4096)
def _rules(texts: tuple[str, ...]) -> tuple[PermissionRule, ...]:
    return tuple(parse_rule(text) for text in texts)


def evaluate_rules(handler: RuleHandler, hook_input: dict[str, Any]) -> tuple[str, str] | None:
    """``(verdict, rule text)`` of the first matching rule, deny before ask before allow."""
    tool_name = hook_input.get("tool_name")
    if not isinstance(tool_name, str):
        return None
    tool_input = hook_input.get("tool_input")
    if not isinstance(tool_input, dict):
        tool_input = {}
    cwd = hook_input.get("cwd") if isinstance(hook_input.get("cwd"), str) else None
    for verdict, texts in (("deny", handler.deny), ("ask", handler.ask), ("allow", handler.allow)):
        for rule, text in zip(_rules(tuple(texts)), texts, strict=True):
            if rule_matches(rule, tool_name, tool_input, cwd):
                return verdict, text
    return None


def rule_output(event: str, verdict: str, rule: str, reason: str | None) -> dict[str, Any]:
    """The Claude Code output object for a rule verdict on ``event``."""
    text = f"{reason} (rule: {rule})" if reason else f"hookbus: {verdict} by rule {rule}"
    if event == "PreToolUse":
        return {"hookSpecificOutput": {"hookEventName": event, "permissionDecision": verdict,
                                       "permissionDecisionReason": text}}
    if event == "PermissionRequest" and verdict in ("allow", "deny"):
        decision: dict[str, Any] = {"behavior": verdict}
        if verdict == "deny":
            decision["message"] = text
        return {"hookSpecificOutput": {"hookEventName": event, "decision": decision}}
    if event in _BLOCK_EVENTS and verdict == "deny":
        return {"decision": "block", "reason": text}
    return {}


async def run_rule(ctx: HookContext) -> HandlerResult:
    """Run a ``rule`` handler."""
    handler = ctx.entry.handler
    assert isinstance(handler, RuleHandler)
    found = evaluate_rules(handler, ctx.hook_input)
    if found is None:
        return HandlerResult(Outcome.OK, output={}, handler_type="rule")
    verdict, rule = found
    return HandlerResult(Outcome.OK, output=rule_output(ctx.event, verdict, rule, handler.reason), handler_type="rule")


__all__ = ["evaluate_rules", "rule_output", "run_rule"]
