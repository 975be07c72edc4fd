"""What every handler runner of one dispatcher or worker process shares: settings, Redis, the HTTP client."""

from __future__ import annotations

import dataclasses
from typing import Any

import redis.asyncio as aioredis

from bus.redis.keys import Keyspace
from bus.runtime.settings import Settings


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


__all__ = ["Services"]
