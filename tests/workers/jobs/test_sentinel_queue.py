"""The async queue on a Redis found through Sentinel (``redis+sentinel://``): a real master and a
real Sentinel on 127.0.0.1 (:mod:`tests.redis_sentinel`), each with a password. A job queued
through the Sentinel URL lands on the master and reads back; a real ``hookbus worker`` runs an
async hook queued there by a real dispatcher; ``hookbus dlq`` reads its dead letter there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from arq.jobs import Job

from bus.errors import BusUnavailable
from bus.redis.connection import SentinelBlockingPool, connect, redis_errors
from bus.redis.keys import Keyspace
from bus.stream.protocol import Request, now_ms
from tests.ci import missing
from tests.conftest import async_wait_for, run_hookbus
from tests.redis_sentinel import MASTER_PASSWORD, SENTINEL_PASSWORD, LocalSentinel, SentinelUnavailable
from tests.workers.jobs.async_harness import Sink, notification, sink_policy, start_worker
from workers.jobs import deadletters
from workers.jobs.enqueue import JOB_FUNCTION, MAX_CONNECTIONS, arq_pool, job_id, put_job

KEYS = Keyspace()


@pytest.fixture(scope="module")
def local_sentinel() -> Iterator[LocalSentinel]:
    try:
        found = LocalSentinel()
    except SentinelUnavailable as exc:
        missing(f"no Redis Sentinel: {exc}")
    with found:
        yield found


@pytest.fixture
def sentinel(local_sentinel: LocalSentinel) -> LocalSentinel:
    local_sentinel.flushall()
    return local_sentinel


async def test_a_job_queued_through_the_sentinel_url_lands_on_the_master_and_reads_back(
    sentinel: LocalSentinel,
) -> None:
    arq = arq_pool(sentinel.url(db=2))
    try:
        assert isinstance(arq.connection_pool, SentinelBlockingPool)
        assert arq.connection_pool.max_connections == MAX_CONNECTIONS  # bounded, as for a single Redis
        request = Request("ev-s1", "Notification", "default", json.dumps(notification()).encode(), now_ms())
        job = job_id(request, "h1")
        assert await put_job(arq, KEYS, request, "h1", job, max_age_s=60)
        assert not await put_job(arq, KEYS, request, "h1", job, max_age_s=60)  # the same id: already queued
        info = await Job(job, arq, _queue_name=KEYS.arq_queue, _deserializer=arq.job_deserializer).info()
        assert info is not None and info.function == JOB_FUNCTION
        assert Request.from_job(info.args[0]).event_id == "ev-s1" and info.args[1] == "h1"
    finally:
        await arq.aclose()
    with sentinel.master(db=2) as master:  # on the master's database 2, as the URL says, as JSON
        assert [m.decode() for m in master.zrange(KEYS.arq_queue, 0, -1)] == [job]
        assert json.loads(master.get(f"arq:job:{job}"))["f"] == JOB_FUNCTION
    with sentinel.master(db=0) as master:
        assert master.zcard(KEYS.arq_queue) == 0


async def test_sentinels_that_refuse_the_client_are_a_redis_outage_without_the_passwords(
    sentinel: LocalSentinel,
) -> None:
    url = sentinel.url(sentinel_password=False)  # the Sentinel has a password of its own
    client = connect(url)
    try:
        with pytest.raises(BusUnavailable) as raised, redis_errors(url):
            await client.ping()
    finally:
        await client.aclose()
    message = str(raised.value)
    assert "No master found for 'mymaster'" in message and "Authentication required" in message
    assert "redis+sentinel://:***@127.0.0.1" in message
    assert MASTER_PASSWORD not in message and SENTINEL_PASSWORD not in message


@pytest.mark.timeout(120)
async def test_a_real_worker_runs_an_async_hook_queued_through_sentinel_and_dlq_reads_its_dead_letter(
    platform: Callable[..., Any], sentinel: LocalSentinel, tmp_path: Path
) -> None:
    url = sentinel.url(db=1)
    queue = connect(url)
    try:
        async with Sink(plan=[200], default=404) as sink, platform(sink_policy(sink.url()), queue_redis_url=url) as p:
            worker = await start_worker(
                queue, p.settings.redis_url or "", p.policy.sources[0], tmp_path / "w.log", HOOKBUS_QUEUE_REDIS_URL=url
            )
            try:
                assert (await p.post(notification(n=1))).status_code == 200
                await async_wait_for(lambda: len(sink.hits) == 1, timeout_s=30)
                assert (await p.post(notification(n=2))).status_code == 200  # refused with 404: dead at once
                await async_wait_for(lambda: deadletters.size(queue, KEYS), timeout_s=30)
            finally:
                worker.stop()
        assert [json.loads(request.body)["message"] for request in sink.requests] == [
            "build finished #1",
            "build finished #2",
        ]
    finally:
        await queue.aclose()
    with sentinel.master(db=1) as master:
        assert master.xlen(KEYS.async_dead_letters) == 1
    listed = run_hookbus("dlq", "list", "--json", "--queue-redis-url", url)  # no bus URL needed
    assert listed.returncode == 0, listed.stderr
    [letter] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert letter["why"] == "not_retryable" and letter["input"]["message"] == "build finished #2"
