"""The decision-log record of one event, as the dispatcher writes it: built, then masked (a large
input in a worker thread, within a budget), or a note in place of the input when it cannot be."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any, Final

import orjson

from bus.decisionlog.masking import redact_record
from bus.hooks.decisions import Decision, FailOpenReason, RecordOutcome
from bus.hooks.merge import MergedDecision
from bus.redaction.redact import Redactor
from bus.redaction.scan import OverBudget, masking_deadline
from bus.stream.protocol import LogRecord, Reply, Request, now_ms
from workers.engine.evaluation import Evaluation
from workers.engine.judging import Refused, offload

logger = logging.getLogger("hookbus.dispatcher")

#: Hook inputs up to this size are masked on the event loop; larger ones in a worker thread.
INLINE_MASK_BYTES: Final = 64 * 1024
#: The most masking a large input may take (its reply does not wait for it): past it, a note is stored instead.
_MASK_BUDGET_S = 0.25


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


def evaluation_reply(request: Request, evaluation: Evaluation) -> Reply:
    """The reply to ``request`` that ``evaluation`` makes: its merged answer and each handler's type,
    duration and outcome."""
    hooks = [(r.handler_type, round(r.duration_s, 6), r.outcome.value) for r in evaluation.results]
    merged = evaluation.merged
    return Reply(request.event_id, merged.output, merged.decision, evaluation.fail_open, hooks, evaluation.approval)


async def stored_record(
    redactor: Redactor,
    revision: str,
    request: Request,
    outcome: RecordOutcome,
    fail_open: FailOpenReason | None,
    evaluation: Evaluation | None,
    hook_input: dict[str, Any] | None,
) -> tuple[LogRecord, bytes]:
    """The record to write, masked by ``redactor``, and its JSON (``meta()``; b"" if not encoded);
    whatever goes wrong, a record all the same: its input replaced by a note saying why (a settle
    must never wait on it)."""
    build = functools.partial(build_record, request, outcome, fail_open, evaluation, hook_input, revision)
    try:
        if len(request.payload) > INLINE_MASK_BYTES:  # masking a large input: off the event loop, bounded
            budget_s = max(0.05, min(_MASK_BUDGET_S, request.remaining_s() / 2)) if request.blocking else _MASK_BUDGET_S
            masked = await offload(request.tenant, budget_s, _masked, redactor, build, hook_input)
            if isinstance(masked, Refused):  # past its budget: the input is not stored, a note says why
                raise OverBudget(f"masking did not run: {masked.why}")
            record = masked
        else:
            record = redact_record(redactor, build(), hook_input)  # secrets never reach the log
        return record, record.meta()  # it can be written
    except Exception as exc:  # RecursionError, orjson.JSONEncodeError, ...: never a poison entry
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        logger.error(
            "the record of %s %s cannot be stored as it is (%s); storing a note instead",
            request.event,
            request.event_id,
            why,
        )
    record = build_record(request, outcome, fail_open, None, {}, revision)
    record.payload = orjson.dumps({"hookbus_note": f"the hook input is not stored: {why}"})
    if evaluation is not None:
        record.decision = evaluation.merged.decision
        with contextlib.suppress(Exception):  # the output too when it can be masked and written
            output = redactor.value(evaluation.merged.output, ("output",))
            orjson.dumps(output)
            record.output = output
    return record, b""


def _masked(
    budget_s: float, redactor: Redactor, build: Callable[[], LogRecord], hook_input: dict[str, Any] | None
) -> LogRecord:
    with masking_deadline(budget_s):
        return redact_record(redactor, build(), hook_input)


__all__ = ["INLINE_MASK_BYTES", "build_record", "evaluation_reply", "stored_record"]
