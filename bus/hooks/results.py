"""What one handler run produced, in a form every handler type shares.

A :class:`HandlerResult` is the common currency between the handler runners
(``workers/``) and :mod:`bus.hooks.merge`: a command's exit code and stdout, an http hook's
response, a rule's verdict and a Python function's return value all end up as one.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class Outcome(enum.StrEnum):
    """How a handler run ended, in Claude Code's terms."""

    #: Exit 0 (or 2xx, or a successful in-process evaluation); ``output``/``text`` hold the answer.
    OK = "ok"
    #: Exit 2: a blocking error; ``reason`` holds the JSON reason or stderr.
    BLOCK = "block"
    #: A non-blocking error: other exit codes without valid JSON, non-2xx, bad JSON, crashes.
    ERROR = "error"
    #: The handler ran past its timeout and was cancelled; no decision.
    TIMEOUT = "timeout"


@dataclasses.dataclass(slots=True)
class HandlerResult:
    """The result of running one handler on one event.

    ``output`` is the handler's JSON output object, already checked against the event's
    schema (camelCase keys, ``hookSpecificOutput`` only when its ``hookEventName`` matches).
    ``text`` is plain (non-JSON) stdout, which Claude Code adds to the context on a few
    events. ``reason`` is the blocking message for :attr:`Outcome.BLOCK` and the error text
    for :attr:`Outcome.ERROR` / :attr:`Outcome.TIMEOUT`.
    """

    outcome: Outcome
    output: dict[str, Any] | None = None
    text: str | None = None
    reason: str | None = None
    handler_type: str = ""
    handler_id: str = ""
    duration_s: float = 0.0
    fail_closed: bool = False
    shadow: bool = False
    #: For a failure: whether trying again may help (a connection error, a timeout, a 5xx or 429),
    #: as opposed to a refusal that would repeat (another 4xx, a command's exit 2). Async retries read it.
    retryable: bool = True
    #: The earliest retry the other side asked for (an http hook's ``Retry-After``), in seconds.
    retry_after_s: float | None = None
    #: ``(decision, reason)`` of this result merged alone, when its runner knows them (a rule's
    #: verdict): an event that only this result answers then needs no merge.
    decided: tuple[str, str | None] | None = None
    #: The permission rule a ``rule`` handler's verdict came from (its text, ``Bash(git push *)``).
    rule: str | None = None

    @property
    def failed(self) -> bool:
        outcome = self.outcome  # identity: comparing a StrEnum by value costs a str comparison each
        return outcome is Outcome.ERROR or outcome is Outcome.TIMEOUT


def with_note(result: HandlerResult, note: str) -> HandlerResult:
    """``result`` with ``note`` added to its reason (that of a deny, an ask or a block, wherever
    its output carries one), in place; one that says nothing is left as it is."""
    output = result.output
    if not note or not output:
        return result
    specific = output.get("hookSpecificOutput")
    changed = False
    if isinstance(specific, dict):
        specific = dict(specific)
        if isinstance(specific.get("permissionDecisionReason"), str):
            specific["permissionDecisionReason"] += note
            changed = True
        decision = specific.get("decision")
        if isinstance(decision, dict) and isinstance(decision.get("message"), str):
            specific["decision"] = {**decision, "message": decision["message"] + note}
            changed = True
        output = {**output, "hookSpecificOutput": specific}
    if isinstance(output.get("reason"), str):
        output = {**output, "reason": output["reason"] + note}
        changed = True
    if not changed:
        return result
    result.output = output
    if result.decided is not None and result.decided[1] is not None:
        result.decided = (result.decided[0], result.decided[1] + note)
    if result.reason:
        result.reason += note
    return result


__all__ = ["HandlerResult", "Outcome", "with_note"]
