"""What a ``rule`` handler's verdict says to the agent: its output for the event and its reason.

On PreToolUse the verdict is a ``permissionDecision``; on PermissionRequest a
``decision.behavior`` (``ask`` has no equivalent there and yields no decision); on the other
tool events a ``deny`` becomes ``decision: "block"``. :data:`_ALONE` says which decision such an
output merges to alone (:mod:`bus.policy.rulelists`, ``HandlerResult.decided``).
"""

from __future__ import annotations

from typing import Any, Final

from bus.hooks.decisions import Decision

_BLOCK_EVENTS: Final = frozenset({"PostToolUse", "PostToolUseFailure"})


def rule_output(event: str, verdict: str, rule: str, reason: str | None, unjudged: str | None = None) -> dict[str, Any]:
    """The Claude Code output object for a rule verdict on ``event``; ``unjudged`` says why the
    input could not be judged (then only deny and ask rules meet it)."""
    return _output(event, verdict, _reason_text(verdict, rule, reason, unjudged))


def _reason_text(verdict: str, rule: str, reason: str | None, unjudged: str | None) -> str:
    text = f"{reason} (rule: {rule})" if reason else f"hookbus: {verdict} by rule {rule}"
    if unjudged:
        text += f"; {unjudged}, so it cannot be judged and meets every deny and ask rule of its tool"
    return text


def _output(event: str, verdict: str, text: str) -> dict[str, Any]:
    if event == "PreToolUse":
        return {
            "hookSpecificOutput": {
                "hookEventName": event,
                "permissionDecision": verdict,
                "permissionDecisionReason": text,
            }
        }
    if event == "PermissionRequest" and verdict in ("allow", "deny"):
        decision: dict[str, Any] = {"behavior": verdict}
        if verdict == "deny":
            decision["message"] = text
        return {"hookSpecificOutput": {"hookEventName": event, "decision": decision}}
    if event in _BLOCK_EVENTS and verdict == "deny":
        return {"decision": "block", "reason": text}
    return {}


def _decided(event: str, verdict: str, text: str) -> tuple[str, str | None] | None:
    shape = _ALONE.get((event, verdict))
    if shape is None:
        return None
    label, gives_reason = shape
    return label, text if gives_reason else None


#: The decision of a rule verdict's output merged alone, and whether the verdict's text is its
#: reason, for the events and verdicts where that merge gives the output back unchanged (the
#: tests check it).
_ALONE: Final[dict[tuple[str, str], tuple[str, bool]]] = {
    **{("PreToolUse", v): (v, True) for v in ("deny", "ask", "allow")},
    ("PermissionRequest", "deny"): (Decision.DENY, True),
    ("PermissionRequest", "allow"): (Decision.ALLOW, False),
    ("PostToolUse", "deny"): (Decision.BLOCK, True),
    ("PostToolUseFailure", "deny"): (Decision.BLOCK, True),
}


__all__ = ["rule_output"]
