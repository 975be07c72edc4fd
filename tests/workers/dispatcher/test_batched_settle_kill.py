"""A batched settle and a dispatcher killed mid-batch: one record per event, the one its agent got.

A real ``hookbus dispatcher`` process reads two batches of blocking events whose command hooks
each wait at a gate (a file lock the test holds). Writes are paused in Redis (``CLIENT PAUSE
WRITE``) before a gate opens, so that the dispatcher's first settle call of the batch waits in
Redis while the rest of the batch finishes behind it. For the first batch the pause then ends:
the rest goes out in one batched settle call. For the second, the dispatcher is killed (SIGKILL)
with one settle call held in Redis and the rest of the batch in its memory: Redis drops the held
call with the connection, so nothing of the batch is written. A second dispatcher claims the
batch, before the gateway's deadline or after the gateway has failed open. Whatever each agent
was answered, the decision log holds exactly one record of its event, and it says what the
agent got (:mod:`bus.stream.settle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bus.stream.protocol import LogRecord
from tests.conftest import BusProbe, async_wait_for
from tests.workers.dispatcher.test_answering import DENY, dispatcher, start_dispatcher_process

#: Events per batch: more than a handful, so that a settle call carries many.
BATCH = 24
#: The gateway's wait: long enough for both batches to reach the second dispatcher in time.
DEADLINE_S = 8.0

pytestmark = pytest.mark.timeout(90)


def gated_policy(gates: Path, deadline_s: float) -> str:
    """PreToolUse on ``Bash`` waits for the gate ``first``, on ``Edit`` for ``second`` (a shared
    lock on the file, which the test holds exclusively until it opens the gate); both then deny."""

    def gated(gate: str) -> dict[str, Any]:
        wait = f"flock -s '{gates / gate}' true && touch '{gates}/done-{gate}-'$$"
        return {"type": "command", "command": f"{wait}; echo '{json.dumps(DENY)}'", "timeout": 60}

    return yaml.safe_dump(
        {
            "hookbus": {"deadlineSeconds": deadline_s},
            "hooks": {
                "PreToolUse": [
                    {"matcher": "Bash", "hooks": [gated("first")]},
                    {"matcher": "Edit", "hooks": [gated("second")]},
                ]
            },
        }
    )


def tool_call(tool: str, n: int) -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "session_id": f"s-{tool}-{n}",
        "tool_name": tool,
        "tool_input": {"command": f"ls {n}", "file_path": f"f{n}"},
    }


async def pending_count(bus: BusProbe, consumer: str) -> int:
    return sum(1 for p in await bus.pending(bus.keys.blocking_stream()) if p["consumer"].decode() == consumer)


async def settle_waiting_in_redis(bus: BusProbe) -> bool:
    """A settle call (``EVALSHA``) is held by the pause. Before the deadline only a dispatcher sends
    one (the gateway's appends are done; its fail-open claim waits for the deadline)."""
    return any(c.get("cmd") == "evalsha" and "b" in c.get("flags", "") for c in await bus.redis.client_list())


async def settle_calls(bus: BusProbe) -> int:
    stats: dict[str, Any] = await bus.redis.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


@contextlib.asynccontextmanager
async def writes_paused(bus: BusProbe) -> AsyncIterator[None]:
    """Redis holds every write (reads go on) for the block."""
    await bus.redis.client_pause(30_000, all=False)
    try:
        yield
    finally:
        await bus.redis.client_unpause()


@contextlib.contextmanager
def gates_closed(gates: Path) -> Iterator[dict[str, int]]:
    """The gates ``first`` and ``second``, locked (exclusively) until :func:`open_gate`."""
    locks = {gate: os.open(gates / gate, os.O_CREAT | os.O_RDWR) for gate in ("first", "second")}
    try:
        for fd in locks.values():
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield locks
    finally:
        for fd in locks.values():
            os.close(fd)


async def open_gate(bus: BusProbe, gates: Path, locks: dict[str, int], gate: str) -> None:
    """Let the batch's hooks finish; return once every one has and a settle call waits in Redis."""
    fcntl.flock(locks[gate], fcntl.LOCK_UN)
    await async_wait_for(lambda: len(list(gates.glob(f"done-{gate}-*"))) == BATCH, timeout_s=20)
    await async_wait_for(lambda: settle_waiting_in_redis(bus), timeout_s=20)


@pytest.mark.parametrize("claimed_in_time", [True, False], ids=["claimed-in-time", "claimed-after-fail-open"])
async def test_a_dispatcher_killed_mid_batch_leaves_one_record_per_answered_event(
    claimed_in_time: bool,
    platform: Callable[..., Any],
    write_policy: Callable[..., Path],
    redis_url: str,
    bus: BusProbe,
    children: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    text = gated_policy(gates, deadline_s=DEADLINE_S)
    with gates_closed(gates) as locks:
        answers = await _kill_mid_batch(
            platform, text, write_policy(text, "a.yaml"), redis_url, bus, children, gates, locks, claimed_in_time
        )

    records: dict[str, list[LogRecord]] = {}
    for record in await bus.log():
        records.setdefault(record.event_id, []).append(record)
    assert len(records) == len(answers) == 2 * BATCH
    for answer in answers:
        (record,) = records[answer.headers["X-Hookbus-Event-Id"]]  # exactly one
        outcome = answer.headers["X-Hookbus-Outcome"]
        assert record.outcome == outcome
        if outcome == "decided":
            assert (answer.json(), record.decision, record.fail_open) == (DENY, "deny", "")
        else:
            assert outcome == "fail-open"
            assert answer.json() == {}
            assert record.fail_open
    assert not await bus.dead()


async def _kill_mid_batch(
    platform: Callable[..., Any],
    text: str,
    policy_file: Path,
    redis_url: str,
    bus: BusProbe,
    children: list[subprocess.Popen[bytes]],
    gates: Path,
    locks: dict[str, int],
    claimed_in_time: bool,
) -> list[httpx.Response]:
    """The two batches through a dispatcher process killed in the second; returns every answer."""
    async with platform(text, dispatchers=0) as p:
        a, consumer_a = await start_dispatcher_process(policy_file, redis_url, bus, children)
        # A first settle (SCRIPT LOAD, which a pause would hold too) before the batches.
        warm_up = await p.post(tool_call("Read", 0))
        assert warm_up.headers["X-Hookbus-Outcome"] == "decided"
        await bus.redis.delete(bus.keys.decision_log())
        client = httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=2 * BATCH + 4))
        try:
            first = [
                asyncio.create_task(client.post(f"{p.url}/v1/hooks", json=tool_call("Bash", n))) for n in range(BATCH)
            ]
            second = [
                asyncio.create_task(client.post(f"{p.url}/v1/hooks", json=tool_call("Edit", n))) for n in range(BATCH)
            ]
            # Both batches read by the dispatcher and held in their hooks.
            await async_wait_for(lambda: _equals(pending_count(bus, consumer_a), 2 * BATCH), timeout_s=20)

            settles_before = await settle_calls(bus)
            async with writes_paused(bus):
                await open_gate(bus, gates, locks, "first")
            answered_first = await asyncio.gather(*first)
            assert all(r.headers["X-Hookbus-Outcome"] == "decided" for r in answered_first)
            # Many events per call: the rest of the batch went out behind the held call.
            assert await settle_calls(bus) - settles_before < BATCH
            await async_wait_for(lambda: _equals(pending_count(bus, consumer_a), BATCH), timeout_s=10)

            async with writes_paused(bus):
                await open_gate(bus, gates, locks, "second")
                os.kill(a.pid, signal.SIGKILL)
                await asyncio.to_thread(a.wait, 10)
                assert a.returncode == -signal.SIGKILL
                # Redis has dropped the killed dispatcher's connections, and the held call with them.
                await async_wait_for(lambda: _not(settle_waiting_in_redis(bus)), timeout_s=10)
            # The killed batch wrote nothing: only the first batch is logged, the second is pending.
            assert len(await bus.log()) == BATCH
            assert await pending_count(bus, consumer_a) == BATCH

            if not claimed_in_time:
                answered_second = await asyncio.gather(*second)  # the gateway's fail-open, at the deadline
                assert all(r.headers["X-Hookbus-Outcome"] == "fail-open" for r in answered_second)
            async with dispatcher(p, "B"):  # claims the killed dispatcher's entries
                answered_second = await asyncio.gather(*second)
                await async_wait_for(lambda: _equals(_log_length(bus), 2 * BATCH), timeout_s=30)
                await async_wait_for(lambda: _nothing_pending(bus), timeout_s=10)
        finally:
            await client.aclose()

    return [*answered_first, *answered_second]


async def _equals(count: Any, expected: int) -> bool:
    return bool(await count == expected)


async def _not(condition: Any) -> bool:
    return not await condition


async def _log_length(bus: BusProbe) -> int:
    return len(await bus.log())


async def _nothing_pending(bus: BusProbe) -> bool:
    return not await bus.pending(bus.keys.blocking_stream())
