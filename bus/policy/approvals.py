"""``hookbus.approvals``: which ``ask`` answers go to the central approval queue, and how long they wait.

A handler (or a matcher group) with ``approval: true`` sends its ``ask`` to the queue; this
section says for which tenants, agents and events that holds, whether always or only where
the agent cannot ask a person itself, how long a person has to answer and what the agent gets
when nobody does (a deny by default, never an allow).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

#: The events whose ``ask`` can wait for a person (their outputs carry an allow and a deny).
APPROVAL_EVENTS: Final = ("PreToolUse", "PermissionRequest")
ApprovalEvent = Literal["PreToolUse", "PermissionRequest"]
_PRE_TOOL_USE: ApprovalEvent = "PreToolUse"


class ApprovalsSettings(BaseModel):
    """The ``hookbus.approvals`` section (off unless ``enabled``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)

    enabled: bool = False
    #: The tenants whose asks are queued; None: every tenant.
    tenants: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None
    #: The agents (dialect names) whose asks are queued; None: every agent.
    agents: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None
    events: Annotated[list[ApprovalEvent], Field(min_length=1)] = Field(default_factory=lambda: [_PRE_TOOL_USE])
    #: ``always``, or ``headless``: only where the agent cannot ask a person itself (an agent
    #: without an ``ask``, or a request that says it runs headless).
    when: Literal["always", "headless"] = "always"
    #: How long a person has to answer, from the ask.
    timeout_seconds: Annotated[float, Field(gt=0, le=7 * 86400)] = Field(default=300.0, alias="timeoutSeconds")
    #: What the agent gets when nobody answered in time: a deny, or the ask passed to the agent.
    on_timeout: Literal["deny", "ask"] = Field(default="deny", alias="onTimeout")
    #: The longest a gateway holds one hook request open for an answer (the agent's hook
    #: timeout must be longer); past it the agent is told the approval is still pending.
    hold_seconds: Annotated[float, Field(gt=0, le=3600)] = Field(default=280.0, alias="holdSeconds")
    #: Pending approvals per tenant; past it a new ask gets the timeout's verdict at once.
    max_pending: Annotated[int, Field(ge=1, le=1_000_000)] = Field(default=1000, alias="maxPending")
    #: Rules (as their reason names them, or a handler's ``reason``) that need two approvers.
    two_person: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list, alias="twoPerson")
    #: Claude Code runs that say they are headless get ``defer`` (``claude -p --resume`` picks up the answer).
    defer_headless: bool = Field(default=True, alias="deferHeadless")
    #: Permission rules approved for good ("approve always"): a call one of them matches is
    #: allowed without asking. Layers add to the list (:func:`merged_setting`).
    approved: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    #: A Standard Webhooks endpoint told of each new pending approval (a Slack or Teams incoming
    #: webhook takes its ``text`` as it is); sent by the dispatchers through the SSRF guard.
    webhook: Annotated[str, Field(pattern=r"^https?://[^/\s]+")] | None = None
    #: ``$VAR`` holding the webhook's ``whsec_`` secret: the notices are signed.
    webhook_secret: Annotated[str, Field(pattern=r"^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?$")] | None = Field(
        default=None, alias="webhookSecret"
    )
    #: How long an answered approval (and a session grant) is kept for retries and ``--resume``.
    keep_seconds: Annotated[float, Field(gt=0)] = Field(default=86400.0, alias="keepSeconds")


def merged_setting(key: str, earlier: Any, later: Any) -> Any:
    """A ``hookbus:`` key as a later policy file (or layer) leaves it: the later value, except
    ``deadlines`` (merged per event) and ``approvals`` (merged per key; ``approved`` lists add up,
    so a tenant's "approve always" version keeps the org's approval settings)."""
    if key not in ("deadlines", "approvals") or not isinstance(earlier, dict) or not isinstance(later, dict):
        return later
    merged = {**earlier, **later}
    if key == "approvals" and isinstance(earlier.get("approved"), list) and isinstance(later.get("approved"), list):
        merged["approved"] = [*earlier["approved"], *later["approved"]]
    return merged


__all__ = ["APPROVAL_EVENTS", "ApprovalsSettings", "merged_setting"]
