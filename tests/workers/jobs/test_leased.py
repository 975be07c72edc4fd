"""arq's worker with batched finishes (:mod:`workers.jobs.leased`), against a real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix, retry_key_prefix

from bus.policy.loading import empty_policy
from bus.runtime.settings import Settings
from workers.jobs.leased import LeasedWorker
from workers.jobs.worker import build_worker

QUEUE = "hookbus:arq:queue"


@pytest.fixture
async def worker(redis_url: str) -> AsyncIterator[LeasedWorker]:
    settings = Settings.from_env({"HOOKBUS_REDIS_URL": redis_url})
    built = build_worker(settings, empty_policy(), redis_url, burst=True)
    assert built.queue_name == QUEUE
    yield built
    await built.pool.aclose()


async def running(client: aioredis.Redis, *job_ids: str) -> None:
    """Each job as arq leaves it while it runs: its definition, try counter, in-progress key, queue entry."""
    async with client.pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            pipe.set(job_key_prefix + job_id, b"{}")
            pipe.set(retry_key_prefix + job_id, 1)
            pipe.set(in_progress_key_prefix + job_id, b"1")
            pipe.zadd(QUEUE, {job_id: 1})
        await pipe.execute()


async def exec_calls(client: aioredis.Redis) -> int:
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_exec", {}).get("calls", 0))


async def test_jobs_finishing_together_are_written_in_one_transaction(worker: LeasedWorker, redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    ids = [f"job-{n}" for n in range(20)]
    await running(client, *ids)
    before = await exec_calls(client)
    await asyncio.gather(*(worker.finish_job(job_id, True, None, 0, False, None, None) for job_id in ids))
    assert await exec_calls(client) - before == 1
    assert await client.zcard(QUEUE) == 0
    assert await client.keys("arq:*") == []  # definitions, try counters and in-progress keys all gone
    await client.aclose()


async def test_a_retried_job_goes_back_to_the_queue_later_and_a_kept_result_expires(
    worker: LeasedWorker, redis_url: str
) -> None:
    client = aioredis.Redis.from_url(redis_url)
    await running(client, "retried", "kept")
    await asyncio.gather(
        worker.finish_job("retried", False, None, None, False, 5_000, None),
        worker.finish_job("kept", True, b'{"s": true}', 30, False, None, None),
    )
    assert await client.zscore(QUEUE, "retried") == 5_001  # deferred by 5 s: arq's ZINCRBY
    assert await client.exists(job_key_prefix + "retried", retry_key_prefix + "retried") == 2  # tried again later
    assert not await client.exists(in_progress_key_prefix + "retried")
    assert await client.get(result_key_prefix + "kept") == b'{"s": true}'
    assert 0 < await client.pttl(result_key_prefix + "kept") <= 30_000
    assert await client.zscore(QUEUE, "kept") is None
    await client.aclose()


async def test_a_write_redis_refuses_fails_every_job_it_carried(worker: LeasedWorker, redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    await running(client, "a", "b")
    await client.delete(QUEUE)
    await client.set(QUEUE, b"not a sorted set")  # ZREM on it fails the transaction's EXEC
    results = await asyncio.gather(
        worker.finish_job("a", True, None, 0, False, None, None),
        worker.finish_job("b", True, None, 0, False, None, None),
        return_exceptions=True,
    )
    assert all(isinstance(r, Exception) and "WRONGTYPE" in str(r) for r in results), results
    await client.delete(QUEUE)
    await client.zadd(QUEUE, {"c": 1})
    await running(client, "c")
    await worker.finish_job("c", True, None, 0, False, None, None)  # the next batch goes through
    assert await client.zcard(QUEUE) == 0
    await client.aclose()
