"""Which ``ask`` goes to the central approval queue, and whether it applies to one request.

The dispatcher marks an ``ask`` made by a handler with ``approval: true`` (:func:`queued_ask`);
the gateway, which knows the agent and whether it runs headless, sends it to the queue when
``hookbus.approvals`` covers the request (:func:`applies`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from bus.hooks.decisions import Decision
from bus.policy.approvals import ApprovalsSettings
from bus.policy.entries import HandlerEntry
from bus.policy.rulelists import RuleList, compile_rules, first_verdict
from bus.policy.schema import RuleHandler


def rule_key(handler_id: str, reason: str) -> str:
    """What "the same rule" is for a session grant: the handler and the rule its reason names."""
    return hashlib.sha256(f"{handler_id}\0{reason}".encode()).hexdigest()[:16]


def queued_ask(
    settings: ApprovalsSettings,
    entries: Iterable[HandlerEntry],
    event: str,
    decision: str,
    decided_by: Iterable[str],
    reason: str | None,
    matched: Mapping[str, str] | None = None,
) -> dict[str, str] | None:
    """``{"rule", "reason"}`` when ``event``'s ``ask`` came from a handler marked ``approval: true``
    (``entries``: the event's handlers), else None (the ask goes to the agent as always); with
    ``"matched"``, the permission rule that asked, when ``matched`` (handler id to the rule text
    its verdict came from) has one for the marked handler."""
    if not settings.enabled or decision != Decision.ASK or event not in settings.events:
        return None
    deciders = set(decided_by)
    marked = [entry for entry in entries if entry.handler_id in deciders and entry.handler.approval]
    if not marked:
        return None
    text = reason or "hookbus policy asks a person to approve this"
    queued = {"rule": rule_key(marked[0].handler_id, text), "reason": text}
    rule_text = next((matched[e.handler_id] for e in marked if matched and e.handler_id in matched), None)
    return queued if rule_text is None else {**queued, "matched": rule_text}


def approvers_needed(settings: ApprovalsSettings, approval: Mapping[str, str]) -> int:
    """2 when ``twoPerson`` names the ask (``approval``: :func:`queued_ask`'s): an entry equal to
    the permission rule that asked (``Bash(git push *)``) or contained in the ask's reason; else 1."""
    matched, reason = approval.get("matched"), approval.get("reason", "")
    return 2 if any(entry == matched or entry in reason for entry in settings.two_person) else 1


def applies(settings: ApprovalsSettings, tenant: str, agent: str, event: str, headless: bool, asks: bool) -> bool:
    """Whether ``hookbus.approvals`` sends this request's ``ask`` to the queue: its tenant, agent
    and event are covered and, under ``when: headless``, the agent cannot ask a person itself
    (``asks``: its dialect has an ``ask``; ``headless``: the request says it runs without a person)."""
    if not settings.enabled or event not in settings.events:
        return False
    if settings.tenants is not None and tenant not in settings.tenants:
        return False
    if settings.agents is not None and agent not in settings.agents:
        return False
    return settings.when == "always" or headless or not asks


def approved_always(settings: ApprovalsSettings, hook_input: dict[str, Any]) -> str | None:
    """The ``approved`` rule ("approve always") that allows this call, or None: read as a ``rule``
    handler's ``allow`` list reads it (a compound command must be allowed in every part)."""
    if not settings.approved:
        return None
    found = first_verdict(_approved_lists(tuple(settings.approved)), hook_input)
    return found[1] if found is not None and found[0] == "allow" else None


@functools.lru_cache(maxsize=64)
def _approved_lists(rules: tuple[str, ...]) -> tuple[RuleList, ...]:
    return compile_rules(RuleHandler(type="rule", allow=list(rules)))


def always_rule(tool_name: str, tool_input: Any) -> str:
    """The permission rule "approve always" writes for a call: the exact command or file, else
    ValueError (approving a whole tool for good is a policy edit, not an answer)."""
    if isinstance(tool_input, dict):
        for field in ("command", "file_path", "notebook_path", "url"):
            value = tool_input.get(field)
            if isinstance(value, str) and value and not any(c in value for c in ")*\n"):
                return f"{tool_name}({value})"
    raise ValueError(f"approve always needs a {tool_name} call with one command or path (one line, no ')' or '*')")


def call_digest(session_id: str, hook_input: Mapping[str, Any]) -> str:
    """One tool call of one session, however often it is sent (a retry, ``claude -p --resume``):
    its event, tool and input."""
    call = [session_id, hook_input.get("hook_event_name"), hook_input.get("tool_name"), hook_input.get("tool_input")]
    return hashlib.sha256(orjson.dumps(call, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


__all__ = ["always_rule", "applies", "approved_always", "approvers_needed", "call_digest", "queued_ask", "rule_key"]
