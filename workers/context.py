"""What a handler runner is given, and the runner protocol."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from bus.events import event_spec
from bus.keys import Keyspace
from bus.policy import HandlerEntry, Policy
from bus.protocol import Request
from bus.results import HandlerResult
from bus.settings import Settings

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


@dataclasses.dataclass
class Services:
    """What runners share within one dispatcher or worker process.

    ``redis`` reads hookbus's own keys (the agent hook's decision-log tool, ``once``);
    ``http`` is the one outbound HTTP client, created lazily with the SSRF guard.
    """

    settings: Settings
    redis: aioredis.Redis | None = None
    http_client: Any = None
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def keys(self) -> Keyspace:
        return self.settings.keys

    async def aclose(self) -> None:
        if self.http_client is not None:
            await self.http_client.aclose()
            self.http_client = None


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

__all__ = ["DEFAULT_TIMEOUT_S", "HookContext", "Runner", "Services", "default_timeout_s"]
