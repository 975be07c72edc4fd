"""Request deadlines on one timer behave as ``asyncio.timeout``: past one, TimeoutError; in time, nothing."""

from __future__ import annotations

import asyncio
import weakref

import pytest

from gateway.replies.deadlines import Deadlines


async def wait_until(deadlines: Deadlines, delay_s: float, future: asyncio.Future[str]) -> str:
    try:
        with deadlines.after(delay_s):
            return await future
    except TimeoutError:
        return "timed out"


@pytest.mark.timeout(10)
async def test_a_wait_past_its_deadline_times_out_and_one_in_time_does_not() -> None:
    deadlines = Deadlines()
    loop = asyncio.get_running_loop()
    never: asyncio.Future[str] = loop.create_future()
    answered: asyncio.Future[str] = loop.create_future()
    late = asyncio.create_task(wait_until(deadlines, 0.05, never))
    in_time = asyncio.create_task(wait_until(deadlines, 30, answered))
    answered.set_result("answered")
    assert await in_time == "answered"
    assert await late == "timed out"
    assert not never.done() or never.cancelled()


@pytest.mark.timeout(10)
async def test_a_shorter_deadline_set_after_a_longer_one_fires_first() -> None:
    deadlines = Deadlines()
    loop = asyncio.get_running_loop()
    long_wait = asyncio.create_task(wait_until(deadlines, 30, loop.create_future()))
    await asyncio.sleep(0)  # its deadline is set
    assert await wait_until(deadlines, 0.02, loop.create_future()) == "timed out"
    assert not long_wait.done()
    long_wait.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long_wait


@pytest.mark.timeout(10)
async def test_every_wait_past_its_deadline_times_out_and_the_heap_empties() -> None:
    deadlines = Deadlines()
    loop = asyncio.get_running_loop()
    answers: list[asyncio.Future[str]] = [loop.create_future() for _ in range(50)]
    waits = [asyncio.create_task(wait_until(deadlines, 0.01 + n / 1000, f)) for n, f in enumerate(answers)]
    for future in answers[::2]:
        future.set_result("answered")
    results = await asyncio.gather(*waits)
    assert results == ["answered" if n % 2 == 0 else "timed out" for n in range(50)]
    assert len(deadlines) == 0


@pytest.mark.timeout(10)
async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    deadlines = Deadlines()
    task = asyncio.create_task(wait_until(deadlines, 30, asyncio.get_running_loop().create_future()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.timeout(10)
async def test_a_deadline_cancelled_from_elsewhere_too_stays_a_cancellation() -> None:
    """As asyncio.timeout: when someone else cancels the task as well, the cancellation wins."""
    deadlines = Deadlines()
    started = asyncio.Event()

    async def waiting() -> None:
        with deadlines.after(0):
            started.set()
            await asyncio.get_running_loop().create_future()

    task = asyncio.create_task(waiting())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.timeout(10)
async def test_a_deadline_met_in_time_lets_go_of_its_task_before_the_timer_passes_it() -> None:
    # A done deadline waits in the queue until the timer reaches it: it must not keep the
    # request's task (and so its coroutine and HTTP cycle) alive meanwhile.
    deadlines = Deadlines()
    answered: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    answered.set_result("answered")
    task = asyncio.create_task(wait_until(deadlines, 30, answered))
    assert await task == "answered"
    gone = weakref.ref(task)
    del task
    await asyncio.sleep(0)  # the loop's own callbacks of the task have run
    assert len(deadlines) == 1  # still queued
    assert gone() is None
