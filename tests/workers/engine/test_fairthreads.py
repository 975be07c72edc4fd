"""FairThreads: per-tenant bounded queues, tenants served in turn, budgets from queueing, callers that left."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from workers.engine.fairthreads import FairThreads, Refused

pytestmark = pytest.mark.timeout(30)

#: How long a test waits for a thread to reach a point it must reach (never elapses when all is well).
BOUND_S = 10.0


class Gate:
    """A call that says it started, then waits until the test opens the gate."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.gate = threading.Event()

    def __call__(self, remaining_s: float, name: str, ran: list[str]) -> str:
        ran.append(name)
        self.started.set()
        assert self.gate.wait(BOUND_S)
        return name


def record(remaining_s: float, name: str, ran: list[str]) -> str:
    ran.append(name)
    return name


async def started(gate: Gate) -> None:
    assert await asyncio.to_thread(gate.started.wait, BOUND_S)


async def test_a_call_runs_with_what_is_left_of_its_budget() -> None:
    threads = FairThreads(1, 4, "test")
    remaining = await threads.run("t", 5.0, lambda remaining_s: remaining_s)
    assert isinstance(remaining, float) and 0 < remaining <= 5.0


async def test_an_exception_reaches_the_caller() -> None:
    def fails(remaining_s: float) -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await FairThreads(1, 4, "test").run("t", 5.0, fails)


async def test_a_tenant_past_its_queue_is_refused_at_once_and_others_are_not() -> None:
    threads = FairThreads(1, 2, "test")
    gate, ran = Gate(), list[str]()
    first = asyncio.create_task(threads.run("a", BOUND_S, gate, "a0", ran))
    await started(gate)
    queued = [asyncio.create_task(threads.run("a", BOUND_S, record, f"a{i}", ran)) for i in (1, 2)]
    await asyncio.sleep(0)  # the tasks queue their calls
    assert threads.waiting("a") == 2
    refused = await threads.run("a", BOUND_S, record, "a3", ran)
    assert isinstance(refused, Refused) and "already waiting" in refused.why
    other = asyncio.create_task(threads.run("b", BOUND_S, record, "b0", ran))
    gate.gate.set()
    assert list(await asyncio.gather(first, *queued, other)) == ["a0", "a1", "a2", "b0"]
    assert "a3" not in ran


async def test_tenants_are_served_in_turn_so_a_backlog_delays_only_its_tenant() -> None:
    threads = FairThreads(1, 8, "test")
    gate, ran = Gate(), list[str]()
    first = asyncio.create_task(threads.run("a", BOUND_S, gate, "a0", ran))
    await started(gate)
    backlog = [asyncio.create_task(threads.run("a", BOUND_S, record, f"a{i}", ran)) for i in range(1, 6)]
    await asyncio.sleep(0)
    other = asyncio.create_task(threads.run("b", BOUND_S, record, "b0", ran))
    await asyncio.sleep(0)
    gate.gate.set()
    await asyncio.gather(first, *backlog, other)
    assert ran[:3] == ["a0", "b0", "a1"]  # b waited for the call running, not for a's backlog


async def test_a_tenant_has_one_call_running_and_another_tenant_takes_the_free_thread() -> None:
    threads = FairThreads(2, 8, "test")
    gate, ran = Gate(), list[str]()
    first = asyncio.create_task(threads.run("a", BOUND_S, gate, "a0", ran))
    await started(gate)
    second = asyncio.create_task(threads.run("a", BOUND_S, record, "a1", ran))
    assert await threads.run("b", BOUND_S, record, "b0", ran) == "b0"  # while a0 still runs
    assert ran == ["a0", "b0"] and not second.done()
    gate.gate.set()
    assert list(await asyncio.gather(first, second)) == ["a0", "a1"]


async def test_a_call_whose_budget_ran_out_in_the_queue_never_starts() -> None:
    threads = FairThreads(1, 8, "test")
    ran: list[str] = []
    late = await threads.run("a", 0.0, record, "late", ran)
    assert isinstance(late, Refused) and "past its budget" in late.why
    assert ran == []


async def test_a_call_whose_caller_left_never_starts() -> None:
    threads = FairThreads(1, 8, "test")
    gate, ran = Gate(), list[str]()
    first = asyncio.create_task(threads.run("a", BOUND_S, gate, "a0", ran))
    await started(gate)
    left = asyncio.create_task(threads.run("a", BOUND_S, record, "left", ran))
    await asyncio.sleep(0)
    left.cancel()
    with pytest.raises(asyncio.CancelledError):
        await left
    gate.gate.set()
    after: Any = await threads.run("a", BOUND_S, record, "after", ran)
    assert after == "after" and await first == "a0"
    assert ran == ["a0", "after"]
