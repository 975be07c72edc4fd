"""The decision-log record of how an ask for a person ended: who answered, when, the wait, the outcome.

The dispatcher's record of the event says ``ask``; the record written here, with the same event
id, says what the agent got in the end and carries ``approval`` (:attr:`LogRecord.approval`).
Inputs are masked as the dispatcher masks them.
"""

from __future__ import annotations

from typing import Any

import orjson

from bus.approvals.approval import Approval
from bus.decisionlog.masking import redact_record
from bus.hooks.decisions import RecordOutcome
from bus.redaction.redact import Redactor
from bus.stream.protocol import LogRecord, iso_time, now_ms


def approval_note(approval: Approval, outcome: str, **extra: Any) -> dict[str, Any]:
    """The ``approval`` field of a record: the approval, how it ended, who answered, the wait."""
    answer = approval.answer
    at_ms = int(answer.get("at_ms") or now_ms())
    note: dict[str, Any] = {
        "id": approval.id,
        "outcome": outcome,
        "asked": iso_time(approval.created_ms),
        "at": iso_time(at_ms),
        "wait_ms": max(0, at_ms - approval.created_ms),
    }
    if approval.approvers or answer.get("by"):
        note["by"] = approval.approvers or [answer["by"]]
    for key in ("for", "reason"):
        if answer.get(key):
            note[key] = answer[key]
    if answer.get("input") is not None:
        note["edited_input"] = True
    note.update(extra)
    return note


def unstored_note(approval: Approval, outcome: str, **extra: Any) -> dict[str, Any]:
    """:func:`approval_note` of an ask answered without storing an approval (``session``: an
    earlier session grant, ``overflow``: the tenant's queue was full, ``always``: an ``approved``
    rule): its ``id`` is null, since no approval by that id exists to look up."""
    return approval_note(approval, outcome, **extra) | {"id": None}


def answer_record(
    approval: Approval,
    event_id: str,
    output: dict[str, Any],
    decision: str,
    note: dict[str, Any],
    redactor: Redactor,
    hook_input: dict[str, Any] | None = None,
) -> LogRecord:
    """The record of ``event_id`` (the approval's event, or a later call answered from it)."""
    if hook_input is None:
        hook_input = approval.hook_input()
    record = LogRecord(
        event_id=event_id,
        event=approval.event,
        tenant=approval.tenant,
        session_id=approval.session_id,
        outcome=RecordOutcome.DECIDED,
        decision=decision,
        output=output,
        payload=orjson.dumps(hook_input),
        received_ms=approval.created_ms,
        decided_ms=now_ms(),
        tool_name=approval.tool_name,
        reason=str(note.get("reason") or approval.reason),
        agent=approval.agent,
        approval=note,
    )
    return redact_record(redactor, record, hook_input)


__all__ = ["answer_record", "approval_note", "unstored_note"]
