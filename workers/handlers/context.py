"""What a handler runner is given, and the runner protocol."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from bus.hooks.events import event_spec
from bus.hooks.results import HandlerResult
from bus.policy.loading import HandlerEntry, Policy
from bus.stream.protocol import Request
from workers.services import Services

#: Claude Code's default handler timeouts, in seconds.
DEFAULT_TIMEOUT_S = {
    "command": 600.0,
    "http": 600.0,
    "mcp_tool": 600.0,
    "prompt": 30.0,
    "agent": 60.0,
    "rule": 5.0,
    "function": 30.0,
}
_SHORT_EVENTS_S = {"UserPromptSubmit": 30.0, "PreModelSwitch": 30.0, "PostModelSwitch": 30.0, "MessageDisplay": 10.0}


def default_timeout_s(handler_type: str, event: str) -> float:
    """Claude Code's default timeout for ``handler_type`` on ``event``."""
    base = DEFAULT_TIMEOUT_S.get(handler_type, 600.0)
    if handler_type in ("command", "http", "mcp_tool"):
        return min(base, _SHORT_EVENTS_S.get(event, base))
    return base


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
