"""The decision-log record of one event, as the dispatcher writes it (before masking)."""

from __future__ import annotations

from typing import Any

from bus.hooks.decisions import Decision, FailOpenReason, RecordOutcome
from bus.hooks.merge import MergedDecision
from bus.stream.protocol import LogRecord, Request, now_ms
from workers.engine.evaluation import Evaluation


def build_record(
    request: Request,
    outcome: RecordOutcome,
    fail_open: FailOpenReason | None,
    evaluation: Evaluation | None,
    hook_input: dict[str, Any] | None,
    revision: str,
) -> LogRecord:
    """The record as it stands if the dispatcher's answer arrives in time (the settle script turns
    it into a fail-open record when it does not); ``revision``: the policy's, if the entry names none."""
    merged = evaluation.merged if evaluation else MergedDecision(output={}, decision=Decision.NONE, reason=None)
    if hook_input is None:  # not evaluated (expired entries): the log still names the session
        try:
            hook_input = request.hook_input()
        except ValueError:
            hook_input = {}
    session_id = str(hook_input.get("session_id", ""))
    tool_name = str(hook_input.get("tool_name") or "")
    hooks = []
    if evaluation is not None:
        hooks = [
            {
                "id": r.handler_id,
                "type": r.handler_type,
                "outcome": r.outcome.value,
                "duration_ms": round(r.duration_s * 1000, 3),
                "shadow": r.shadow,
                **({"decided": True} if r.handler_id in evaluation.decided_by else {}),
                **({"reason": r.reason} if r.reason else {}),
            }
            for r in evaluation.results
        ]
    record = LogRecord(
        event_id=request.event_id,
        event=request.event,
        tenant=request.tenant,
        session_id=session_id,
        agent=request.agent,
        tool_name=tool_name,
        outcome=outcome,
        fail_open=fail_open or "",
        decision=merged.decision,
        output=merged.output,
        payload=request.payload,
        received_ms=request.received_ms,
        decided_ms=now_ms(),
        revision=request.policy or revision,
        hooks=hooks,
        shadow=evaluation.shadow if evaluation else [],
        agent_id=str(hook_input.get("agent_id") or ""),
        agent_type=str(hook_input.get("agent_type") or ""),
        tool_use_id=str(hook_input.get("tool_use_id") or ""),
        reason=merged.reason or "",
        token_id=request.token_id,
        client_address=request.client_address,
        facts=evaluation.session.facts if evaluation is not None and evaluation.session is not None else [],
        budgets=evaluation.session.budgets if evaluation is not None and evaluation.session is not None else {},
    )
    return record


__all__ = ["build_record"]
