"""Worker threads shared fairly between tenants, for the decision work whose cost grows with the input.

Splitting a long command and masking a large record run off the event loop. One tenant that
sends such inputs without pause must not delay another tenant's, nor spend their budgets, so
:class:`FairThreads` differs from a plain pool in four ways:

* each tenant has a queue of its own, bounded (:attr:`FairThreads.queued_per_tenant`); a call
  past it is refused at once;
* the threads take the tenants in turn, one call each, and a tenant has at most one call
  running at a time, so a backlog delays only the tenant that made it;
* a call's budget runs from when it was queued: one still waiting at its deadline never
  starts, and one that starts gets what is left (the callable takes it as its first argument);
* a call whose caller gave up (cancelled, timed out) never starts.

A refused or expired call answers :class:`Refused`, with the reason, instead of its result:
the caller judges the input as it would one it could not read (a deny, a record masked whole).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from workers.handlers.threads import answer_from_thread

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class Refused:
    """The call did not run: queue full or out of time."""

    why: str


@dataclasses.dataclass(slots=True)
class _Call(Generic[T]):
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[T | Refused]
    context: contextvars.Context
    fn: Callable[..., T]
    args: tuple[Any, ...]
    deadline: float  # time.perf_counter()
    tenant: str


class FairThreads:
    """Runs synchronous callables for coroutines, fairly between tenants and within deadlines."""

    def __init__(self, max_threads: int, queued_per_tenant: int, name_prefix: str) -> None:
        self.max_threads = max_threads
        self.queued_per_tenant = queued_per_tenant
        self.name_prefix = name_prefix
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        #: Tenants with calls waiting and none running, in the order they are served.
        self._turns: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._waiting: dict[str, collections.deque[_Call[Any]]] = {}
        self._running: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._idle = 0

    @property
    def threads(self) -> int:
        """Threads started so far."""
        return len(self._threads)

    def waiting(self, tenant: str) -> int:
        """Calls of ``tenant`` queued and not yet started."""
        with self._lock:
            return len(self._waiting.get(tenant, ()))

    async def run(self, tenant: str, budget_s: float, fn: Callable[..., T], *args: Any) -> T | Refused:
        """``fn(remaining_s, *args)`` in a worker thread, in a copy of the caller's context, at
        most ``budget_s`` from now; its result (or exception), or :class:`Refused`.

        Cancelling the await before the call starts means it never starts; once started it runs
        to its end (``fn`` keeps to ``remaining_s`` itself)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T | Refused] = loop.create_future()
        call = _Call(loop, future, contextvars.copy_context(), fn, args, time.perf_counter() + budget_s, tenant)
        with self._lock:
            queue = self._waiting.get(tenant)
            if queue is None:
                queue = self._waiting[tenant] = collections.deque()
            if len(queue) >= self.queued_per_tenant:
                return Refused(f"{len(queue)} inputs of this tenant were already waiting for a thread")
            queue.append(call)
            if tenant not in self._running:
                self._turns[tenant] = None
            if self._idle:
                self._ready.notify()
            elif len(self._threads) < self.max_threads:
                self._start_thread()
        return await future

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._serve, name=f"{self.name_prefix}_{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _next(self) -> _Call[Any]:
        """The next tenant's first call (it is running from now on); waits for one."""
        with self._lock:
            while not self._turns:
                self._idle += 1
                self._ready.wait()
                self._idle -= 1
            tenant, _ = self._turns.popitem(last=False)
            queue = self._waiting[tenant]
            call = queue.popleft()
            if not queue:
                del self._waiting[tenant]
            self._running.add(tenant)
            return call

    def _done(self, tenant: str) -> None:
        with self._lock:
            self._running.discard(tenant)
            if tenant in self._waiting:
                self._turns[tenant] = None  # to the back of the line
                if self._idle:
                    self._ready.notify()

    def _serve(self) -> None:
        while True:
            call = self._next()
            try:
                if call.future.cancelled():  # the caller left: never start
                    continue
                remaining_s = call.deadline - time.perf_counter()
                if remaining_s <= 0:
                    _answer(call, Refused("it waited for a thread past its budget"), None)
                    continue
                result: Any = None
                error: BaseException | None = None
                try:
                    result = call.context.run(call.fn, remaining_s, *call.args)
                except BaseException as exc:  # SystemExit too: the awaiting coroutine decides what it means
                    error = exc
                _answer(call, result, error)
                del result, error
            finally:
                self._done(call.tenant)
                del call  # hold nothing of a finished call while waiting


def _answer(call: _Call[Any], result: Any, error: BaseException | None) -> None:
    answer_from_thread(call.loop, call.future, result, error)


__all__ = ["FairThreads", "Refused"]
