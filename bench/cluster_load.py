"""The load of ``bench/cluster.py``: requests dealt evenly to a platform's partitions, closed and
open loop, and what a failover did to them second by second."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from harness import COMMANDS, hook_input, percentile, saturate
from mixed import HeadConnection, open_loop
from redis.asyncio.connection import Connection

from bus.redis.keys import Keyspace


def make_bodies(keys: Keyspace, count: int, sessions_per_partition: int = 16) -> list[tuple[int, bytes]]:
    """``count`` requests dealt to the partitions of ``keys`` in turn (request ``i`` to partition
    ``i % partitions``), each from a session that hashes there; every partition gets every command
    (four of six allowed, two denied by the example policy)."""
    partitions = keys.partitions
    sessions: list[list[str]] = [[] for _ in range(partitions)]
    k = 0
    while min(len(s) for s in sessions) < sessions_per_partition:
        name = f"agent-{k}"
        if len(sessions[keys.partition_of(name)]) < sessions_per_partition:
            sessions[keys.partition_of(name)].append(name)
        k += 1
    bodies = []
    for i in range(count):
        part, turn = i % partitions, i // partitions
        command = COMMANDS[turn % len(COMMANDS)].format(i=i)
        bodies.append((part, hook_input(command, i, sessions[part][turn % sessions_per_partition])))
    return bodies


def outcome_of(head: bytes) -> str:
    """The ``X-Hookbus-Outcome`` of a response head."""
    for line in head.split(b"\r\n"):
        if line[:18].lower() == b"x-hookbus-outcome:":
            return line[18:].strip().decode()
    return ""


async def closed_loop(port: int, keys: Keyspace, agents: int, seconds: float) -> dict[str, Any]:
    """``agents`` keep-alive connections, each sending its next request as soon as it has an answer."""
    bodies = make_bodies(keys, 8192)
    outcomes: collections.Counter[str] = collections.Counter()
    per_partition: collections.Counter[int] = collections.Counter()
    partition_latencies: dict[int, list[float]] = collections.defaultdict(list)

    async def make_call() -> Callable[[int], Awaitable[None]]:
        connection = HeadConnection("127.0.0.1", port)
        await connection.open()

        async def call(i: int) -> None:
            part, body = bodies[i % len(bodies)]
            sent = time.perf_counter()
            status, head, answer = await connection.post_head("/v1/hooks", body)
            if status != 200:
                raise RuntimeError(f"gateway answered {status}: {answer[:200]!r}")
            partition_latencies[part].append(time.perf_counter() - sent)
            outcomes[outcome_of(head)] += 1
            per_partition[part] += 1

        return call

    done, wall_s, latencies = await saturate(make_call, agents, seconds)
    return {
        "decisions": done,
        "wall_s": wall_s,
        "decisions_per_s": done / wall_s,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies) * 1000,
        "outcomes": dict(outcomes),
        "fail_open": outcomes["fail-open"],
        "per_partition": {str(p): per_partition[p] for p in range(keys.partitions)},
        "partition_p50_ms": {
            str(p): percentile(partition_latencies[p], 0.5) * 1000
            for p in range(keys.partitions)
            if partition_latencies[p]
        },
    }


async def steady(port: int, keys: Keyspace, rate_per_s: float, seconds: float) -> dict[str, Any]:
    """Open loop at ``rate_per_s``, dealt evenly to the partitions; latency from the scheduled send."""
    bodies = [(str(part), body) for part, body in make_bodies(keys, int(rate_per_s * seconds))]
    results = await open_loop(port, bodies, rate_per_s, 128, 30)
    latencies = [r["latency_s"] for r in results]
    outcomes = collections.Counter(r["outcome"] for r in results)
    return {
        "decisions": len(results),
        "rate_per_s": rate_per_s,
        "wall_s": seconds,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies) * 1000,
        "outcomes": dict(outcomes),
        "fail_open": outcomes["fail-open"],
        "lag_p99_ms": percentile([r["lag_s"] for r in results], 0.99) * 1000,
        "per_partition": dict(collections.Counter(r["kind"] for r in results)),
    }


def analyse_failover(
    results: list[dict[str, Any]], killed_at: float, seconds: float, victim_partitions: list[int]
) -> dict[str, Any]:
    """Per second of scheduled send: requests, decided, fail-open (on the killed master's partitions and
    on the others), p99 and max; per partition: outcomes; the p99 of each group over the seconds that
    had a fail-open; and when partition 0 (on the killed master) decided again (the first decided
    answer to a request sent after the kill)."""
    victims = {str(part) for part in victim_partitions}
    per_second = []
    outage_seconds = []
    for second in range(int(seconds)):
        bucket = [r for r in results if second <= r["at_s"] < second + 1]
        if not bucket:
            continue
        latencies = [r["latency_s"] for r in bucket]
        others = [r["latency_s"] for r in bucket if r["kind"] not in victims]
        row = {
            "second": second,
            "n": len(bucket),
            "p99_ms": percentile(latencies, 0.99) * 1000,
            "max_ms": max(latencies) * 1000,
            "others_p99_ms": percentile(others, 0.99) * 1000 if others else None,
            "decided": sum(r["outcome"] == "decided" for r in bucket),
            "fail_open": sum(r["outcome"] == "fail-open" for r in bucket),
            "fail_open_victim": sum(r["outcome"] == "fail-open" and r["kind"] in victims for r in bucket),
            "errors": sum(r["status"] != 200 for r in bucket),
        }
        per_second.append(row)
        if row["fail_open"]:
            outage_seconds.append(second)
    after_kill = sorted((r for r in results if r["kind"] == "0" and r["at_s"] >= killed_at), key=lambda r: r["at_s"])
    first = next((r for r in after_kill if r["outcome"] == "decided"), None)
    last_fail_open = max(
        (r["at_s"] + r["latency_s"] for r in results if r["kind"] == "0" and r["outcome"] == "fail-open"), default=None
    )
    outcomes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in sorted(results, key=lambda r: int(r["kind"])):
        outcomes[r["kind"]][r["outcome"] or f"status {r['status']}"] += 1

    def summary(chosen: list[dict[str, Any]]) -> dict[str, float]:
        latencies = [r["latency_s"] for r in chosen]
        if not latencies:
            return {"n": 0}
        return {
            "n": len(latencies),
            "p50_ms": percentile(latencies, 0.5) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
            "max_ms": max(latencies) * 1000,
            "fail_open": sum(r["outcome"] == "fail-open" for r in chosen),
        }

    in_outage = [r for r in results if int(r["at_s"]) in outage_seconds]
    return {
        "killed_at_s": killed_at,
        "partition0_decides_again_s": first["at_s"] + first["latency_s"] - killed_at if first else None,
        "partition0_last_fail_open_s": last_fail_open - killed_at if last_fail_open is not None else None,
        "outcomes_by_partition": {part: dict(c) for part, c in outcomes.items()},
        "overall": summary(results),
        "outage_seconds": outage_seconds,
        "outage_victim": summary([r for r in in_outage if r["kind"] in victims]),
        "outage_others": summary([r for r in in_outage if r["kind"] not in victims]),
        "others": summary([r for r in results if r["kind"] not in victims]),
        "per_second": per_second,
    }


async def publish_latency(
    publish_port: int, subscribe_port: int, channel: str, *, sharded: bool, rate_per_s: float = 200, seconds: float = 3
) -> dict[str, float]:
    """Pub/Sub alone: ``SPUBLISH`` (``sharded``; ``channel``'s slot must be served by the node on
    ``publish_port``) or classic ``PUBLISH`` on one node at ``rate_per_s``, a subscriber on the node
    on ``subscribe_port``; p50/p99/max from the publish to the message."""
    publisher = aioredis.Redis(port=publish_port)
    subscriber = Connection(port=subscribe_port)
    await subscriber.connect()  # type: ignore[no-untyped-call]
    await subscriber.send_command("SSUBSCRIBE" if sharded else "SUBSCRIBE", channel)
    await subscriber.read_response()  # the subscription's confirmation
    message_kind = b"smessage" if sharded else b"message"
    latencies: list[float] = []
    total = int(rate_per_s * seconds)
    all_read = asyncio.Event()

    async def read() -> None:
        while True:
            message: Any = await subscriber.read_response()
            if isinstance(message, list) and message and message[0] == message_kind:
                latencies.append(time.perf_counter() - float(message[2]))
                if len(latencies) >= total:
                    all_read.set()

    reader = asyncio.create_task(read())
    try:
        start = time.perf_counter()
        for i in range(total):
            delay = start + i / rate_per_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent = repr(time.perf_counter())
            await (publisher.spublish(channel, sent) if sharded else publisher.publish(channel, sent))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_read.wait(), 2)
    finally:
        reader.cancel()
        await subscriber.disconnect()
        await publisher.aclose()
    return {
        "n": len(latencies),
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies) * 1000,
    }


__all__ = ["analyse_failover", "closed_loop", "hook_input", "make_bodies", "outcome_of", "publish_latency", "steady"]
