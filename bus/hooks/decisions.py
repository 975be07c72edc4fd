"""The decisions hookbus makes, what an agent received, and why it got no decision: one enum each.

Each is a :class:`enum.StrEnum`, so a member is its wire value: the same strings in replies,
the decision log, JSON views, metric labels and filters.
"""

from __future__ import annotations

import enum


class Decision(enum.StrEnum):
    """The decision merged from every handler's answer to one event (``none``: no opinion)."""

    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"
    DEFER = "defer"
    BLOCK = "block"
    NONE = "none"


class RecordOutcome(enum.StrEnum):
    """What the agent received for an event, as the decision log records it."""

    #: A blocking event answered with the dispatchers' decision.
    DECIDED = "decided"
    #: A non-blocking event, recorded (its answer is always ``{}``).
    RECORDED = "recorded"
    #: Answered with no decision because something failed; the record names the reason. For a
    #: non-blocking event: answered while Redis was down, held in the gateway's spool.
    FAIL_OPEN = "fail-open"


class FailOpenReason(enum.StrEnum):
    """Why an agent got no decision (the action proceeds), as counted in ``hookbus_fail_open_total``."""

    #: No decision by the deadline.
    TIMEOUT = "timeout"
    #: Redis could not be reached or refused the write.
    REDIS_UNAVAILABLE = "redis_unavailable"
    #: The dispatcher failed while evaluating the event.
    DISPATCHER_ERROR = "dispatcher_error"
    #: A handler failed (non-blocking error); the others decided.
    HOOK_ERROR = "hook_error"
    #: A handler ran past its timeout; the others decided.
    HOOK_TIMEOUT = "hook_timeout"

    @property
    def answered_by_gateway(self) -> bool:
        """True when the agent got the gateway's empty fail-open answer, not a decision."""
        return self in (FailOpenReason.TIMEOUT, FailOpenReason.REDIS_UNAVAILABLE, FailOpenReason.DISPATCHER_ERROR)


__all__ = ["Decision", "FailOpenReason", "RecordOutcome"]
