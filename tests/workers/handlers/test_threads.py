"""The worker threads of synchronous ``function`` hooks (:mod:`workers.handlers.threads`)."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
from collections.abc import Iterator

import pytest

from tests.conftest import async_wait_for
from workers.handlers.threads import ThreadHandoff, answer_from_thread

REQUEST = contextvars.ContextVar("REQUEST", default="none")


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end whatever happened, so that no test leaves a thread blocked."""
    event = threading.Event()
    yield event
    event.set()


def whoami(n: int) -> tuple[int, str]:
    return n * 2, threading.current_thread().name


class Blocker:
    """A call that blocks its thread until ``release`` is set; ``started`` once it runs."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.started = threading.Event()

    def __call__(self) -> str:
        self.started.set()
        self.release.wait(30)
        return "released"


async def test_runs_in_a_named_worker_thread_and_returns_the_result() -> None:
    handoff = ThreadHandoff(4, "hookbus-test")
    doubled, thread = await handoff.run(whoami, 21)
    assert doubled == 42
    assert thread.startswith("hookbus-test_") and thread != threading.current_thread().name


async def test_an_idle_thread_is_reused() -> None:
    handoff = ThreadHandoff(4, "hookbus-test")
    names = {(await handoff.run(whoami, n))[1] for n in range(20)}
    assert len(names) == 1 and handoff.threads == 1


async def test_exceptions_reach_the_awaiting_coroutine() -> None:
    handoff = ThreadHandoff(2, "hookbus-test")

    def fails() -> None:
        raise RuntimeError("database is down")

    with pytest.raises(RuntimeError, match="database is down"):
        await handoff.run(fails)
    with pytest.raises(SystemExit):  # caught by the caller, not by the thread (which goes on)
        await handoff.run(sys.exit, 3)
    assert (await handoff.run(whoami, 1))[0] == 2


async def test_the_call_sees_the_callers_context() -> None:
    handoff = ThreadHandoff(2, "hookbus-test")
    REQUEST.set("event-7")
    assert await handoff.run(REQUEST.get) == "event-7"


async def test_a_blocked_call_does_not_hold_up_the_next(release: threading.Event) -> None:
    handoff = ThreadHandoff(4, "hookbus-test")
    blocks = Blocker(release)
    slow = asyncio.create_task(handoff.run(blocks))
    await async_wait_for(blocks.started.is_set)
    assert (await handoff.run(whoami, 5))[0] == 10  # a second thread answered it
    assert not slow.done() and handoff.threads == 2
    release.set()
    assert await slow == "released"


async def test_past_max_threads_calls_wait_for_a_free_thread(release: threading.Event) -> None:
    handoff = ThreadHandoff(1, "hookbus-test")
    blocks = Blocker(release)
    first = asyncio.create_task(handoff.run(blocks))
    await async_wait_for(blocks.started.is_set)
    second = asyncio.create_task(handoff.run(whoami, 1))
    done, _ = await asyncio.wait([second], timeout=0.05)
    assert not done and handoff.threads == 1  # queued behind the blocked call
    release.set()
    assert await first == "released"
    assert (await second)[0] == 2


async def test_a_cancelled_await_drops_the_answer_and_the_thread_goes_on(release: threading.Event) -> None:
    handoff = ThreadHandoff(1, "hookbus-test")
    finished = threading.Event()

    def blocks() -> str:
        release.wait(30)
        finished.set()
        return "too late"

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await handoff.run(blocks)
    release.set()
    await async_wait_for(finished.is_set)
    assert (await handoff.run(whoami, 2))[0] == 4  # the same thread, free again


def test_an_answer_for_a_closed_loop_is_dropped() -> None:
    loop = asyncio.new_event_loop()
    future = loop.create_future()
    loop.close()
    answer_from_thread(loop, future, "result", None)  # nobody is waiting: no error in the thread
    assert not future.done()
