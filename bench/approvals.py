"""The approval queue: what a pending approval costs, what held requests cost, and approve -> answer.

``python bench/approvals.py``: a gateway and a dispatcher process on an embedded Redis, a policy
whose ``git push`` asks go to the queue (``hookbus.approvals``), tenant ``acme`` asking and tenant
``beta`` only deciding. In order:

1. ``beta``'s decisions (``ls``, one keep-alive connection, one after another): the baseline p50/p99.
2. ``--pending`` approvals opened by ``acme`` (each its own session, answered at once as still
   pending: ``X-Hookbus-Hold-Seconds: 0``); Redis ``used_memory`` before and after: bytes per pending.
3. ``--held`` more asks whose requests the gateway holds open (as an agent's hook waits); the
   gateway's RSS before and after: bytes per held request.
4. ``beta``'s decisions again, with all of it pending: p50/p99 and the ratio to the baseline.
5. ``--approves`` of the held requests approved one at a time through ``POST /v1/approvals/{id}/approve``:
   from sending the approve to the held request's answer (the agent's tool would start there), p50/p99.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import Connection, percentile, rss_bytes, start_roles, stop_roles

from bus.redis.connection import connect
from hookbus.platform.redis_server import EmbeddedRedis, free_port

ASKER = b"Authorization: Bearer tok-acme\r\n"
DECIDER = b"Authorization: Bearer tok-beta\r\n"
APPROVER = {"Authorization": "Bearer tok-approver", "X-Hookbus-Approver": "bench"}
POLICY = {
    "hookbus": {
        "deadlineSeconds": 5.0,
        "approvals": {"enabled": True, "timeoutSeconds": 3600, "holdSeconds": 3000, "maxPending": 1_000_000},
    },
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "approval": True, "hooks": [{"type": "rule", "ask": ["Bash(git push *)"]}]},
            {"matcher": "Bash", "hooks": [{"type": "rule", "allow": ["Bash(ls *)"], "deny": ["Bash(rm -rf *)"]}]},
        ]
    },
}


def call(command: str, session: str, i: int) -> bytes:
    return orjson.dumps(
        {
            "session_id": session,
            "cwd": "/home/dev/project",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command, "description": "bench"},
            "tool_use_id": f"toolu_{i:08d}",
        }
    )


async def decisions(port: int, n: int) -> list[float]:
    connection = await Connection("127.0.0.1", port).open()
    took = []
    for i in range(n):
        started = time.perf_counter()
        status, _ = await connection.post("/v1/hooks", call(f"ls -la src/mod{i}", f"beta-{i % 20}", i), DECIDER)
        took.append(time.perf_counter() - started)
        assert status == 200
    await connection.close()
    return took


async def open_pending(port: int, n: int, first: int, hold: bytes) -> list[asyncio.Task[tuple[int, bytes]]]:
    """``n`` asks of ``acme`` from 100 connections at a time; tasks of the requests (held ones wait)."""
    tasks: list[asyncio.Task[tuple[int, bytes]]] = []
    connections = [await Connection("127.0.0.1", port).open() for _ in range(min(n, 100))] if not hold else []
    for i in range(first, first + n):
        body = call(f"git push origin branch-{i}", f"acme-{i}", i)
        if hold:  # one connection per held request, as each agent holds its own
            connection = await Connection("127.0.0.1", port).open()
            tasks.append(asyncio.create_task(connection.post("/v1/hooks", body, ASKER + hold)))
        else:
            tasks.append(
                asyncio.create_task(
                    connections[i % len(connections)].post("/v1/hooks", body, ASKER + b"X-Hookbus-Hold-Seconds: 0\r\n")
                )
            )
            if len(tasks) % 100 == 0:
                await asyncio.gather(*tasks[-100:])
    return tasks


async def approval_key_bytes(redis: Any) -> int:
    """``MEMORY USAGE`` summed over every key of the approval queue."""
    total, keys = 0, [key async for key in redis.scan_iter(match="hookbus:approvals:*", count=1000)]
    for start in range(0, len(keys), 1000):
        async with redis.pipeline(transaction=False) as pipe:
            for key in keys[start : start + 1000]:
                pipe.memory_usage(key, samples=0)
            total += sum(int(n or 0) for n in await pipe.execute())
    return total


async def until_pending(redis: Any, count: int, budget_s: float = 60.0) -> None:
    deadline = time.monotonic() + budget_s
    while await redis.zcard("hookbus:approvals:{acme}:pending") < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} approvals pending after {budget_s:g} s")
        await asyncio.sleep(0.05)


async def pending_ids(client: httpx.AsyncClient, base: str) -> dict[str, str]:
    response = await client.get(f"{base}/v1/approvals", params={"limit": 20_000}, headers=APPROVER, timeout=60)
    return {a["session_id"]: a["id"] for a in response.json()["approvals"]}


async def run(redis_url: str, args: argparse.Namespace) -> None:
    os.environ.update(
        HOOKBUS_TOKENS="acme:tok-acme,beta:tok-beta",
        HOOKBUS_APPROVER_TOKENS="acme:tok-approver",
        HOOKBUS_LOG_LEVEL="warning",
    )
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "policy.yaml"
        policy.write_text(yaml.safe_dump(POLICY))
        port = free_port()
        roles = start_roles(redis_url, port, 1, policy)
    redis = connect(redis_url)
    base = f"http://127.0.0.1:{port}"
    try:
        await decisions(port, 500)  # warm up
        baseline = await decisions(port, args.decisions)
        before = int((await redis.info("memory"))["used_memory"])
        asks = await open_pending(port, args.pending, 0, b"")
        await asyncio.gather(*asks)
        after = int((await redis.info("memory"))["used_memory"])
        per_pending = (after - before) / args.pending
        taken_mb = (after - before) / 1e6
        keys_bytes = await approval_key_bytes(redis)
        print(
            f"Redis: {args.pending} pending approvals: used_memory +{taken_mb:.1f} MB, {per_pending:.0f} bytes each "
            f"(with each ask's two decision-log records); the queue's own keys {keys_bytes / args.pending:.0f} "
            "bytes each"
        )
        rss_before = rss_bytes(roles[0].pid)
        held: list[asyncio.Task[tuple[int, bytes]]] = []
        for first in range(args.pending, args.pending + args.held, 50):  # 50 agents at a time start waiting
            held += await open_pending(port, 50, first, b"X-Hookbus-Hold-Seconds: 3000\r\n")
            await until_pending(redis, first + 50)
        async with httpx.AsyncClient() as client:
            rss_after = rss_bytes(roles[0].pid)
            print(
                f"gateway: {args.held} held requests take {(rss_after - rss_before) / 1e6:.1f} MB of RSS, "
                f"{(rss_after - rss_before) / args.held / 1e3:.1f} KB each (RSS {rss_after / 1e6:.0f} MB)"
            )
            loaded = await decisions(port, args.decisions)
            for name, samples in (("baseline", baseline), (f"{args.pending + args.held} pending", loaded)):
                p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
                print(f"beta's decisions, {name}: p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms")
            ratio = percentile(loaded, 0.99) / percentile(baseline, 0.99)
            print(f"beta's p99 with the queue full / without: {ratio:.2f}x")
            ids = await pending_ids(client, base)
            took = []
            for i in range(args.pending, args.pending + args.approves):
                started = time.perf_counter()
                answered = await client.post(
                    f"{base}/v1/approvals/{ids[f'acme-{i}']}/approve", headers=APPROVER, json={}
                )
                assert answered.status_code == 200, answered.text
                status, body = await held[i - args.pending]
                took.append(time.perf_counter() - started)
                assert status == 200 and b'"allow"' in body, body[:300]
            p50, p99 = percentile(took, 0.5), percentile(took, 0.99)
            print(
                f"approve -> the held request answered allow, over {len(took)}: "
                f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms (target p99 < 200 ms)"
            )
        for task in held:
            task.cancel()
    finally:
        await redis.aclose()
        stop_roles(roles)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        redis = EmbeddedRedis(Path(tmp) / "redis", persistent=False, port=free_port()).start()
        try:
            await run(redis.url, args)
        finally:
            redis.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pending", type=int, default=10_000, help="approvals left pending (not held)")
    parser.add_argument("--held", type=int, default=1_000, help="asks whose requests the gateway holds open")
    parser.add_argument("--decisions", type=int, default=2_000, help="beta's decisions per measurement")
    parser.add_argument("--approves", type=int, default=200)
    asyncio.run(main(parser.parse_args()))
