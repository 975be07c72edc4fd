"""Tool calls of a frozen tenant, answered by the gateway itself (:mod:`bus.freeze`).

The gateway looks a call up in its :class:`~bus.freeze.cache.FreezeCache` (no Redis call) before
any limit or dispatcher: a frozen ``PreToolUse`` (or ``PermissionRequest``) is denied at once, in
the agent's own format, with the freeze's reason, whether or not the policy listens to the event,
the dispatchers are up or Redis answers. So a freeze holds in fail-open and fail-closed modes
alike, and can only turn an answer into a deny. The deny is recorded like a dispatcher's (outcome
``decided``, the input masked, one ``freeze`` handler that decided), counted in
``hookbus_frozen_decisions_total{tenant}``, and answered with ``X-Hookbus-Frozen``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson

from bus.decisionlog.masking import redact_record
from bus.dialects.base import Dialect
from bus.freeze.freezes import FREEZE_HANDLER, Freeze
from bus.hooks.decisions import Decision, RecordOutcome
from bus.hooks.merge import MergedDecision, merge_results
from bus.policy.loading import Policy
from bus.redaction.redact import redactor_for
from bus.runtime.metrics import event_label
from bus.stream.protocol import LogRecord, Request, now_ms
from gateway.inflight import Ticket
from gateway.limits import Limited
from gateway.state import Gateway

#: The response header of a frozen call: the tenant it froze.
FROZEN_HEADER: Final = "X-Hookbus-Frozen"
#: Inputs past this size are not masked on the gateway's event loop: the record notes them instead.
_INLINE_MASK_BYTES: Final = 64 * 1024


class FrozenAnswers:
    """Answers and records the calls a freeze denies, for one gateway."""

    def __init__(self, gateway: Gateway, rate: Callable[[Ticket], Awaitable[Limited | None]]) -> None:
        self.gateway = gateway
        #: The freeze that denies a call (no I/O), else None.
        self.frozen = gateway.freezes.frozen
        self._rate = rate

    async def answer(
        self,
        freeze: Freeze,
        ticket: Ticket,
        speaker: Dialect,
        hook_input: dict[str, Any],
        body: bytes,
        agent_input: Any,
        policy: Policy,
        versions: str,
    ) -> tuple[bytes, dict[str, str]]:
        """The body and headers that deny ``hook_input``, and its record unless ``ticket``'s sender is
        over a rate limit (denied all the same: a flood of them fills no log)."""
        received_ms = now_ms()
        event_id = self.gateway.new_event_id()
        event = str(hook_input["hook_event_name"])
        result = freeze.result(event)
        merged = merge_results(event, [result])
        metrics = self.gateway.metrics
        metrics.child(metrics.frozen_decisions, freeze.tenant).inc()
        metrics.child(metrics.decisions, event_label(event), merged.decision).inc()
        metrics.child(metrics.events_by_agent, speaker.name, event_label(event)).inc()
        if await self._rate(ticket) is None:
            sender = (speaker.name, ticket.token_id or "", ticket.client_address)
            record = frozen_record(freeze, event_id, hook_input, body, merged, versions, received_ms, sender)
            await self._log(record, hook_input, body, policy)
        output = merged.output if speaker.name == "claude" else speaker.to_agent(event, merged.output, agent_input)
        headers = {
            "X-Hookbus-Event-Id": event_id,
            "X-Hookbus-Policy-Version": versions,
            "X-Hookbus-Outcome": RecordOutcome.DECIDED,
            FROZEN_HEADER: freeze.tenant,
        }
        return orjson.dumps(output), headers

    async def after_approval(
        self, request: Request, answer: tuple[dict[str, Any], str, str | None]
    ) -> tuple[dict[str, Any], str, str | None]:
        """``answer``, the answer to a call held for a person (:mod:`gateway.approvals`), unless its
        tenant was frozen while it was held: then the freeze's deny, recorded as the event's last word."""
        if answer[1] == Decision.DENY or not self.gateway.freezes.active():
            return answer
        hook_input = request.hook_input()
        freeze = self.frozen(request.tenant, request.event, hook_input.get("tool_name"))
        if freeze is None:
            return answer
        merged = merge_results(request.event, [freeze.result(request.event)])
        self.gateway.metrics.child(self.gateway.metrics.frozen_decisions, freeze.tenant).inc()
        policy, _ = self.gateway.registry.for_tenant(request.tenant)
        sender = (request.agent, request.token_id, request.client_address)
        args = (request.event_id, hook_input, request.payload, merged, request.policy, request.received_ms, sender)
        await self._log(frozen_record(freeze, *args), hook_input, request.payload, policy)
        return merged.output, merged.decision, None

    async def _log(self, record: LogRecord, hook_input: dict[str, Any], body: bytes, policy: Policy) -> None:
        """Mask ``record`` (of ``hook_input``, sent as ``body``) as ``policy`` says and log it."""
        parsed = hook_input if record.payload is body else None  # the note is not the input
        await self.gateway.log_record(redact_record(redactor_for(policy.settings.redact), record, parsed))


def frozen_record(
    freeze: Freeze,
    event_id: str,
    hook_input: dict[str, Any],
    body: bytes,
    merged: MergedDecision,
    versions: str,
    received_ms: int,
    sender: tuple[str, str, str],
) -> LogRecord:
    """The decision-log record of a frozen call (``sender``: its agent, token id and client address),
    before masking (an input past :data:`_INLINE_MASK_BYTES` is replaced by a note: it is not masked
    on the event loop)."""
    payload = body
    if len(body) > _INLINE_MASK_BYTES:
        payload = orjson.dumps(
            {"hookbus_note": f"the hook input ({len(body)} bytes) is not stored: {freeze.deny_reason}"}
        )
    entry = {"id": FREEZE_HANDLER, "type": FREEZE_HANDLER, "outcome": "block", "duration_ms": 0.0, "shadow": False}
    return LogRecord(
        event_id=event_id,
        event=str(hook_input["hook_event_name"]),
        tenant=freeze.tenant,
        session_id=str(hook_input.get("session_id", "")),
        agent=sender[0],
        tool_name=str(hook_input.get("tool_name") or ""),
        outcome=RecordOutcome.DECIDED,
        decision=merged.decision,
        output=merged.output,
        payload=payload,
        received_ms=received_ms,
        decided_ms=now_ms(),
        revision=versions,
        hooks=[{**entry, "decided": True, "reason": freeze.deny_reason}],
        agent_id=str(hook_input.get("agent_id") or ""),
        agent_type=str(hook_input.get("agent_type") or ""),
        tool_use_id=str(hook_input.get("tool_use_id") or ""),
        reason=merged.reason or "",
        token_id=sender[1],
        client_address=sender[2],
    )


__all__ = ["FROZEN_HEADER", "FrozenAnswers", "frozen_record"]
