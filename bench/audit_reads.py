"""What one tenant's audit scans cost another tenant's decisions: ``python bench/audit_reads.py``.

A gateway and a dispatcher (real processes) on an embedded Redis whose decision log holds
``--records`` records of tenant ``acme``. Tenant ``globex`` sends ``--decisions`` sequential
PreToolUse events twice: alone, then while ``--scanners`` concurrent clients of ``acme`` run
filtered exports (``GET /v1/audit/events?session=<none>``: every entry examined, none returned)
in a loop. Reported: globex's p50/p99 in both phases, the scanners' answers by status (the
export admits 2 per token and 8 per process; a page examines at most 10,000 entries), and the
gateway's resident memory before and after. Everything runs on 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import Connection, hook_input, percentile, start_roles, stop_roles

from bus.redis.connection import connect
from bus.redis.keys import Keyspace
from bus.stream.protocol import now_ms
from hookbus.platform.redis_server import EmbeddedRedis, free_port
from tests.hookbus.audit.test_command import record

TOKENS = "acme:tok-acme,globex:tok-globex"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def fill(url: str, count: int) -> None:
    """``count`` records of tenant acme, one per millisecond up to now (inside any retention)."""
    redis = connect(url, socket_timeout_s=30)
    log = Keyspace().decision_log()
    start = now_ms() - count
    try:
        for first in range(0, count, 1000):
            async with redis.pipeline(transaction=False) as pipe:
                for i in range(first, min(count, first + 1000)):
                    pipe.xadd(log, record(i, tenant="acme", session=f"s-{i % 50}").encode(), id=f"{start + i}-0")  # type: ignore[arg-type]
                await pipe.execute()
    finally:
        await redis.aclose()


async def decisions(port: int, count: int) -> list[float]:
    connection = await Connection("127.0.0.1", port).open()
    header = b"Authorization: Bearer tok-globex\r\n"
    took = []
    for i in range(count):
        started = time.perf_counter()
        status, _ = await connection.post("/v1/hooks", hook_input("ls -la", i), header)
        took.append(time.perf_counter() - started)
        assert status == 200, status
    return took


async def scanners(port: int, clients: int, stop: asyncio.Event) -> collections.Counter[int]:
    answers: collections.Counter[int] = collections.Counter()
    url = f"http://127.0.0.1:{port}/v1/audit/events"

    async def scan(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            response = await client.get(url, params={"session": "nobody"}, headers={"Authorization": "Bearer tok-acme"})
            answers[response.status_code] += 1
            if response.status_code == 429:
                await asyncio.sleep(0.05)  # a well-behaved client waits (the answer says Retry-After: 1)

    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(scan(client) for _ in range(clients)))
    return answers


async def main(args: argparse.Namespace) -> None:
    state = Path(os.environ.get("TMPDIR", "/tmp")) / f"hookbus-audit-bench-{os.getpid()}"
    redis_server = EmbeddedRedis(state, persistent=False, port=free_port())
    redis_server.start()
    os.environ["HOOKBUS_TOKENS"] = TOKENS
    roles = []
    try:
        await fill(redis_server.url, args.records)
        port = free_port()
        roles = start_roles(redis_server.url, port, 1)
        gateway = roles[0].pid
        alone = await decisions(port, args.decisions)
        before = rss_mb(gateway)
        stop = asyncio.Event()
        scanning = asyncio.create_task(scanners(port, args.scanners, stop))
        await asyncio.sleep(1.0)  # the scans are running
        loaded = await decisions(port, args.decisions)
        stop.set()
        answers = await scanning
        after = rss_mb(gateway)
        ms = 1000
        print(f"{args.records:,} records of acme; {args.scanners} concurrent acme scanners; globex decisions:\n")
        print("| phase | p50 ms | p99 ms |\n|---|---|---|")
        print(f"| alone | {percentile(alone, 0.5) * ms:.2f} | {percentile(alone, 0.99) * ms:.2f} |")
        print(f"| during the scans | {percentile(loaded, 0.5) * ms:.2f} | {percentile(loaded, 0.99) * ms:.2f} |")
        print(f"\nscanners' answers: {dict(sorted(answers.items()))}; gateway RSS {before:.0f} MB -> {after:.0f} MB")
    finally:
        stop_roles(roles)
        redis_server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--scanners", type=int, default=32)
    parser.add_argument("--decisions", type=int, default=500)
    asyncio.run(main(parser.parse_args()))
