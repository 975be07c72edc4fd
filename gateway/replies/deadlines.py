"""Request deadlines on one timer: what ``asyncio.timeout`` does, for thousands of waiting requests.

Every blocking hook request waits for its reply until its deadline. ``asyncio.timeout`` arms
and cancels one event loop timer per request (about 6 µs on uvloop); here the deadlines of
every request in flight sit in one queue behind one timer. A request that ends in time only
marks its entry done (the heap drops it when the timer passes it); one still running at its
deadline is cancelled, and its ``with`` block raises :class:`TimeoutError`, exactly as
``asyncio.timeout`` would (a cancellation from anyone else goes on as a cancellation).
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
from types import TracebackType

#: The loop's timers fire within a millisecond of their time (libuv's resolution): a deadline
#: that close is due.
_RESOLUTION_S = 0.001


class Deadline:
    """One request's deadline: ``with deadlines.after(seconds):`` around what it waits for."""

    __slots__ = ("_cancelling", "_task", "done", "expired", "when")

    def __init__(self, task: asyncio.Task[object], when: float) -> None:
        #: The waiting task, until its ``with`` block ends: a done deadline waits in the queue until
        #: the timer passes it, and must not keep the request's task (its coroutine, its HTTP cycle)
        #: alive that long (thousands of them at load, each scanned by every collection of the GC).
        self._task: asyncio.Task[object] | None = task
        self._cancelling = task.cancelling()
        #: The loop's time it is due at.
        self.when = when
        self.done = False
        self.expired = False

    def _expire(self) -> None:
        self.expired = True
        if self._task is not None:
            self._task.cancel()

    def __enter__(self) -> Deadline:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.done = True
        task, self._task = self._task, None
        # As asyncio.Timeout: the cancellation was ours only if no one else asked for one too.
        if self.expired and task is not None:
            if task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc


class Deadlines:
    """The deadlines of one process's requests, on one loop timer at a time.

    Requests with the same budget arrive in the order they are due, so a deadline no earlier
    than the last one queued joins a FIFO (O(1) in, O(1) out); only one due earlier than that
    (a shorter budget) goes into a heap.
    """

    def __init__(self) -> None:
        self._queue: collections.deque[Deadline] = collections.deque()
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def __len__(self) -> int:
        """Deadlines not yet passed or dropped (done ones included until the timer passes them)."""
        return len(self._queue) + len(self._heap)

    def after(self, delay_s: float) -> Deadline:
        """A deadline ``delay_s`` from now for the running task (a context manager)."""
        task = asyncio.current_task()
        assert task is not None, "a deadline needs a running task"
        loop = task.get_loop()
        if loop is not self._loop:  # a new event loop (tests): the old one's timer is gone with it
            self._loop, self._queue, self._heap, self._timer = loop, collections.deque(), [], None
        when = loop.time() + delay_s
        deadline = Deadline(task, when)
        queue = self._queue
        if not queue or when >= queue[-1].when:
            queue.append(deadline)
        else:
            heapq.heappush(self._heap, (when, next(self._order), deadline))
        if self._timer is None or when < self._timer_at:
            self._arm(when)
        return deadline

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        assert self._loop is not None
        self._timer, self._timer_at = self._loop.call_at(when, self._fire), when

    def _fire(self) -> None:
        self._timer = None
        assert self._loop is not None
        now = self._loop.time() + _RESOLUTION_S
        queue, heap = self._queue, self._heap
        while queue and (queue[0].done or queue[0].when <= now):
            deadline = queue.popleft()
            if not deadline.done:
                deadline._expire()
        while heap and (heap[0][2].done or heap[0][0] <= now):
            deadline = heapq.heappop(heap)[2]
            if not deadline.done:
                deadline._expire()
        # What is left at the front of each is due later and still waited for.
        due = [queue[0].when] if queue else []
        if heap:
            due.append(heap[0][0])
        if due:
            self._arm(min(due))


__all__ = ["Deadline", "Deadlines"]
