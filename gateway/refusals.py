"""Hook inputs the gateway cannot judge, answered as denied: a refusal is never an error the agent runs past.

An authenticated request whose input cannot be judged is answered ``200`` in the agent's own
format as a deny (a block where its event takes one, ``decline`` on Elicitation), never with a
4xx or 5xx: Claude Code's ``http`` hooks, Copilot's and the shim all run the action on an
error. Such an input is:

* a body over ``HOOKBUS_MAX_BODY_BYTES`` (``payload_too_large``; read no further than the limit);
* a body that is not a JSON object (``invalid_json``, ``invalid_input``), JSON the parser
  refuses included (nested past its own depth limit);
* an input nested past ``hookbus.limits.nestingDepth`` (``too_deep``);
* ``hook_event_name`` / ``session_id`` missing or not strings, ``tool_name`` not a string or
  ``tool_input`` not an object (``missing_field``, ``invalid_field``);
* an agent input its dialect cannot translate: any exception of ``to_canonical``
  (``dialect_error``).

When the event is known and is not one the gateway would wait on (a non-blocking event, or
one no handler of the policy listens to), the refusal stays the 4xx it was. When the event is
not known (the body could not be read, or not translated), the answer is the one that denies
for the agent: Claude Code's top-level ``decision: "block"`` (a deny on PreToolUse, a block on
every event that takes one), and for any other agent its dialect's PreToolUse deny.

The reason (``hookbus cannot judge this hook input, so it is denied: ...``) is in the answer,
in the ``X-Hookbus-Refused`` header (the ``hookbus hook`` shim then exits 2 as well, so every
agent blocks), in the gateway's log, in a decision-log record (outcome ``decided``, the hook
input replaced by a note: it was not read, or not masked) and in
``hookbus_refused_inputs_total{reason}``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

import orjson

from bus.dialects.base import Dialect
from bus.hooks.decisions import Decision, RecordOutcome
from bus.hooks.merge import merge_results
from bus.hooks.results import HandlerResult, Outcome
from bus.stream.protocol import LogRecord, now_ms

#: The response header that says an input was refused, and why.
REFUSED_HEADER: Final = "X-Hookbus-Refused"
#: Why an input was refused: the ``reason`` label of ``hookbus_refused_inputs_total`` (the 4xx code it had).
REFUSED_REASONS: Final = (
    "payload_too_large",
    "invalid_json",
    "invalid_input",
    "missing_field",
    "invalid_field",
    "too_deep",
    "dialect_error",
)
#: Dialects that read Claude Code's own output format.
_CLAUDE_FORMAT: Final = frozenset({"claude", "sdk"})
#: At most this much of a refusal's detail goes into the answer and the header.
_DETAIL_CHARS: Final = 300


@dataclasses.dataclass(slots=True)
class Refusal:
    """One refused input: why (``code``, one of :data:`REFUSED_REASONS`, and ``detail``), and
    what is known of it (the canonical event, ``None`` when the input could not be read)."""

    code: str
    detail: str
    event: str | None = None
    session_id: str = ""
    tool_name: str = ""

    @property
    def reason(self) -> str:
        """The reason the agent reads: it cannot be judged, and why (one line, bounded)."""
        detail = " ".join(self.detail.split())[:_DETAIL_CHARS]
        return f"hookbus cannot judge this hook input, so it is denied: {detail}"

    @property
    def header(self) -> str:
        """The ``X-Hookbus-Refused`` value: the code and the detail, Latin-1 safe."""
        detail = " ".join(self.detail.split())[:_DETAIL_CHARS]
        return f"{self.code}: {detail}".encode("latin-1", "replace").decode("latin-1")


def refused_output(event: str | None, reason: str) -> tuple[dict[str, Any], str]:
    """The Claude Code output that denies ``event`` (``None``: not known) with ``reason``, and its decision."""
    if event is None:
        return {"decision": "block", "reason": reason}, Decision.DENY
    if event == "PermissionRequest":  # exit 2 means nothing there: a deny decision does
        deny = {"hookEventName": event, "decision": {"behavior": "deny", "message": reason}}
        return {"hookSpecificOutput": deny}, Decision.DENY
    merged = merge_results(event, [HandlerResult(Outcome.BLOCK, reason=reason, handler_type="gateway")])
    return merged.output, merged.decision


def agent_answer(speaker: Dialect, refusal: Refusal, output: dict[str, Any], agent_input: Any) -> dict[str, Any]:
    """``output`` (from :func:`refused_output`) as ``speaker``'s agent reads it.

    An unknown event gets the dialect's PreToolUse deny. A dialect that fails on the input it
    could not translate is asked again without it; failing that too, Claude Code's form is sent.
    """
    if speaker.name in _CLAUDE_FORMAT:
        return output
    event = refusal.event
    if event is None:
        event = "PreToolUse"
        specific = {"hookEventName": event, "permissionDecision": "deny", "permissionDecisionReason": refusal.reason}
        output = {**output, "hookSpecificOutput": specific}
    for given in (agent_input if isinstance(agent_input, dict) else {}, {}):
        try:
            return speaker.to_agent(event, output, given)
        except Exception:  # noqa: S112 - the input may be what broke the dialect: try without it
            continue
    return output


def refusal_record(
    refusal: Refusal,
    event_id: str,
    tenant: str,
    agent: str,
    output: dict[str, Any],
    decision: str,
    received_ms: int,
    revision: str,
) -> LogRecord:
    """The decision-log record of a refusal (the input replaced by a note: it was not masked)."""
    note = {"hookbus_note": f"the hook input is not stored: {refusal.reason}"}
    return LogRecord(
        event_id=event_id,
        event=refusal.event or "unknown",
        tenant=tenant,
        session_id=refusal.session_id,
        outcome=RecordOutcome.DECIDED,
        decision=decision,
        output=output,
        payload=orjson.dumps(note),
        received_ms=received_ms,
        decided_ms=now_ms(),
        revision=revision,
        tool_name=refusal.tool_name,
        reason=refusal.reason,
        agent=agent,
    )


__all__ = ["REFUSED_HEADER", "REFUSED_REASONS", "Refusal", "agent_answer", "refusal_record", "refused_output"]
