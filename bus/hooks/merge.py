"""Merging the answers of every handler that ran on one event into one Claude Code output.

:func:`merge_results` takes the :class:`~bus.hooks.results.HandlerResult` of each handler, in
policy order, and returns the single hook output object the gateway sends back as the body
of an http-hook reply. Exit-code outcomes are turned into the JSON an http hook must use.

Before merging, ``shadow`` results are dropped (logged, never enforced). A ``fail_closed``
result that errored or timed out becomes a block with the reason ``hookbus: <type> hook
failed (fail-closed): <reason>`` (on PermissionRequest a ``deny`` decision, since exit 2
means nothing there). A timeout on PreModelSwitch blocks the switch even when fail-open,
as in Claude Code. Other errors and timeouts render no decision (fail open).

Per-event decisions:

* **PreToolUse** — each result votes the more restrictive of its
  ``hookSpecificOutput.permissionDecision`` and its deprecated top-level ``decision``
  (``approve`` → allow, ``block`` → deny); a BLOCK (exit 2) votes deny with its reason. The
  most restrictive vote wins: deny > defer > ask > allow. ``permissionDecisionReason`` joins
  (``"\\n"``) the reasons of the results that voted the winner. ``updatedInput``: the *last
  result in policy order* that gave one wins (Claude Code uses "last to finish", which is
  not deterministic); it is left out on deny and defer; ``additionalContext`` is left out on
  defer.
* **PreModelSwitch** — the same with deny > ask > allow; exit 2 or ``decision: "block"``
  votes deny.
* **PermissionRequest** (undocumented by Claude Code) — any ``behavior: "deny"`` wins; the first
  deny in policy order supplies ``message``/``interrupt``; otherwise the last ``allow`` with
  its ``updatedInput``/``updatedPermissions``. Exit 2 is ignored.
* **Top-level ``decision`` events** (UserPromptSubmit, PostToolUse, Stop, TaskCreated, ...),
  the agent-loop events (Start, PreSampling, PostSampling, Error) and unknown events: any
  ``decision: "block"`` or BLOCK wins → ``{"decision": "block", "reason": ...}`` with every
  block reason joined by ``"\\n"`` in policy order (undocumented how Claude Code joins them).
  On TeammateIdle/TaskCompleted exit 2 also becomes ``decision: "block"``: an http reply has
  no other way to say it. On unknown events ``decision`` counts as a universal field.
* **Elicitation / ElicitationResult** — exit 2 → ``action: "decline"``; otherwise the most
  restrictive action wins: decline > cancel > accept (a refusal beats a dismissal beats an
  answer). ``content`` is sent only with ``accept`` (the last accepting result's).
* **WorktreeCreate / WorktreeRemove** — every result that is not OK (exit != 0, http error,
  timeout) fails the operation: no ``worktreePath`` is returned, the label is ``block`` and
  the reason holds the failures, so the gateway can turn it into a failing reply.
* Exit 2 on SessionStart, SubagentStart, PostModelSwitch, CwdChanged and FileChanged shows
  stderr to the user in Claude Code; here the reason becomes a ``systemMessage``. On the
  other non-blocking events exit 2 is ignored, as in Claude Code.

Field merging (``hookSpecificOutput`` only carries fields valid for the event):

* ``additionalContext``: every value in policy order, joined by ``"\\n\\n"``; the plain
  ``text`` of OK results on UserPromptSubmit, UserPromptExpansion, SessionStart and
  PostModelSwitch is added too, because an http reply cannot carry plain stdout. The joined
  string is not capped again: Claude Code caps each string it receives.
* ``classifierContext``: joined by ``"\\n"``, cut at 2,000 characters (Claude Code's shared
  budget). ``watchPaths``: union in order (``[]`` is kept when that is all there is: it
  clears the list). ``retry``, ``reloadSkills``, ``suppressOriginalPrompt``: any true.
  ``displayContent``, ``worktreePath``, ``updatedToolOutput``, ``updatedMCPToolOutput``,
  ``sessionTitle``, ``initialUserMessage``, ``updatedMessages``: last in policy order.
* Universal: ``continue: false`` from any result wins (label ``block``, ``stopReason`` of
  those results joined by ``"\\n"``); the rest of the output is kept, Claude Code gives
  ``continue`` precedence itself. ``systemMessage`` joined by ``"\\n"``;
  ``suppressOutput`` any true; ``terminalSequence`` last wins (one allowlisted sequence).
  Fields the event discards are dropped.

The ``decision`` label (for metrics): PreToolUse the winning permission decision,
PermissionRequest allow/deny, PreModelSwitch allow/deny/ask, block-capable events
``block``, worktree failures ``block``, otherwise ``none``; ``continue: false`` → ``block``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, Final

from bus.hooks.decisions import Decision
from bus.hooks.events import SEED_EVENTS, EventSpec, event_spec, is_known
from bus.hooks.output import drop_discarded
from bus.hooks.results import HandlerResult, Outcome

_PRE_TOOL_RANK: Final = {"allow": 1, "ask": 2, "defer": 3, "deny": 4}
_MODEL_RANK: Final = {"allow": 1, "ask": 2, "deny": 3}
_ELICIT_RANK: Final = {"accept": 1, "cancel": 2, "decline": 3}
_LEGACY: Final = {"approve": "allow", "block": "deny"}
_BLOCK_AS_MESSAGE: Final = frozenset({"SessionStart", "SubagentStart", "PostModelSwitch", "CwdChanged", "FileChanged"})
_JOINED: Final = {"additionalContext": "\n\n", "classifierContext": "\n"}
_ANY_TRUE: Final = frozenset({"retry", "reloadSkills", "suppressOriginalPrompt"})
_LAST_WINS: Final = frozenset(
    {
        "updatedInput",
        "displayContent",
        "worktreePath",
        "updatedToolOutput",
        "updatedMCPToolOutput",
        "sessionTitle",
        "initialUserMessage",
        "updatedMessages",
    }
)
CLASSIFIER_CONTEXT_CAP: Final = 2_000


@dataclasses.dataclass(slots=True)
class MergedDecision:
    """The merged answer to one event.

    ``output`` is the Claude Code hook output object to return (camelCase; ``{}`` = no
    opinion). ``decision`` is the metrics label, a :class:`~bus.hooks.decisions.Decision`.
    ``reason`` explains that decision, when there is one.
    """

    output: dict[str, Any]
    decision: str
    reason: str | None


@dataclasses.dataclass(slots=True)
class _Verdict:
    """What an event's decision rule contributes to the output."""

    specific: dict[str, Any] = dataclasses.field(default_factory=dict)
    top: dict[str, Any] = dataclasses.field(default_factory=dict)
    decision: str = Decision.NONE
    reason: str | None = None
    drop: frozenset[str] = frozenset()


def merge_results(event: str, results: Sequence[HandlerResult]) -> MergedDecision:
    """Merge the results of ``event``'s handlers (in policy order) into one hook output."""
    voters = [r for r in results if not r.shadow and (r.outcome is not Outcome.OK or r.output or r.text)]
    if not voters:  # nobody said anything (most tool calls a policy lets through): nothing to merge
        return MergedDecision({}, Decision.NONE, None)
    if len(voters) == 1 and voters[0].decided is not None and voters[0].output is not None:
        # One answer whose runner knows what merging it alone gives (a rule's verdict).
        decision, reason = voters[0].decided
        return MergedDecision(voters[0].output, decision, reason)
    return _merge(event, results)


def _merge(event: str, results: Sequence[HandlerResult]) -> MergedDecision:
    spec = event_spec(event)
    active = [_enforceable(event, r) for r in results if not r.shadow]
    verdict = _decide(event, spec, active)
    out: dict[str, Any] = {**verdict.top, **_universal(event, active)}
    specific = {k: v for k, v in _fields(spec, active).items() if k not in verdict.drop}
    specific.update(verdict.specific)
    specific = {k: v for k, v in specific.items() if k in spec.specific_fields}
    if specific:
        out["hookSpecificOutput"] = {"hookEventName": event, **specific}
    out = drop_discarded(event, out)
    if out.get("continue") is False:
        return MergedDecision(out, Decision.BLOCK, out.get("stopReason") or verdict.reason)
    return MergedDecision(out, verdict.decision, verdict.reason)


def _enforceable(event: str, result: HandlerResult) -> HandlerResult:
    """``result`` as it counts: fail-closed failures (and PreModelSwitch timeouts) become blocks."""
    kind = result.handler_type or "unknown"
    if result.fail_closed and result.failed:
        reason = f"hookbus: {kind} hook failed (fail-closed): {result.reason or result.outcome.value}"
    elif result.outcome is Outcome.TIMEOUT and event == "PreModelSwitch":
        why = result.reason or "timeout"
        reason = f"hookbus: {kind} hook timed out (a timeout blocks a model switch): {why}"
    else:
        return result
    if event == "PermissionRequest":
        deny = {"hookEventName": event, "decision": {"behavior": "deny", "message": reason}}
        output = {"hookSpecificOutput": deny}
        return dataclasses.replace(result, outcome=Outcome.OK, output=output, reason=reason)
    return dataclasses.replace(result, outcome=Outcome.BLOCK, output=None, text=None, reason=reason)


def _decide(event: str, spec: EventSpec, results: list[HandlerResult]) -> _Verdict:
    if event == "PreToolUse":
        return _permission_vote(event, results, _PRE_TOOL_RANK)
    if event == "PreModelSwitch":
        return _permission_vote(event, results, _MODEL_RANK)
    if event == "PermissionRequest":
        return _permission_request(event, results)
    if event in ("Elicitation", "ElicitationResult"):
        return _elicitation(event, results)
    if event in ("WorktreeCreate", "WorktreeRemove"):
        failures = [
            r.reason or f"{r.handler_type or 'hook'} {r.outcome.value}" for r in results if r.outcome is not Outcome.OK
        ]
        if not failures:
            return _Verdict()
        return _Verdict(decision=Decision.BLOCK, reason="\n".join(failures), drop=frozenset({"worktreePath"}))
    if spec.top_level_decision or event in SEED_EVENTS or not is_known(event):
        return _top_level_block(results)
    return _Verdict()


def _permission_vote(event: str, results: list[HandlerResult], rank: dict[str, int]) -> _Verdict:
    """PreToolUse / PreModelSwitch: the most restrictive ``permissionDecision`` wins."""
    votes: list[tuple[str, str | None]] = []
    for r in results:
        if r.outcome is Outcome.BLOCK:
            votes.append(("deny", r.reason))
        elif r.outcome is Outcome.OK and r.output:
            mine = _specific(event, r.output)
            options = [
                (mine.get("permissionDecision"), mine.get("permissionDecisionReason")),
                (_LEGACY.get(r.output.get("decision", "")), r.output.get("reason")),
            ]
            known = [(d, why) for d, why in options if d in rank]
            if known:
                best = max(rank[d] for d, _ in known)
                votes.append(next((d, why) for d, why in known if rank[d] == best))
    if not votes:
        return _Verdict()
    winner = max((d for d, _ in votes), key=rank.__getitem__)
    reason = _join((why for d, why in votes if d == winner), "\n")
    specific: dict[str, Any] = {"permissionDecision": winner}
    if reason:
        specific["permissionDecisionReason"] = reason
    drop = {"deny": {"updatedInput"}, "defer": {"updatedInput", "additionalContext"}}.get(winner, set())
    return _Verdict(specific=specific, decision=winner, reason=reason, drop=frozenset(drop))


def _permission_request(event: str, results: list[HandlerResult]) -> _Verdict:
    """PermissionRequest: first deny wins over any allow; else the last allow."""
    allow: dict[str, Any] | None = None
    for r in results:
        if r.outcome not in (Outcome.OK, Outcome.BLOCK) or not r.output:
            continue
        decision = _specific(event, r.output).get("decision")
        if not isinstance(decision, dict):
            continue
        if decision.get("behavior") == "deny":
            message = decision.get("message")
            return _Verdict(
                specific={"decision": dict(decision)},
                decision=Decision.DENY,
                reason=message if isinstance(message, str) and message else None,
            )
        if decision.get("behavior") == "allow":
            allow = decision
    if allow is None:
        return _Verdict()
    return _Verdict(specific={"decision": dict(allow)}, decision=Decision.ALLOW)


def _elicitation(event: str, results: list[HandlerResult]) -> _Verdict:
    """Elicitation / ElicitationResult: exit 2 declines; else the most restrictive action."""
    actions: list[tuple[str, Any]] = []
    reasons: list[str | None] = []
    for r in results:
        if r.outcome is Outcome.BLOCK:
            actions.append(("decline", None))
            reasons.append(r.reason)
        elif r.outcome is Outcome.OK and r.output:
            specific = _specific(event, r.output)
            if specific.get("action") in _ELICIT_RANK:
                actions.append((specific["action"], specific.get("content")))
    if not actions:
        return _Verdict()
    winner = max((a for a, _ in actions), key=_ELICIT_RANK.__getitem__)
    out: dict[str, Any] = {"action": winner}
    contents = [c for a, c in actions if a == "accept" and c is not None]
    if winner == "accept" and contents:
        out["content"] = contents[-1]
    return _Verdict(specific=out, reason=_join(reasons, "\n"))


def _top_level_block(results: list[HandlerResult]) -> _Verdict:
    """Top-level ``decision`` events: any block wins, reasons joined in policy order."""
    reasons: list[str | None] = []
    blocked = False
    for r in results:
        if r.outcome is Outcome.BLOCK:
            blocked = True
            reasons.append(r.reason)
        elif r.outcome is Outcome.OK and r.output and r.output.get("decision") == "block":
            blocked = True
            reasons.append(r.output.get("reason"))
    if not blocked:
        return _Verdict()
    reason = _join(reasons, "\n")
    top: dict[str, Any] = {"decision": "block"}
    if reason:
        top["reason"] = reason
    return _Verdict(top=top, decision=Decision.BLOCK, reason=reason)


def _fields(spec: EventSpec, results: list[HandlerResult]) -> dict[str, Any]:
    """The event-specific fields that merge field by field (context, last-wins, any-true, union)."""
    values: dict[str, list[Any]] = {}
    for r in results:
        if r.outcome is Outcome.OK and r.text and spec.context_stdout:
            values.setdefault("additionalContext", []).append(r.text)
        if r.outcome in (Outcome.OK, Outcome.BLOCK) and r.output:
            for key, value in _specific(spec.name, r.output).items():
                values.setdefault(key, []).append(value)
    out: dict[str, Any] = {}
    for key, found in values.items():
        if key in _JOINED:
            joined = _join(found, _JOINED[key])
            if joined:
                out[key] = joined[:CLASSIFIER_CONTEXT_CAP] if key == "classifierContext" else joined
        elif key in _ANY_TRUE:
            if any(v is True for v in found):
                out[key] = True
        elif key == "watchPaths":
            out[key] = list(dict.fromkeys(p for paths in found if isinstance(paths, list) for p in paths))
        elif key in _LAST_WINS:
            out[key] = found[-1]
    return out


def _universal(event: str, results: list[HandlerResult]) -> dict[str, Any]:
    """``continue``/``stopReason``, ``systemMessage``, ``suppressOutput``, ``terminalSequence``."""
    stop_reasons: list[Any] = []
    messages: list[Any] = []
    stopped = suppress = False
    sequence: Any = None
    for r in results:
        if r.outcome is Outcome.BLOCK and event in _BLOCK_AS_MESSAGE:
            messages.append(r.reason)
        if r.outcome not in (Outcome.OK, Outcome.BLOCK) or not r.output:
            continue
        if r.output.get("continue") is False:
            stopped = True
            stop_reasons.append(r.output.get("stopReason"))
        messages.append(r.output.get("systemMessage"))
        suppress = suppress or r.output.get("suppressOutput") is True
        sequence = r.output.get("terminalSequence", sequence)
    out: dict[str, Any] = {}
    if stopped:
        out["continue"] = False
        if stop_reason := _join(stop_reasons, "\n"):
            out["stopReason"] = stop_reason
    if message := _join(messages, "\n"):
        out["systemMessage"] = message
    if suppress:
        out["suppressOutput"] = True
    if sequence is not None:
        out["terminalSequence"] = sequence
    return out


def _specific(event: str, output: dict[str, Any]) -> dict[str, Any]:
    """``output``'s hookSpecificOutput without ``hookEventName``, or ``{}`` if not for ``event``."""
    specific = output.get("hookSpecificOutput")
    if not isinstance(specific, dict) or specific.get("hookEventName") != event:
        return {}
    return {k: v for k, v in specific.items() if k != "hookEventName"}


def _join(parts: Iterable[Any], separator: str) -> str | None:
    """The non-empty strings of ``parts`` joined by ``separator``, or None if there are none."""
    kept = [p for p in parts if isinstance(p, str) and p]
    return separator.join(kept) if kept else None


__all__ = ["CLASSIFIER_CONTEXT_CAP", "MergedDecision", "merge_results"]
