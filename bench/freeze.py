"""The freeze: what it costs the decisions it does not stop, and how fast every node obeys it.

``python bench/freeze.py``: a gateway and a dispatcher process (``examples/policy.yaml``) on an
embedded Redis, one keep-alive connection posting PreToolUse Bash calls of tenant ``default`` one
after another, in interleaved rounds of three states:

* ``none``: no tenant frozen (the baseline);
* ``others``: ``--others`` other tenants frozen (what every unfrozen tenant's decision pays);
* ``frozen``: ``default`` itself frozen (answered by the gateway, no dispatcher).

It prints each state's p50 and p99 and its p50 as a ratio to the baseline's, then the
propagation: ``--freezes`` times, ``bus.freeze.store.freeze()`` straight into Redis (no gateway
told, as an automatic trigger does) and the time until the gateway denies, and the same for
lifting it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import Connection, hook_input, percentile, start_roles, stop_roles

from bus.freeze.store import freeze, unfreeze
from bus.redis.connection import connect
from bus.redis.keys import Keyspace
from hookbus.platform.redis_server import EmbeddedRedis, free_port

KEYS = Keyspace()
STATES = ("none", "others", "frozen")


async def decision(connection: Connection, i: int) -> str:
    status, body = await connection.post("/v1/hooks", hook_input(f"ls -la src/mod{i}", i))
    if status != 200:
        raise RuntimeError(f"gateway answered {status}: {body[:200]!r}")
    return str(orjson.loads(body).get("hookSpecificOutput", {}).get("permissionDecision", "none"))


async def until(connection: Connection, denied: bool, budget_s: float = 10.0) -> float:
    """Post calls until one is denied (or not, as ``denied`` says); the seconds that took."""
    started = time.perf_counter()
    i = 0
    while (await decision(connection, i) == "deny") != denied:
        i += 1
        if time.perf_counter() - started > budget_s:
            raise RuntimeError(f"not {'denied' if denied else 'let through'} within {budget_s}s")
    return time.perf_counter() - started


async def run(redis_url: str, args: argparse.Namespace) -> None:
    port = free_port()
    roles = start_roles(redis_url, port, 1)
    redis = connect(redis_url)
    try:
        connection = await Connection("127.0.0.1", port).open()
        samples: dict[str, list[float]] = {state: [] for state in STATES}
        others = [f"other-{n}" for n in range(args.others)]
        for _ in range(args.rounds):
            for state in STATES:
                await redis.delete(KEYS.freezes)
                for tenant in others if state == "others" else ():
                    await freeze(redis, KEYS, tenant, reason="bench")
                if state == "frozen":
                    await freeze(redis, KEYS, "default", reason="bench")
                await until(connection, denied=state == "frozen")
                for i in range(args.calls):
                    started = time.perf_counter()
                    await decision(connection, i)
                    samples[state].append(time.perf_counter() - started)
        await redis.delete(KEYS.freezes)
        base = percentile(samples["none"], 0.5)
        for state in STATES:
            p50, p99 = percentile(samples[state], 0.5), percentile(samples[state], 0.99)
            print(f"{state:>7}: p50 {p50 * 1000:.3f} ms, p99 {p99 * 1000:.3f} ms, p50 {p50 / base:.2f}x the baseline")
        await until(connection, denied=False)
        took: dict[str, list[float]] = {"freeze": [], "unfreeze": []}
        for _ in range(args.freezes):
            await freeze(redis, KEYS, "default", reason="bench")
            took["freeze"].append(await until(connection, denied=True))
            await unfreeze(redis, KEYS, "default")
            took["unfreeze"].append(await until(connection, denied=False))
        for what, delays in took.items():
            print(
                f"{what} in Redis -> obeyed by the gateway, over {len(delays)}: "
                f"p50 {percentile(delays, 0.5) * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms "
                "(poll every 250 ms; target <= 1000 ms)"
            )
        await connection.close()
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
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=500, help="calls per state and round")
    parser.add_argument("--others", type=int, default=1000, help="other tenants frozen in the 'others' state")
    parser.add_argument("--freezes", type=int, default=20)
    asyncio.run(main(parser.parse_args()))
