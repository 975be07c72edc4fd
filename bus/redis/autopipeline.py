"""Auto-pipelining: concurrent calls share one Redis round trip.

Every call made while a group's round trip is in flight (or in the same loop iteration)
joins the group's next one: under load one pipeline carries dozens of commands (one write,
one read, one connection), at low load a call leaves at once. Each caller still gets its own
result or its own error, mapped as :func:`bus.redis.connection.redis_errors` maps it: one command
Redis refuses does not fail the others of its pipeline. A caller is never left waiting: when a round trip
fails in a way nobody handled, or its flush is cancelled before it ran, every call queued
in the group is failed with :class:`~bus.errors.BusUnavailable`.

Groups are independent (on a Redis Cluster, one per partition: a master that fails over
holds up only its own group). The gateway's stream appends (:mod:`gateway.appends.batcher`) and the
dispatcher's context pops (:mod:`workers.engine.contextpops`) are built on it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from bus.errors import BusUnavailable
from bus.redis.connection import redis_errors

Item = TypeVar("Item")


class _FailsInto:
    """What stands for a call's future when its caller waits on another future (``waiter``) and
    needs to hear of the call only when it fails: its error goes to ``waiter``, its result nowhere."""

    __slots__ = ("waiter",)

    def __init__(self, waiter: asyncio.Future[Any]) -> None:
        self.waiter = waiter

    def done(self) -> bool:
        return self.waiter.done()

    def set_result(self, result: Any) -> None:
        pass

    def set_exception(self, exc: BaseException) -> None:
        if not self.waiter.done():
            self.waiter.set_exception(exc)


_Call = tuple[Any, "asyncio.Future[Any] | _FailsInto"]


class AutoPipeline(Generic[Item]):
    """Coalesces concurrent calls, per group, into one ``send(group, items)`` at a time.

    ``send`` returns one result per item, in order: a value, or the exception Redis answered
    that item with (``pipeline.execute(raise_on_error=False)``); it raises
    :class:`BusUnavailable` when the round trip as a whole failed. With ``drop_cancelled``,
    a call whose caller is gone before its round trip leaves is not sent (a pop nobody would
    deliver); without it, it is sent anyway (an append that must not be lost).
    """

    def __init__(
        self,
        send: Callable[[Hashable, list[Item]], Awaitable[list[Any]]],
        redis_url: str = "",
        *,
        what: str = "round trip",
        drop_cancelled: bool = False,
    ) -> None:
        """``redis_url`` only names the server in error messages; ``what`` names the calls in them."""
        self._send = send
        self.redis_url = redis_url
        self.what = what
        self.drop_cancelled = drop_cancelled
        self._pending: dict[Hashable, list[_Call]] = {}
        self._flushing: set[Hashable] = set()
        self._flushers: dict[Hashable, asyncio.Task[None]] = {}  # each until its body ends
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    def __len__(self) -> int:
        """Calls queued, not yet sent."""
        return sum(len(calls) for calls in self._pending.values())

    async def call(self, group: Hashable, item: Item) -> Any:
        """Queue ``item`` in ``group``'s next round trip; its result, or its error."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue(group, item, future)
        return await future

    def call_failing_into(self, group: Hashable, item: Item, waiter: asyncio.Future[Any]) -> None:
        """Queue ``item`` in ``group``'s next round trip, for a caller that awaits ``waiter`` (what
        the call leads to: the reply to an append) and not the call: its error, if it has one, is
        set on ``waiter`` (unless that is done); its result tells nobody. The caller's task wakes
        once, not once for the call and once for ``waiter``."""
        self._queue(group, item, _FailsInto(waiter))

    def _queue(self, group: Hashable, item: Item, future: asyncio.Future[Any] | _FailsInto) -> None:
        self._pending.setdefault(group, []).append((item, future))
        if group not in self._flushing:
            self._flushing.add(group)
            asyncio.get_running_loop().call_soon(self._start_flush, group)

    def _start_flush(self, group: Hashable) -> None:
        task = asyncio.ensure_future(self._flush_all(group))
        self._flushers[group] = task
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._flushed, group))

    def _flushed(self, group: Hashable, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: its callers were told, the loop need not log it
        elif self._flushers.get(group) is task:
            # Cancelled before its body ran (a loop shutting down): nobody else will answer these.
            self._fail_pending(group, BusUnavailable(f"{self.what} cancelled"))
            self._flushing.discard(group)
            del self._flushers[group]

    def _fail_pending(self, group: Hashable, exc: BaseException, also: Sequence[_Call] = ()) -> None:
        for _, future in [*also, *self._pending.pop(group, [])]:
            if not future.done():
                future.set_exception(exc)

    def _deliver(self, batch: list[_Call], results: list[Any]) -> None:
        """Each caller its own result, or its own error (mapped as :func:`redis_errors` maps it)."""
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, Exception):
                try:
                    with redis_errors(self.redis_url):
                        raise result
                except Exception as mapped:  # BusUnavailable, or the error itself
                    future.set_exception(mapped)
            else:
                future.set_result(result)

    async def _flush_all(self, group: Hashable) -> None:
        try:
            while calls := self._pending.pop(group, []):
                batch = [call for call in calls if not call[1].done()] if self.drop_cancelled else calls
                if not batch:
                    continue
                try:
                    results = await self._send(group, [item for item, _ in batch])
                except BusUnavailable as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                except BaseException as exc:  # never leave a caller waiting forever
                    # Nor those queued behind this round trip: no flush follows this one.
                    self._fail_pending(group, BusUnavailable(f"{self.what} failed: {exc!r}"), also=batch)
                    raise
                else:
                    self._deliver(batch, results)
        finally:
            self._flushing.discard(group)
            self._flushers.pop(group, None)


__all__ = ["AutoPipeline"]
