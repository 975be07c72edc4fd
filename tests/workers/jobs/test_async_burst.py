"""A burst of async jobs leaves nothing behind: after 5,000 jobs have run on a real ``hookbus
worker`` (``keepResultSeconds`` at its default, 0), Redis holds a handful of keys and its memory
is back where it started.

(The 100,000-job version, with timings, is ``python bench/async_burst.py``.)
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from bus.policy.loading import load_policy
from bus.stream.protocol import Request, now_ms
from tests.conftest import BusProbe, async_wait_for
from tests.workers.jobs.async_harness import drained, notification, start_worker
from workers.jobs.enqueue import JobQueue, arq_pool, prepare_job

BURST = 5_000
POLICY = yaml.safe_dump(
    {
        "hooks": {
            "Notification": [
                {"hooks": [{"type": "function", "function": "tests.workers.jobs.async_harness:noop", "async": True}]}
            ]
        },
    }
)


async def used_memory(bus: BusProbe) -> int:
    """Redis's memory without its clients' buffers (the worker's pool opens a connection per running job)."""
    info = await bus.redis.info("memory")
    return int(info["used_memory"]) - int(info["mem_clients_normal"])


async def hookbus_keys(bus: BusProbe) -> list[bytes]:
    """Every key hookbus or arq made (the suite's Redis holds nothing else)."""
    return [key async for key in bus.redis.scan_iter(count=1000)]


@pytest.mark.timeout(120)
async def test_after_a_drained_burst_redis_holds_a_few_keys_and_its_memory_is_back(
    bus: BusProbe, redis_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    policy = load_policy([path])
    handler_id = policy.entries("Notification")[0].handler_id
    worker = await start_worker(bus.redis, redis_url, path, tmp_path / "worker.log")
    try:
        await async_wait_for(lambda: drained(bus.redis))
        keys_before, memory_before = len(await hookbus_keys(bus)), await used_memory(bus)
        arq = arq_pool(redis_url)
        jobs = JobQueue(arq, bus.keys)  # the settle script's queueing step, alone
        slots = asyncio.Semaphore(8)

        async def put(n: int) -> None:
            request = Request(f"burst-{n}", "Notification", "default", json.dumps(notification(n=n)).encode(), now_ms())
            async with slots:
                await jobs.put(request, [prepare_job(request, handler_id, 3600, BURST)])

        try:
            await asyncio.gather(*(put(n) for n in range(BURST)))
        finally:
            await arq.aclose()
        await async_wait_for(lambda: drained(bus.redis), timeout_s=90, interval_s=0.2)
        # A finished job leaves nothing: no result is kept by default.
        await async_wait_for(lambda: _few_keys(bus, keys_before), timeout_s=20, interval_s=0.2)
        # Redis shrinks its emptied tables in the background, within a second or so.
        await async_wait_for(lambda: _memory_back(bus, memory_before), timeout_s=20, interval_s=0.2)
        samples = await worker.metrics()
        left = await hookbus_keys(bus)
    finally:
        worker.stop()
    assert len(left) <= keys_before + 5, sorted(left)[:20]
    assert not [
        k
        for k in left
        if k.startswith(
            (b"arq:job:", b"arq:retry:", b"arq:in-progress:", b"arq:result:", bus.keys.async_attempts("").encode())
        )
    ]
    assert samples[("hookbus_async_jobs_total", frozenset({("status", "succeeded")}))] == BURST


async def _few_keys(bus: BusProbe, baseline: int) -> bool:
    return len(await hookbus_keys(bus)) <= baseline + 5


async def _memory_back(bus: BusProbe, baseline: int) -> bool:
    return await used_memory(bus) - baseline < 512 * 1024
