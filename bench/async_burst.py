"""A burst of async jobs through a real ``hookbus worker``: what it costs Redis, and what it leaves.

    python bench/async_burst.py                  # 100,000 jobs
    python bench/async_burst.py --jobs 20000 --keep-result 30

On a private embedded Redis: N trivial async jobs (a ``function`` hook that does nothing) are
queued with the script step a dispatcher's settle runs for them (:class:`workers.jobs.enqueue.JobQueue`,
one event's job per round trip, 8 connections), with no worker running; then one ``hookbus
worker`` process drains them. Reported: the queueing rate, Redis memory per queued job, the
worker's drain rate (jobs/s from the first job taken to the queue empty), and the keys and
memory Redis holds right after the drain and once any kept results have expired
(``keepResultSeconds``, default 0: none are kept). JSON to ``bench/results/async_burst.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def noop(hook_input: Any) -> None:
    """The trivial async hook: the job's cost is hookbus's and arq's alone."""


def burst_policy(keep_result_s: float) -> str:
    import yaml

    return yaml.safe_dump(
        {
            "hookbus": {"async": {"keepResultSeconds": keep_result_s, "maxQueued": 10_000_000}},
            "hooks": {
                "Notification": [{"hooks": [{"type": "function", "function": "bench.async_burst:noop", "async": True}]}]
            },
        }
    )


async def memory(redis: Any) -> int:
    """``used_memory`` less the clients' buffers (a worker holds a connection per running job)."""
    info = await redis.info("memory")
    return int(info["used_memory"]) - int(info["mem_clients_normal"])


async def count_keys(redis: Any) -> int:
    return int(await redis.dbsize())


def start_worker(redis_url: str, policy: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HOOKBUS_REDIS_URL": redis_url, "HOOKBUS_LOG_LEVEL": "warning"}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "hookbus", "worker", "--config", str(policy)],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def queue_jobs(redis_url: str, policy_path: Path, jobs: int, connections: int = 8) -> float:
    """Queue ``jobs`` Notification jobs as a dispatcher would; returns the seconds it took."""
    import orjson

    from bus.policy.loading import load_policy
    from bus.redis.keys import Keyspace
    from bus.stream.protocol import Request, now_ms
    from workers.jobs.enqueue import JobQueue, arq_pool, prepare_job

    policy = load_policy([policy_path])
    handler_id = policy.entries("Notification")[0].handler_id
    arq = arq_pool(redis_url, max_connections=connections)
    queue = JobQueue(arq, Keyspace())
    slots = asyncio.Semaphore(connections)

    async def put(n: int) -> None:
        payload = orjson.dumps(
            {
                "hook_event_name": "Notification",
                "session_id": f"burst-{n % 50}",
                "message": f"build {n} finished",
                "cwd": "/home/dev/project",
            }
        )
        request = Request(f"ev-{n:08d}", "Notification", "default", payload, now_ms())
        async with slots:
            await queue.put(request, [prepare_job(request, handler_id, 3600, policy.settings.async_.max_queued)])

    started = time.perf_counter()
    try:
        for start in range(0, jobs, 10_000):  # bounded batches of tasks
            await asyncio.gather(*(put(n) for n in range(start, min(jobs, start + 10_000))))
    finally:
        await arq.aclose()
    return time.perf_counter() - started


async def drain(redis: Any, jobs: int, timeout_s: float) -> tuple[float, float]:
    """Wait until the queue is empty and nothing runs; (seconds from the first job taken, until then)."""
    from bus.redis.keys import Keyspace

    queue = Keyspace().arq_queue
    first = end = 0.0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        depth = int(await redis.zcard(queue))
        now = time.perf_counter()
        if depth < jobs and not first:
            first = now
        if depth == 0 and not [k async for k in redis.scan_iter(match="arq:in-progress:*", count=1000)]:
            end = now
            break
        await asyncio.sleep(0.02)
    else:
        raise RuntimeError(f"the queue did not drain within {timeout_s}s")
    return first, end


async def run_burst(redis_url: str, jobs: int, keep_result_s: float, workdir: Path) -> dict[str, Any]:
    """One burst on the Redis at ``redis_url`` (empty); the figures of the module docstring."""
    from bus.redis.connection import connect

    policy = workdir / "burst-policy.yaml"
    policy.write_text(burst_policy(keep_result_s))
    redis = connect(redis_url, socket_timeout_s=30)
    try:
        keys_start, memory_start = await count_keys(redis), await memory(redis)
        queue_s = await queue_jobs(redis_url, policy, jobs)
        memory_queued = await memory(redis)
        worker = start_worker(redis_url, policy, workdir / "burst-worker.log")
        try:
            first, end = await drain(redis, jobs, timeout_s=max(120.0, jobs / 200))
            keys_drained, memory_drained = await count_keys(redis), await memory(redis)
            expire_by = time.monotonic() + keep_result_s + 30
            while time.monotonic() < expire_by:  # kept results expire; Redis shrinks its emptied tables
                if await count_keys(redis) <= keys_start + 10 and await memory(redis) - memory_start < 512 * 1024:
                    break
                await asyncio.sleep(0.2)
            keys_end, memory_end = await count_keys(redis), await memory(redis)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
    finally:
        await redis.aclose()
    return {
        "jobs": jobs,
        "keep_result_s": keep_result_s,
        "queue_jobs_per_s": jobs / queue_s,
        "memory_per_queued_job_bytes": (memory_queued - memory_start) / jobs,
        "worker_jobs_per_s": jobs / (end - first) if end > first else 0.0,
        "keys": {"start": keys_start, "drained": keys_drained, "end": keys_end},
        "used_memory_bytes": {
            "start": memory_start,
            "queued": memory_queued,
            "drained": memory_drained,
            "end": memory_end,
        },
    }


def report(result: dict[str, Any]) -> str:
    memory_, keys = result["used_memory_bytes"], result["keys"]
    return "\n".join(
        [
            f"async burst of {result['jobs']:,} trivial jobs (keepResultSeconds {result['keep_result_s']:g})",
            f"  queued at {result['queue_jobs_per_s']:,.0f} jobs/s; {result['memory_per_queued_job_bytes']:,.0f} bytes "
            "of Redis memory per queued job",
            f"  one worker drained them at {result['worker_jobs_per_s']:,.0f} jobs/s",
            f"  keys: {keys['start']} before, {keys['drained']} right after the drain, {keys['end']} once kept "
            "results expired",
            f"  used_memory less client buffers: {memory_['start'] / 1e6:.2f} MB before, "
            f"{memory_['queued'] / 1e6:.2f} MB queued, {memory_['drained'] / 1e6:.2f} MB drained, "
            f"{memory_['end'] / 1e6:.2f} MB at the end",
        ]
    )


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from hookbus.platform.redis_server import EmbeddedRedis

    with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False) as server:
        return await run_burst(server.url, args.jobs, args.keep_result, Path(state))


if __name__ == "__main__":
    import uvloop

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs in the burst (default 100000)")
    parser.add_argument(
        "--keep-result", type=float, default=0.0, help="keepResultSeconds (default 0, hookbus's default)"
    )
    result = uvloop.run(main(parser.parse_args()))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "async_burst.json").write_text(json.dumps(result, indent=2))
    print(report(result))
