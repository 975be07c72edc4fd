"""Holds non-blocking events in memory while Redis is down, and appends them when it is back.

Blocking events are never spooled (their agent has already been answered, fail-open), but
their audit record is: nothing an agent reported is dropped silently. The spool is bounded;
what overflows it is counted in ``hookbus_spooled_events_total{status="dropped"}``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable

from bus import metrics
from bus.errors import BusUnavailable

logger = logging.getLogger("hookbus.gateway")

Append = Callable[[list[tuple[str, dict[str, bytes | str | int]]]], Awaitable[None]]


class Spool:
    """A bounded in-memory queue of stream entries waiting for Redis."""

    def __init__(self, append: Append, max_entries: int = 100_000, retry_every_s: float = 0.5) -> None:
        self._append = append
        self._entries: collections.deque[tuple[str, dict[str, bytes | str | int]]] = collections.deque()
        self._max = max_entries
        self._retry_every_s = retry_every_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, stream: str, fields: dict[str, bytes | str | int]) -> None:
        if len(self._entries) >= self._max:
            self._entries.popleft()
            metrics.SPOOLED.labels("dropped").inc()
        self._entries.append((stream, fields))
        metrics.SPOOLED.labels("held").inc()
        self._wake.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="hookbus-spool")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._entries:
            logger.warning("stopping with %d spooled events not yet appended", len(self._entries))

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._entries:
                batch = list(self._entries)[:500]
                try:
                    await self._append(batch)
                except BusUnavailable:
                    await asyncio.sleep(self._retry_every_s)
                    continue
                for _ in batch:
                    self._entries.popleft()
                metrics.SPOOLED.labels("flushed").inc(len(batch))
                logger.info("appended %d spooled events", len(batch))


__all__ = ["Spool"]
