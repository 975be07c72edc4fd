"""What a handler runner is given, and the runner protocol.

When the policy keeps session state (``hookbus.session``, or a ``when:``), ``http``, ``command``
and ``function`` handlers get the session as it was before the event under ``hookbus.session``
in their input (:attr:`HookContext.payload`, :attr:`HookContext.given_input`): the facts set and
each budget's counter, limit, used and remaining amount.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from bus.hooks.events import DEFAULT_TIMEOUT_S, default_timeout_s, event_spec
from bus.hooks.results import HandlerResult
from bus.policy.loading import HandlerEntry, Policy
from bus.stream.protocol import Request
from workers.services import Services


@dataclasses.dataclass(slots=True)
class HookContext:
    """One handler about to run on one event."""

    request: Request
    hook_input: dict[str, Any]
    entry: HandlerEntry
    policy: Policy
    timeout_s: float
    services: Services | None = None
    #: Set when the async worker runs the handler: the delivery's ``webhook-id`` (same on every try).
    delivery_id: str = ""
    #: The session before the event (:func:`bus.session.effects.handed`); None: the policy keeps none.
    session: dict[str, Any] | None = None

    @property
    def payload(self) -> bytes:
        """The input as sent to the handler: the agent's bytes as they came, with ``hookbus.session``
        added as the last key when there is a session (an input's own ``hookbus`` is replaced)."""
        raw = self.request.payload
        if self.session is None:
            return raw
        given = orjson.dumps({"session": self.session})
        body = raw.rstrip()
        if "hookbus" in self.hook_input or not body.endswith(b"}"):
            return orjson.dumps(self.given_input)
        head = body[:-1].rstrip()
        return head + (b"" if head.endswith(b"{") else b",") + b'"hookbus":' + given + b"}"

    @property
    def given_input(self) -> dict[str, Any]:
        """The parsed input as given to the handler (``hookbus.session`` added, as :attr:`payload`)."""
        if self.session is None:
            return self.hook_input
        return {**self.hook_input, "hookbus": {"session": self.session}}

    @property
    def event(self) -> str:
        return self.request.event

    @property
    def blocking(self) -> bool:
        return event_spec(self.request.event).blocking


Runner = Callable[[HookContext], Awaitable[HandlerResult]]

__all__ = ["DEFAULT_TIMEOUT_S", "HookContext", "Runner", "default_timeout_s"]
