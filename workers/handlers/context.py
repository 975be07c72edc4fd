"""What a handler runner is given, and the runner protocol."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

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

    @property
    def event(self) -> str:
        return self.request.event

    @property
    def blocking(self) -> bool:
        return event_spec(self.request.event).blocking


Runner = Callable[[HookContext], Awaitable[HandlerResult]]

__all__ = ["DEFAULT_TIMEOUT_S", "HookContext", "Runner", "default_timeout_s"]
