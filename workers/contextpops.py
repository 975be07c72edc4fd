"""Auto-pipelining of the dispatcher's pending-context pops.

Every blocking event of a policy with ``async`` handlers takes what those hooks left for its
session with one ``LPOP key count``. Every pop requested while such a round trip is in flight
(or in the same loop iteration) joins the next one: under load one pipeline carries many pops
(one write, one read, one connection), at low load a pop leaves at once. Each caller still
gets its own items or its own error: one refused pop (a key of the wrong type) does not fail
the others of its pipeline. The pipeline is not a transaction; each ``LPOP`` with a count is
atomic on its own, so two pops of one key never share an item.

On a Redis Cluster the pops are not coalesced: each session's key has a slot of its own, so a
pipeline would be split per slot-owning node anyway, and the concurrent pops of one slot are
too few to be worth a group each (the gateway's appends, many per stream, are). A pop there is
one command, as before, and a master that fails over holds up only its own slots' pops.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from bus.connection import deliver_results, is_cluster, redis_errors
from bus.errors import BusUnavailable

_Pop = tuple[str, int, "asyncio.Future[list[bytes]]"]


class ContextPops:
    """Coalesces concurrent ``LPOP key count`` into pipelined round trips (single Redis)."""

    def __init__(self, redis: aioredis.Redis, redis_url: str = "") -> None:
        """``redis_url`` only names the server in :class:`BusUnavailable` messages."""
        self.redis = redis
        self.redis_url = redis_url
        self._coalesce = not is_cluster(redis)
        self._pending: list[_Pop] = []
        self._flushing = False
        self._flusher: asyncio.Task[None] | None = None  # until its body ends
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    async def pop(self, key: str, count: int) -> list[bytes]:
        """Pop up to ``count`` items from the head of the list at ``key`` (``[]`` if none).

        Raises :class:`BusUnavailable` if Redis cannot be reached, and Redis's own error for
        this command otherwise (``WRONGTYPE`` for a key that is not a list).
        """
        if not self._coalesce:
            with redis_errors(self.redis_url):
                items: list[bytes] | None = await self.redis.lpop(key, count)  # type: ignore[misc]
            return items or []
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[bytes]] = loop.create_future()
        self._pending.append((key, count, future))
        if not self._flushing:
            self._flushing = True
            loop.call_soon(self._start_flush)
        return await future

    def _start_flush(self) -> None:
        task = asyncio.ensure_future(self._flush_all())
        self._flusher = task
        self._tasks.add(task)
        task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: its callers were told, the loop need not log it
        elif task is self._flusher:
            # Cancelled before its body ran (a loop shutting down): nobody else will answer these.
            self._fail_pending(BusUnavailable("context pop cancelled"))
            self._flushing, self._flusher = False, None

    def _fail_pending(self, exc: BaseException, also: list[_Pop] | None = None) -> None:
        waiting, self._pending = [*(also or []), *self._pending], []
        for _, _, future in waiting:
            if not future.done():
                future.set_exception(exc)

    async def _flush_all(self) -> None:
        try:
            while self._pending:
                # A caller cancelled before its pop is sent must not lose the items it would take.
                batch = [pop for pop in self._pending if not pop[2].done()]
                self._pending = []
                if not batch:
                    continue
                try:
                    results = await self._send(batch)
                except BusUnavailable as exc:
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                except BaseException as exc:  # never leave a caller waiting forever
                    # Nor those queued behind this round trip: no flush follows this one.
                    self._fail_pending(BusUnavailable(f"context pop failed: {exc!r}"), also=batch)
                    raise
                else:
                    deliver_results((future for _, _, future in batch), results, self.redis_url,
                                    lambda items: items or [])
        finally:
            self._flushing, self._flusher = False, None

    async def _send(self, batch: list[_Pop]) -> list[Any]:
        """One pipeline; per pop, its items (``None`` for none) or the error Redis answered with."""
        with redis_errors(self.redis_url):
            async with self.redis.pipeline(transaction=False) as pipe:
                for key, count, _ in batch:
                    pipe.lpop(key, count)
                results: list[Any] = await pipe.execute(raise_on_error=False)
        return results


__all__ = ["ContextPops"]
