"""``every``: a step at a fixed interval until told to stop, a failing step logged and retried."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bus.runtime.retry import every


async def test_every_logs_a_failing_step_and_runs_the_next_turn(caplog: pytest.LogCaptureFixture) -> None:
    stop = asyncio.Event()
    calls: list[int] = []

    async def step() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise ConnectionError("Redis is away")
        stop.set()

    with caplog.at_level(logging.WARNING, logger="test.every"):
        await asyncio.wait_for(every(0.01, step, stop, logging.getLogger("test.every"), "nothing counted"), 10)
    assert calls == [0, 1]
    assert [r.getMessage() for r in caplog.records] == ["nothing counted: Redis is away"]


async def test_every_returns_at_once_when_stopped_while_it_waits() -> None:
    stop = asyncio.Event()
    calls: list[int] = []

    async def step() -> None:
        calls.append(1)
        asyncio.get_running_loop().call_soon(stop.set)  # set while the loop waits its hour

    await asyncio.wait_for(every(3600, step, stop, logging.getLogger("test.every"), "x"), 10)
    assert calls == [1]
