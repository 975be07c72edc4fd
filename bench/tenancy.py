"""Pushed policy and many tenants: ``python bench/tenancy.py``.

1. Propagation: a gateway and two dispatcher processes on an embedded Redis; 20 times, push a
   new version of a tenant's layer and poll the gateway until its answers name the new version
   and are decided by it. Reports the time from ``push`` returning to that answer (p50, p99, max).
2. Scale: 50 tenants with 200 rule patterns each (10,000 in all) under one org layer: the time
   to load and compose them, and the p50 of one in-process rule evaluation against a tenant's
   policy, next to the same for a 40-pattern policy, in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import percentile, start_roles, stop_roles

from bus.policy.loading import policy_from_text
from bus.policy.registry import PolicyRegistry
from bus.policy.store import PolicyStore
from bus.redis.connection import connect
from bus.redis.keys import Keyspace
from bus.stream.protocol import Request, now_ms
from hookbus.platform.redis_server import EmbeddedRedis, free_port
from workers.engine.evaluation import Engine
from workers.handlers.runners import default_runners


def layer(rules: list[str], **extra: Any) -> str:
    return yaml.safe_dump(
        {
            "hooks": {
                "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": rules, "reason": "bench"}]}]
            },
            **extra,
        }
    )


async def propagation(redis_url: str, pushes: int) -> dict[str, float]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        org = Path(tmp) / "org.yaml"
        org.write_text(layer(["Bash(rm -rf /*)"]))
        roles = start_roles(redis_url, port, 2, policy=org)
        redis = connect(redis_url)
        store = PolicyStore(redis, Keyspace())
        delays: list[float] = []
        try:
            async with httpx.AsyncClient(timeout=5) as client:
                for n in range(pushes):
                    command = f"tool{n} --go"
                    version, _ = await store.push([("team.yaml", layer([f"Bash(tool{n} *)"]))], tenant="default")
                    pushed = time.perf_counter()
                    while True:
                        answer = await client.post(
                            f"http://127.0.0.1:{port}/v1/hooks",
                            json={
                                "hook_event_name": "PreToolUse",
                                "session_id": "bench",
                                "tool_name": "Bash",
                                "tool_input": {"command": command},
                            },
                        )
                        named = answer.headers.get("X-Hookbus-Policy-Version", "").endswith(version.id)
                        denied = answer.json().get("hookSpecificOutput", {}).get("permissionDecision") == "deny"
                        if named and denied:
                            break
                        if time.perf_counter() - pushed > 10:
                            raise RuntimeError("the push never took effect")
                    delays.append(time.perf_counter() - pushed)
        finally:
            await redis.aclose()
            stop_roles(roles)
    return {"p50_s": percentile(delays, 0.5), "p99_s": percentile(delays, 0.99), "max_s": max(delays)}


async def scale(redis_url: str, tenants: int, patterns: int, runs: int) -> dict[str, float]:
    redis = connect(redis_url)
    keys = Keyspace("bench-scale:")
    store = PolicyStore(redis, keys)
    org_text = layer([f"Bash(org{i} *)" for i in range(40)])
    base = policy_from_text(org_text, "org.yaml")
    for t in range(tenants):
        await store.push([("team.yaml", layer([f"Bash(t{t}cmd{i} *)" for i in range(patterns)]))], tenant=f"t{t}")
    registry = PolicyRegistry(base, redis, keys)
    started = time.perf_counter()
    await registry.refresh()
    policies = [registry.for_tenant(f"t{t}")[0] for t in range(tenants)]
    load_s = time.perf_counter() - started
    engine = Engine(base, redis, keys, default_runners())

    async def p50_us(policy: Any) -> float:
        samples = []
        for i in range(runs):
            hook_input = {
                "hook_event_name": "PreToolUse",
                "session_id": "s",
                "tool_name": "Bash",
                "tool_input": {"command": f"ls -la dir{i}"},
            }
            request = Request(
                event_id=f"e{i}",
                event="PreToolUse",
                tenant="t0",
                payload=b"{}",
                received_ms=now_ms(),
                deadline_ms=now_ms() + 2000,
                reply_to="x",
            )
            t0 = time.perf_counter()
            await engine.evaluate(request, hook_input, policy)
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples) * 1e6

    small = await p50_us(base)
    large = await p50_us(policies[0])
    await redis.aclose()
    return {
        "tenants": tenants,
        "patterns": tenants * patterns,
        "load_and_compose_s": load_s,
        "p50_us_40_patterns": small,
        "p50_us_tenant_policy": large,
        "ratio": large / small,
    }


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        redis = EmbeddedRedis(Path(tmp) / "redis", persistent=False, port=free_port()).start()
        try:
            spread = await propagation(redis.url, args.pushes)
            sized = await scale(redis.url, args.tenants, args.patterns, args.runs)
        finally:
            redis.stop()
    print(
        f"propagation over {args.pushes} pushes: p50 {spread['p50_s'] * 1000:.0f} ms, "
        f"p99 {spread['p99_s'] * 1000:.0f} ms, max {spread['max_s'] * 1000:.0f} ms (target p99 <= 1000 ms)"
    )
    print(
        f"{sized['tenants']} tenants, {sized['patterns']} rule patterns: load and compose "
        f"{sized['load_and_compose_s'] * 1000:.0f} ms; rule evaluation p50 {sized['p50_us_tenant_policy']:.1f} us "
        f"vs {sized['p50_us_40_patterns']:.1f} us with 40 patterns ({sized['ratio']:.2f}x)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pushes", type=int, default=20)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--patterns", type=int, default=200)
    parser.add_argument("--runs", type=int, default=2000)
    asyncio.run(main(parser.parse_args()))
