"""Holds non-blocking events in memory while Redis is down, and appends them when it is back.

Blocking events are never spooled (their agent has already been answered, fail-open), but
their audit record is: nothing an agent reported is dropped silently. The spool is bounded;
what overflows it is counted in ``hookbus_spooled_events_total{status="dropped"}``. A batch
Redis refuses for now (its disk full: ``MISCONF``, at maxmemory: ``OOM``, loading, read-only)
stays for the next try, as it does while Redis is down; only a batch it refuses for good (a
wrong command) is dropped, and counted.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable

from bus.errors import BusUnavailable
from bus.runtime.metrics import Metrics, process_metrics
from bus.runtime.retry import BackgroundTask, Backoff
from bus.stream.protocol import StreamFields

logger = logging.getLogger("hookbus.gateway")

Append = Callable[[list[tuple[str, StreamFields]]], Awaitable[None]]


class Spool:
    """A bounded in-memory queue of stream entries waiting for Redis."""

    def __init__(
        self, append: Append, max_entries: int = 100_000, retry_every_s: float = 0.5, metrics: Metrics | None = None
    ) -> None:
        self.metrics = metrics or process_metrics()
        self._append = append
        self._entries: collections.deque[tuple[str, StreamFields]] = collections.deque()
        self._max = max_entries
        self._wake = asyncio.Event()
        self._task = BackgroundTask(self._run, "hookbus-spool")
        self._backoff = Backoff(cap_s=retry_every_s)

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, stream: str, fields: StreamFields) -> None:
        if len(self._entries) >= self._max:
            self._entries.popleft()
            self.metrics.spooled.labels("dropped").inc()
        self._entries.append((stream, fields))
        self.metrics.spooled.labels("held").inc()
        self._wake.set()

    async def start(self) -> None:
        self._task.start()

    async def stop(self, last_try_s: float = 1.0) -> None:
        await self._task.stop()
        if self._entries:  # one last try: Redis may be back by now
            with contextlib.suppress(BusUnavailable, TimeoutError):
                async with asyncio.timeout(last_try_s):
                    while self._entries:
                        await self._flush_batch()
        if self._entries:
            logger.warning("stopping with %d spooled events not yet appended", len(self._entries))

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._entries:
                try:
                    await self._flush_batch()
                    self._backoff.reset()
                except BusUnavailable:
                    await self._backoff.wait()

    async def _flush_batch(self) -> None:
        """Append the oldest entries; raises BusUnavailable (and keeps them) while Redis is away or
        refuses them for now."""
        batch = list(itertools.islice(self._entries, 500))
        try:
            await self._append(batch)
        except BusUnavailable:
            raise
        except Exception:  # Redis refused the batch for good (the pipeline ran the rest): never retry it forever
            # (the append maps a refusal for now, MISCONF or OOM, to BusUnavailable: bus.redis.connection)
            logger.exception("dropping %d spooled events Redis refused", len(batch))
            self._remove(batch)
            self.metrics.spooled.labels("dropped").inc(len(batch))
            return
        self._remove(batch)
        self.metrics.spooled.labels("flushed").inc(len(batch))
        logger.info("appended %d spooled events", len(batch))

    def _remove(self, batch: list[tuple[str, StreamFields]]) -> None:
        # put() may have dropped the oldest entries while the append was in flight: remove
        # exactly what was sent (a prefix of what is left), not just as many entries.
        sent = {id(item) for item in batch}
        while self._entries and id(self._entries[0]) in sent:
            self._entries.popleft()


__all__ = ["Spool"]
