"""The one retry curve of hookbus, and the one way to run a task in the background.

Every loop that retries Redis (the reply reader, the spool, the outbox, the dispatcher's
read loop, the arq worker) waits by :class:`Backoff`: redis-py's equal-jitter exponential
backoff, from 50 ms up to 2 s, so that a fleet of processes does not reconnect in step
after a Redis restart. :class:`BackgroundTask` is the start/stop pattern those loops share;
:func:`every` runs a step at a fixed interval until told to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from redis.backoff import EqualJitterBackoff

logger = logging.getLogger("hookbus")

BASE_DELAY_S = 0.05
MAX_DELAY_S = 2.0


class Backoff:
    """Delays for consecutive failures: :meth:`next_delay_s` after each, :meth:`reset` on success."""

    def __init__(self, base_s: float = BASE_DELAY_S, cap_s: float = MAX_DELAY_S) -> None:
        self._curve = EqualJitterBackoff(cap=cap_s, base=base_s)
        self.failures = 0

    def next_delay_s(self) -> float:
        self.failures += 1
        return float(self._curve.compute(self.failures))

    def reset(self) -> None:
        self.failures = 0

    async def wait(self, stop: asyncio.Event | None = None) -> None:
        """Sleep the next delay; return early when ``stop`` is set."""
        delay_s = self.next_delay_s()
        if stop is None:
            await asyncio.sleep(delay_s)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay_s):
                await stop.wait()


async def every(
    interval_s: float, step: Callable[[], Awaitable[object]], stop: asyncio.Event, log: logging.Logger, failed: str
) -> None:
    """Await ``step()`` every ``interval_s`` until ``stop`` is set; a step that raises is logged
    (``failed``: what was not done) and the next turn comes as usual."""
    while not stop.is_set():
        try:
            await step()
        except Exception as exc:
            log.warning("%s: %s", failed, exc)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval_s):
                await stop.wait()


class BackgroundTask:
    """One named asyncio task: :meth:`start` runs ``target``, :meth:`stop` cancels and awaits it."""

    def __init__(self, target: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self._target = target
        self.name = name
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._target(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


__all__ = ["BASE_DELAY_S", "MAX_DELAY_S", "BackgroundTask", "Backoff", "every"]
