"""What a pending approval holds, and the answer each of its outcomes gives the agent.

An approval is the ``ask`` of one event held for a person: the event and its tool call, the
rule and reason, the agent, the session's recent trail (its last events and facts), who sent it (a digest of the token,
never the token) and a deadline. It ends approved (once, for the session, or always; maybe with
an edited tool input), denied (with a reason the model reads) or expired (the
``onTimeout`` verdict: a deny, or the ask passed to the agent; never an allow).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

import orjson

from bus.hooks.decisions import Decision
from bus.stream.protocol import iso_time


class Status(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


class Outcome(enum.StrEnum):
    """How an ask for a person ended, as ``hookbus_approvals_total{outcome}`` counts it."""

    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    #: The tenant's queue was full: the timeout's verdict at once.
    OVERFLOW = "overflow"
    #: Answered by an earlier "approve for the session" of the same rule.
    SESSION = "session"
    #: Allowed by a rule an earlier "approve always" wrote into the policy (``approved``).
    ALWAYS = "always"


#: Every outcome, for the metric's series at 0.
OUTCOMES = tuple(Outcome)
#: What an approval covers: this call, the rule for the rest of the session, or always (a policy version).
SCOPES = ("once", "session", "always")


@dataclasses.dataclass(slots=True)
class Approval:
    """One approval: the immutable ask (``doc`` in Redis) and its state."""

    id: str
    tenant: str
    event_id: str
    event: str
    session_id: str
    agent: str
    tool_name: str
    tool_input: Any
    reason: str
    rule: str
    #: A digest of the sending token (or the managed token's id): it may never answer.
    requester: str
    created_ms: int
    deadline_ms: int
    on_timeout: str = "deny"
    #: Approvers needed (2 under the two-person rule).
    need: int = 1
    partition: int = 0
    trail: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: The session's facts (session policy) when it asked, by name.
    facts: list[str] = dataclasses.field(default_factory=list)
    cwd: str = ""
    status: str = Status.PENDING
    answer: dict[str, Any] = dataclasses.field(default_factory=dict)
    approvers: list[str] = dataclasses.field(default_factory=list)

    _STATE = ("status", "answer", "approvers")

    def doc(self) -> bytes:
        return orjson.dumps(
            {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in self._STATE}
        )

    @classmethod
    def from_hash(cls, fields: Mapping[bytes, bytes]) -> Approval:
        approval = cls(**orjson.loads(fields[b"doc"]))
        approval.status = fields.get(b"status", b"pending").decode()
        approval.answer = orjson.loads(fields[b"answer"]) if fields.get(b"answer") else {}
        approval.approvers = orjson.loads(fields[b"approvers"]) if fields.get(b"approvers") else []
        return approval

    def hook_input(self) -> dict[str, Any]:
        """The call as a hook input (what an edited input is checked against, what a record stores)."""
        call = {
            "hook_event_name": self.event,
            "session_id": self.session_id,
            "tool_name": self.tool_name,
            "tool_input": self.tool_input,
        }
        return {**call, "cwd": self.cwd} if self.cwd else call

    def view(self) -> dict[str, Any]:
        """The approval as the API, the CLI and the console show it (no requester digest)."""
        return {
            "id": self.id,
            "tenant": self.tenant,
            "status": self.status,
            "event_id": self.event_id,
            "event": self.event,
            "session_id": self.session_id,
            "agent": self.agent,
            "tool_name": self.tool_name,
            "tool_input": self.tool_input,
            "cwd": self.cwd or None,
            "reason": self.reason,
            "created": iso_time(self.created_ms),
            "deadline": iso_time(self.deadline_ms),
            "deadline_ms": self.deadline_ms,
            "on_timeout": self.on_timeout,
            "approvers_needed": self.need,
            "approvers": self.approvers,
            "trail": self.trail,
            "facts": self.facts,
            "answer": self.answer or None,
        }


def verdict_output(event: str, verdict: str, reason: str, updated_input: Any = None) -> dict[str, Any]:
    """Claude Code's output for ``verdict`` (allow, deny, ask, defer) on ``event`` (the gateway
    translates it into the agent's own format)."""
    if event == "PermissionRequest":
        if verdict not in ("allow", "deny"):
            return {}  # no opinion: the agent shows its own permission dialog
        decision: dict[str, Any] = {"behavior": verdict}
        if verdict == "deny":
            decision["message"] = reason
        elif updated_input is not None:
            decision["updatedInput"] = updated_input
        return {"hookSpecificOutput": {"hookEventName": event, "decision": decision}}
    specific: dict[str, Any] = {
        "hookEventName": event,
        "permissionDecision": verdict,
        "permissionDecisionReason": reason,
    }
    if verdict == "allow" and updated_input is not None:
        specific["updatedInput"] = updated_input
    return {"hookSpecificOutput": specific}


def timeout_output(event: str, on_timeout: str, why: str) -> tuple[dict[str, Any], str]:
    """What the agent gets when nobody answered (``why`` says so): never an allow."""
    verdict = Decision.ASK if on_timeout == "ask" else Decision.DENY
    return verdict_output(event, verdict, why), verdict


def answer_output(approval: Approval) -> tuple[dict[str, Any], str]:
    """The agent's answer from a settled approval, and its decision label."""
    answer = approval.answer
    who = ", ".join(approval.approvers) or str(answer.get("by") or "a person")
    if approval.status == Status.APPROVED:
        scope = answer.get("for", "once")
        reason = f"approved by {who} in hookbus (approval {approval.id}, {scope})"
        return verdict_output(approval.event, Decision.ALLOW, reason, answer.get("input")), Decision.ALLOW
    if approval.status == Status.DENIED:
        why = answer.get("reason") or "no reason given"
        reason = f"denied by {who} in hookbus (approval {approval.id}): {why}"
        return verdict_output(approval.event, Decision.DENY, reason), Decision.DENY
    return timeout_output(
        approval.event, approval.on_timeout, f"nobody approved this in time: hookbus approval {approval.id} expired"
    )


def pending_output(approval: Approval, defer: bool, spent: bool = False) -> tuple[dict[str, Any], str]:
    """The answer while the approval is still pending: ``defer`` (a headless Claude Code run stops
    and ``claude -p --resume`` asks again), else a deny telling the model to retry later (also
    when another call took the approval's allow: ``spent``)."""
    if spent:
        reason = f"hookbus approval {approval.id} was given to another call of the same command; try again"
        return verdict_output(approval.event, Decision.DENY, reason), Decision.DENY
    if defer:
        reason = f"waiting for a person to answer hookbus approval {approval.id}"
        return verdict_output(approval.event, Decision.DEFER, reason), Decision.DEFER
    reason = (
        f"this call waits for a person to approve it (hookbus approval {approval.id}, until "
        f"{iso_time(approval.deadline_ms)}); try the same call again later to get the answer"
    )
    return verdict_output(approval.event, Decision.DENY, reason), Decision.DENY


__all__ = [
    "OUTCOMES",
    "SCOPES",
    "Approval",
    "Outcome",
    "Status",
    "answer_output",
    "pending_output",
    "timeout_output",
    "verdict_output",
]
