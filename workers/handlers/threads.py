"""Worker threads for synchronous ``function`` hooks, with a cheaper hand-off than the loop's.

``loop.run_in_executor`` goes through a :class:`concurrent.futures.Future` (a condition
variable, a lock per state change, callbacks chained back into an asyncio future) on every
call. :class:`ThreadHandoff` puts the call on one :class:`queue.SimpleQueue` and answers an
asyncio future straight from the thread with ``call_soon_threadsafe``: a third to a half of
the CPU per call (``bench/handoff.py``; ``anyio.to_thread`` costs more than either).

Threads start when a call finds none idle, up to ``max_threads``; past that, calls queue.
They are daemon threads: a function that never returns cannot hold up the process's exit
(a thread cannot be killed; its caller has long been answered by its timeout).
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any

#: One call: where to answer it, and what to run.
_Call = tuple[
    asyncio.AbstractEventLoop, "asyncio.Future[Any]", contextvars.Context, Callable[..., Any], tuple[Any, ...]
]


class ThreadHandoff:
    """Runs synchronous callables in worker threads for coroutines to await."""

    def __init__(self, max_threads: int, name_prefix: str) -> None:
        self.max_threads = max_threads
        self.name_prefix = name_prefix
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        #: Released by a thread each time it is about to wait for a call: one permit per idle thread.
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @property
    def threads(self) -> int:
        """Threads started so far."""
        return len(self._threads)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a worker thread, in a copy of the caller's context; its result or exception.

        Cancelling the await drops the answer; the call itself runs to its end.
        """
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._calls.put((loop, future, contextvars.copy_context(), fn, args))
        if not self._idle.acquire(blocking=False):
            self._start_thread()
        return await future

    def _start_thread(self) -> None:
        with self._lock:
            if len(self._threads) >= self.max_threads:
                return  # the call waits for the next thread that is done
            thread = threading.Thread(target=self._serve, name=f"{self.name_prefix}_{len(self._threads)}", daemon=True)
            self._threads.append(thread)
        thread.start()

    def _serve(self) -> None:
        while True:
            loop, future, context, fn, args = self._calls.get()
            result: Any = None
            error: BaseException | None = None
            try:
                result = context.run(fn, *args)
            except BaseException as exc:  # SystemExit too: the awaiting coroutine decides what it means
                error = exc
            answer_from_thread(loop, future, result, error)
            del loop, future, context, fn, args, result, error  # hold nothing of a finished call while waiting
            self._idle.release()


def answer_from_thread(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], result: Any, error: BaseException | None
) -> None:
    """Settle ``future`` on its ``loop`` from a worker thread, unless its caller gave up."""
    try:
        loop.call_soon_threadsafe(_settle, future, result, error)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller gave up (timeout, cancellation)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


__all__ = ["ThreadHandoff", "answer_from_thread"]
