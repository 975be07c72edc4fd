"""Chaos: one fault per test under a steady loopback load, then the invariants.

Each test runs a private Redis (AOF on), a ``hookbus gateway``, dispatcher(s) and a ``hookbus
worker`` as real processes, sends ~80 requests/s (PreToolUse ``rm -rf`` denied and ``ls``
allowed by a ``rule`` handler, Notifications with an async ``command`` hook that appends the
event id to a file), injects the fault, lifts it, and checks (:func:`tests.chaos.conftest.verify`):

* every request answered ``200`` (fail-open at worst), blocking ones by deadline + 50 ms at the
  gateway (histogram) and deadline + 250 ms at the client;
* every event id answered has exactly one decision-log record, and it agrees with the answer;
* every Notification's async hook ran, or was counted dead; none lost;
* every role is running at the end (the test starts a replacement for one it killed, as a
  supervisor would).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Awaitable, Callable

import pytest
import redis.exceptions

from tests.chaos.conftest import (
    ARQ_IN_PROGRESS,
    ARQ_RESULT,
    DEADLINE_S,
    Cluster,
    Load,
    Role,
    conclude,
    poll,
    run_chaos,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.alone]

Chaos = Callable[..., Awaitable[Cluster]]


async def test_dispatcher_sigkill_with_two_running(chaos: Chaos) -> None:
    cluster = await chaos(dispatchers=2)
    victims: list[Role] = []
    in_flight: list[bytes] = []

    async def holding_a_slow_entry() -> bool:
        for dispatcher in cluster.running("dispatcher"):
            if held := await cluster.slow_in_hand(dispatcher):
                victims.append(dispatcher)
                in_flight.extend(held)
                return True
        return False

    async def fault(load: Load) -> None:
        # Killed with work in hand (a slow hook running): its entries stay pending until the
        # other dispatcher claims them, past their deadline.
        assert await poll(holding_a_slow_entry, 10, interval_s=0.01), "no dispatcher ever held a slow entry"
        victims[0].send(signal.SIGKILL)
        assert await poll(lambda: not victims[0].alive(), 5)
        victims[0].retired = True
        await cluster.start_dispatcher()  # the replacement a supervisor would start

    run = await run_chaos(cluster, fault)
    assert victims[0].process.returncode == -signal.SIGKILL
    run.notes.append(f"{victims[0].name} was killed with slow entries in hand: {in_flight}")
    conclude(cluster, run)


async def test_dispatcher_sigstop_then_sigcont(chaos: Chaos) -> None:
    cluster = await chaos(dispatchers=1)
    dispatcher = cluster.running("dispatcher")[0]
    stopped_s = [0.0, 0.0]

    async def fault(load: Load) -> None:
        stopped_s[0] = load.now_s()
        dispatcher.send(signal.SIGSTOP)
        try:
            await load.spans(2 * DEADLINE_S)  # stopped for twice the deadline
        finally:
            dispatcher.send(signal.SIGCONT)
            stopped_s[1] = load.now_s()

    run = await run_chaos(cluster, fault)
    # Sent while it was stopped and due before it came back: nobody could decide them.
    frozen = [a for a in run.answers if a.blocking and stopped_s[0] + 0.05 < a.sent_s < stopped_s[1] - DEADLINE_S]
    run.notes.append(
        f"{len(frozen)} blocking requests fell wholly within the stop; outcomes {sorted({a.outcome for a in frozen})}"
    )
    run.check(
        bool(frozen) and all(a.outcome == "fail-open" for a in frozen),
        "blocking requests during the stop were not failed open",
    )
    conclude(cluster, run)


async def test_redis_restart_with_aof(chaos: Chaos) -> None:
    cluster = await chaos()
    log_length = [0, 0]

    async def fault(load: Load) -> None:
        log_length[0] = await cluster.bus.redis.xlen(cluster.bus.keys.decision_log())
        await cluster.stop_redis()  # SIGTERM: a graceful shutdown, the AOF flushed
        await load.spans(1.0)  # down for ~80 requests
        await cluster.start_redis()  # same port, same data directory
        log_length[1] = await cluster.redis_call(lambda r: r.xlen(cluster.bus.keys.decision_log()))

    run = await run_chaos(cluster, fault)
    run.notes.append(f"decision log: {log_length[0]} records at the shutdown, {log_length[1]} after the restart")
    run.check(log_length[1] >= log_length[0], "the decision log lost records over the restart (AOF)")
    conclude(cluster, run)


async def test_worker_sigkill_while_async_jobs_run(chaos: Chaos) -> None:
    cluster = await chaos()
    worker = cluster.running("worker")[0]
    running: list[str] = []
    killed_at = [0.0]

    async def in_progress() -> list[str]:
        keys = [key.decode() async for key in cluster.bus.redis.scan_iter(match=f"{ARQ_IN_PROGRESS}*")]
        return [key[len(ARQ_IN_PROGRESS) :] for key in keys] if len(keys) >= 3 else []

    async def fault(load: Load) -> None:
        running.extend(await poll(in_progress, 10, interval_s=0.01))
        assert running, "no async jobs running to kill"
        worker.send(signal.SIGKILL)
        killed_at[0] = time.monotonic()
        assert await poll(lambda: not worker.alive(), 5)
        worker.retired = True
        await cluster.start_worker()  # the replacement a supervisor would start

    run = await run_chaos(cluster, fault)
    assert worker.process.returncode == -signal.SIGKILL

    # The jobs the killed worker was running are run again (by the new worker) within 30 s.
    async def finished() -> bool:
        return all([await cluster.bus.redis.exists(f"{ARQ_RESULT}{job}") for job in running])

    rerun = await poll(finished, max(0.0, killed_at[0] + 30 - time.monotonic()), interval_s=0.2)
    took = time.monotonic() - killed_at[0]
    unfinished = [job for job in running if not await cluster.bus.redis.exists(f"{ARQ_RESULT}{job}")]
    run.notes.append(
        f"{len(running)} jobs were running at the kill; {len(running) - len(unfinished)} finished "
        f"since (checked {took:.1f}s after the kill)"
    )
    run.check(bool(rerun), f"jobs of the killed worker not run again within 30 s: {unfinished}")
    conclude(cluster, run)


async def test_redis_maxmemory_reached(chaos: Chaos) -> None:
    cluster = await chaos()
    refused = [""]

    async def write_refused() -> bool:
        try:
            await cluster.bus.redis.set("chaos:oom-probe", "x")
        except redis.exceptions.OutOfMemoryError as exc:
            refused[0] = str(exc)
            return True
        return False

    async def fault(load: Load) -> None:
        bus = cluster.bus.redis
        used = int((await bus.info("memory"))["used_memory"])
        await bus.config_set("maxmemory-policy", "noeviction")
        await bus.config_set("maxmemory", used + 128 * 1024)  # just above what is used now
        try:
            assert await poll(write_refused, 10), "maxmemory never reached"
            await load.spans(2.0)  # held at maxmemory for ~160 requests
        finally:
            await bus.config_set("maxmemory", 0)

    run = await run_chaos(cluster, fault)
    run.notes.append(f"at maxmemory Redis answered: {refused[0]}")
    conclude(cluster, run)
