"""Which ``ask`` goes to the central approval queue, and whether it applies to one request.

The dispatcher marks an ``ask`` made by a handler with ``approval: true`` (:func:`queued_ask`);
the gateway, which knows the agent and whether it runs headless, sends it to the queue when
``hookbus.approvals`` covers the request (:func:`applies`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from bus.hooks.decisions import Decision
from bus.policy.approvals import ApprovalsSettings
from bus.policy.entries import HandlerEntry


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
) -> dict[str, str] | None:
    """``{"rule", "reason"}`` when ``event``'s ``ask`` came from a handler marked ``approval: true``
    (``entries``: the event's handlers), else None (the ask goes to the agent as always)."""
    if not settings.enabled or decision != Decision.ASK or event not in settings.events:
        return None
    deciders = set(decided_by)
    marked = [entry for entry in entries if entry.handler_id in deciders and entry.handler.approval]
    if not marked:
        return None
    text = reason or "hookbus policy asks a person to approve this"
    return {"rule": rule_key(marked[0].handler_id, text), "reason": text}


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


def call_digest(session_id: str, hook_input: Mapping[str, Any]) -> str:
    """One tool call of one session, however often it is sent (a retry, ``claude -p --resume``):
    its event, tool and input."""
    call = [session_id, hook_input.get("hook_event_name"), hook_input.get("tool_name"), hook_input.get("tool_input")]
    return hashlib.sha256(orjson.dumps(call, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


__all__ = ["applies", "call_digest", "queued_ask", "rule_key"]
