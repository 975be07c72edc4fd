"""What a hook request over a limit gets: the limit it met, and the answer a blocking event gets.

Rate limits (:mod:`gateway.ratelimit`) and in-flight budgets (:mod:`gateway.inflight`) are kept
per session, per token and per tenant, so a session or token that floods runs out of its own
budget long before its tenant's, and its teammates keep theirs.

An event the agent waits on is never answered with a status code: agents treat a ``429`` as
"proceed" (Claude Code's ``http`` hooks, the ``hookbus hook`` shim) or as a deny (Copilot's), so
the answer would depend on the agent, not on the policy. It is answered ``200`` in the agent's
format, as ``hookbus.whenLimited`` says: ``open`` (the default, hookbus's fail mode) is no
opinion, ``closed`` a deny (a block, on events that take one) whose reason says which limit was
met. Stop and SubagentStop always get no opinion: blocking them would keep the agent working.
The answer says so in ``X-Hookbus-Outcome``: ``fail-open`` (what the ``hookbus hook`` shim and
the SDK already fail open on, or closed with ``--fail-closed``) or ``fail-closed``, and which
limit in ``X-Hookbus-Limited``. An event the agent does not wait on gets ``429`` with
``Retry-After`` (it is not recorded). Each is counted in ``hookbus_limited_total``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Final

from bus.errors import RequestRejected
from bus.hooks.events import STOP_EVENTS
from bus.hooks.merge import MergedDecision, merge_results
from bus.hooks.results import HandlerResult, Outcome


class Scope(enum.StrEnum):
    """Whose budget a limit is: narrowest first (the order a request's budgets are checked in)."""

    SESSION = "session"
    TOKEN = "token"  # noqa: S105 - a scope's name, not a secret
    TENANT = "tenant"


class LimitKind(enum.StrEnum):
    """Which limit: requests per second (shared in Redis), or bytes in flight at one gateway."""

    RATE = "rate"
    INFLIGHT = "inflight"


class LimitedOutcome(enum.StrEnum):
    """What a limited event got (the ``outcome`` of ``hookbus_limited_total``)."""

    #: A blocking event answered ``200`` with no opinion (``hookbus.whenLimited: open``).
    OPEN = "open"
    #: A blocking event answered ``200`` with a deny or block (``hookbus.whenLimited: closed``).
    CLOSED = "closed"
    #: A non-blocking event answered ``429``.
    REFUSED = "refused"


#: What the answer of a limited blocking event carries in ``X-Hookbus-Outcome``, by its outcome.
OUTCOME_HEADERS: Final = {"open": "fail-open", "closed": "fail-closed"}


@dataclasses.dataclass(frozen=True, slots=True)
class Limited:
    """A request that met a limit: which one, whose, and when trying again may succeed."""

    kind: LimitKind
    scope: Scope
    retry_after_s: float
    #: One line naming the limit and the setting that sets it.
    detail: str

    @property
    def code(self) -> str:
        return "rate_limited" if self.kind is LimitKind.RATE else "over_budget"

    @property
    def retry_after(self) -> str:
        """``Retry-After``: whole seconds, at least 1."""
        return str(max(1, math.ceil(self.retry_after_s)))

    def rejection(self) -> RequestRejected:
        """The ``429`` of a limited event the agent does not wait on."""
        return RequestRejected(429, self.code, self.detail, {"Retry-After": self.retry_after})

    def headers(self, outcome: LimitedOutcome) -> dict[str, str]:
        """The headers of the ``200`` answer of a limited blocking event that got ``outcome``."""
        return {
            "X-Hookbus-Outcome": OUTCOME_HEADERS[outcome],
            "X-Hookbus-Limited": f"{self.scope} {self.kind}",
            "Retry-After": self.retry_after,
        }


def limited_answer(event: str, limited: Limited, when_limited: str) -> tuple[MergedDecision, LimitedOutcome]:
    """The Claude Code hook output a limited blocking ``event`` gets under ``when_limited``
    (``hookbus.whenLimited``: ``open`` or ``closed``), and what it amounts to."""
    if when_limited != "closed" or event in STOP_EVENTS:
        return merge_results(event, ()), LimitedOutcome.OPEN
    reason = f"hookbus: not checked, so refused (hookbus.whenLimited: closed): {limited.detail}"
    if event == "PermissionRequest":
        deny = {"hookEventName": event, "decision": {"behavior": "deny", "message": reason}}
        result = HandlerResult(Outcome.OK, output={"hookSpecificOutput": deny}, reason=reason)
    else:
        result = HandlerResult(Outcome.BLOCK, reason=reason)
    return merge_results(event, [result]), LimitedOutcome.CLOSED


__all__ = ["OUTCOME_HEADERS", "LimitKind", "Limited", "LimitedOutcome", "Scope", "limited_answer"]
