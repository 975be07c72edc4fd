"""The hookbus benchmark, in one run: ``python bench/run.py``.

Blocking PreToolUse decisions with the example ``rule`` policy through the gateway, side
by side with (a) the floor, a bare Redis Streams request/reply round trip in Python, and
(b) the same rule as a local Python command hook spawned per event. Everything runs on
this machine; the load generator shares its cores. Results go to stdout (markdown) and to
``bench/results/latest.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import (
    BODIES,
    LAG,
    ROOT,
    Connection,
    hook_caller,
    hook_input,
    percentile,
    saturate,
    start_roles,
    steady_rate,
    summarize,
)

from hookbus.platform.redis_server import EmbeddedRedis, free_port

# -- the floor: bare Redis request/reply ----------------------------------------------------


async def floor_phase(url: str, args: argparse.Namespace) -> dict[str, Any]:
    server = subprocess.Popen([sys.executable, str(ROOT / "bench" / "floor_server.py"), url])  # noqa: ASYNC220
    client = aioredis.Redis.from_url(url, max_connections=256)
    channel = f"floor:reply:{uuid.uuid4().hex[:6]}"
    pending: dict[bytes, asyncio.Future[bytes]] = {}
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(channel)

    async def reader() -> None:
        async for message in pubsub.listen():
            key, _, reply = message["data"].partition(b"|")
            future = pending.pop(key, None)
            if future is not None and not future.done():
                future.set_result(reply)

    reading = asyncio.create_task(reader())

    async def make_call() -> Any:
        async def call(i: int) -> None:
            key = uuid.uuid4().hex.encode()
            future = asyncio.get_running_loop().create_future()
            pending[key] = future
            await client.xadd(
                "floor:requests",
                {"id": key, "rp": channel, "p": BODIES[i % len(BODIES)]},
                maxlen=100_000,
                approximate=True,
            )
            await future

        return call

    try:
        await saturate(make_call, 16, 1.0)  # warm-up
        steady = await steady_rate(make_call, args.rate, args.duration)
        done, seconds, _ = await saturate(make_call, args.concurrency, args.saturate_s)
    finally:
        reading.cancel()
        server.terminate()
        server.wait()
        await pubsub.aclose()
        await client.aclose()
    return {"steady": summarize(steady), "throughput_per_s": done / seconds}


# -- hookbus through the gateway ------------------------------------------------------------


async def hookbus_phase(port: int, args: argparse.Namespace) -> dict[str, Any]:
    make_call = hook_caller(port)
    # Correctness first: the answers are the rule pack's.
    check = await make_call()
    connection = await Connection("127.0.0.1", port).open()
    _, denied = await connection.post("/v1/hooks", hook_input("rm -rf /", 0))
    _, allowed = await connection.post("/v1/hooks", hook_input("ls -la", 0))
    assert b'"deny"' in denied and allowed == b"{}", (denied, allowed)
    await check(0)
    await saturate(make_call, 16, 1.0)  # warm-up
    steady = await steady_rate(make_call, args.rate, args.duration)
    lag_p99_ms = percentile(LAG, 0.99) * 1000
    done, seconds, sat_latencies = await saturate(make_call, args.concurrency, args.saturate_s)
    return {
        "steady": summarize(steady),
        "throughput_per_s": done / seconds,
        "saturated": summarize(sat_latencies),
        "schedule_lag_p99_ms": lag_p99_ms,
    }


async def no_dispatcher_phase(port: int, deadline_s: float, count: int = 100) -> dict[str, Any]:
    async def make_call() -> Any:
        connection = await Connection("127.0.0.1", port).open()

        async def call(i: int) -> None:
            status, body = await connection.post("/v1/hooks", BODIES[i % len(BODIES)])
            if status != 200 or body != b"{}":
                raise RuntimeError(f"expected a fail-open 200 {{}}, got {status} {body[:100]!r}")

        return call

    latencies = await steady_rate(make_call, 50, count / 50, connections=count)
    worst = max(latencies)
    return {"deadline_s": deadline_s, **summarize(latencies), "worst_over_deadline_ms": (worst - deadline_s) * 1000}


# -- what users run today: a local Python command hook ----------------------------------------


def local_hook_phase(runs: int) -> dict[str, Any]:
    python = getattr(sys, "_base_executable", sys.executable)
    script = str(ROOT / "bench" / "local_hook.py")
    latencies = []
    for i in range(runs):
        body = BODIES[i % len(BODIES)]
        t0 = time.perf_counter()
        subprocess.run([python, script], input=body, capture_output=True, check=True)
        latencies.append(time.perf_counter() - t0)
    return {"python": python, **summarize(latencies)}


def python_pass_phase(runs: int) -> dict[str, Any]:
    python = getattr(sys, "_base_executable", sys.executable)
    latencies = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([python, "-c", "pass"], check=True)
        latencies.append(time.perf_counter() - t0)
    return summarize(latencies)


def report(results: dict[str, Any]) -> str:
    floor, hb, local = results["floor"], results["hookbus"], results["local_hook"]
    nd = results["no_dispatcher"]
    rows = [
        "| path | p50 (ms) | p99 (ms) | throughput at saturation (decisions/s) |",
        "|---|---|---|---|",
        f"| floor: bare Redis Streams request/reply (Python) | {floor['steady']['p50_ms']:.3f} | "
        f"{floor['steady']['p99_ms']:.3f} | {floor['throughput_per_s']:,.0f} |",
        f"| **hookbus** gateway → stream → dispatcher (`rule` policy) | {hb['steady']['p50_ms']:.3f} | "
        f"{hb['steady']['p99_ms']:.3f} | {hb['throughput_per_s']:,.0f} |",
        f"| local Python command hook, spawned per event | {local['p50_ms']:.1f} | {local['p99_ms']:.1f} | "
        f"{1000 / local['mean_ms']:,.0f} (sequential) |",
    ]
    ratios = [
        f"- hookbus p50 vs spawned hook p50: **{local['p50_ms'] / hb['steady']['p50_ms']:.0f}x faster**",
        f"- hookbus throughput vs floor: **{100 * hb['throughput_per_s'] / floor['throughput_per_s']:.0f}%**",
        f"- hookbus p50 / floor p50: {hb['steady']['p50_ms'] / floor['steady']['p50_ms']:.2f}x",
        f"- load generator schedule lag p99: {hb['schedule_lag_p99_ms']:.2f} ms (latency counts from the write)",
        f"- no dispatcher running: {nd['n']} blocking requests, deadline {nd['deadline_s']} s, worst answer "
        f"{nd['max_ms']:.1f} ms = deadline + {nd['worst_over_deadline_ms']:.1f} ms",
    ]
    return "\n".join(
        [
            f"Steady rate {results['args']['rate']}/s for {results['args']['duration']} s; saturation "
            f"{results['args']['concurrency']} connections for {results['args']['saturate_s']} s; "
            f"{results['machine']}",
            "",
            *rows,
            "",
            *ratios,
        ]
    )


async def main(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "args": vars(args),
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}",
    }
    with tempfile.TemporaryDirectory() as state:
        with EmbeddedRedis(state, persistent=False) as redis_server:
            print("floor ...", file=sys.stderr)
            results["floor"] = await floor_phase(redis_server.url, args)
            port = free_port()
            roles = start_roles(redis_server.url, port, args.dispatchers)
            try:
                print("hookbus ...", file=sys.stderr)
                results["hookbus"] = await hookbus_phase(port, args)
                for dispatcher in roles[1:]:
                    dispatcher.send_signal(signal.SIGTERM)
                    dispatcher.wait(10)
                print("no dispatcher ...", file=sys.stderr)
                results["no_dispatcher"] = await no_dispatcher_phase(port, 1.5)
            finally:
                for role in roles:
                    role.send_signal(signal.SIGTERM)
                for role in roles:
                    role.wait(10)
    print("local hook ...", file=sys.stderr)
    results["local_hook"] = local_hook_phase(args.spawns)
    results["python_pass"] = python_pass_phase(args.spawns)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500, help="steady rate, requests/s (default 500)")
    parser.add_argument("--duration", type=float, default=10, help="steady phase seconds (default 10)")
    parser.add_argument("--saturate-s", type=float, default=5, help="saturation phase seconds (default 5)")
    parser.add_argument("--concurrency", type=int, default=64, help="connections at saturation (default 64)")
    parser.add_argument("--dispatchers", type=int, default=1)
    parser.add_argument("--spawns", type=int, default=100, help="local hook spawns (default 100)")
    args = parser.parse_args()
    results = uvloop.run(main(args))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps(results, indent=2))
    print(report(results))
