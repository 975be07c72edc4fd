"""Do larger batches cut a dispatcher's and Redis's CPU per event? ``python bench/settle_batch.py``.

A gateway and a dispatcher (the example ``rule`` policy) on an embedded Redis, saturated by
``--concurrency`` connections for ``--seconds`` per run (or driven at ``--rate`` requests/s),
in several batching configurations:

* **now**: reads of ``HOOKBUS_DISPATCH_BATCH`` (64) entries, a yield to the event loop every 8
  spawned events (:data:`workers.dispatcher.answering._YIELD_EVERY`), and a settle call for
  whatever finished while the previous one was in flight;
* **read N**: reads of up to N entries;
* **linger T**: the outbox waits up to T event-loop turns before each flush for more events
  to join it (:attr:`workers.dispatcher.outbox.Outbox.linger_turns`, stopping at 128);
* **one pass**: reads of N, no yield while spawning a read's events (one evaluation pass),
  and a linger, so that a read's events tend to go out in one settle.

Each run starts the roles afresh on an emptied Redis; the configurations alternate in order
from round to round (forwards, backwards) so that the host's drift hits each alike. Reported
per configuration (medians over the rounds): decisions/s, CPU µs per decision of the
dispatcher, of Redis and of the gateway (from /proc), events per read and per settle call (from
Redis's ``INFO commandstats``: ``XREADGROUP`` and ``EVALSHA`` calls), and each ratio to **now**
taken round by round (the two runs back to back) then the median.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import POLICY, CpuMeter, hook_caller, saturate, steady_rate, wait_ready

from hookbus.platform.redis_server import EmbeddedRedis, free_port

ROOT = Path(__file__).resolve().parent.parent
#: ``hookbus dispatcher`` with the batching knobs that are not settings set first.
LAUNCHER = """
import sys
import workers.dispatcher.answering as answering
from workers.dispatcher.outbox import Outbox
answering._YIELD_EVERY = int(sys.argv[1])
Outbox.linger_turns = int(sys.argv[2])
from hookbus.cli import main
raise SystemExit(main(sys.argv[3:]))
"""

#: name: (read count, yield every, linger turns)
CONFIGS: dict[str, tuple[int, int, int]] = {
    "now": (64, 8, 0),
    "read 256": (256, 8, 0),
    "linger 1": (64, 8, 1),
    "linger 4": (64, 8, 4),
    "one pass 256, linger 4": (256, 1_000_000, 4),
}


def start(url: str, port: int, config: tuple[int, int, int]) -> list[subprocess.Popen[bytes]]:
    read, yield_every, linger = config
    env = {**os.environ, "HOOKBUS_REDIS_URL": url, "HOOKBUS_LOG_LEVEL": "warning", "HOOKBUS_DISPATCH_BATCH": str(read)}
    roles = [
        subprocess.Popen(
            [sys.executable, "-m", "hookbus", "gateway", "--config", str(POLICY), "--port", str(port)],
            env=env,
            cwd=ROOT,
        ),
        subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, str(yield_every), str(linger), "dispatcher", "--config", str(POLICY)],
            env=env,
            cwd=ROOT,
        ),
    ]
    return wait_ready(roles, port, 1)


def stop(roles: list[subprocess.Popen[bytes]]) -> None:
    for role in roles:
        role.send_signal(signal.SIGTERM)
    for role in roles:
        role.wait(10)


def calls(client: redis.Redis) -> dict[str, int]:
    stats: dict[str, Any] = client.info("commandstats")  # type: ignore[assignment]
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("xreadgroup", "evalsha")}


async def load(args: argparse.Namespace, port: int, measure: CpuMeter, client: redis.Redis) -> dict[str, float]:
    make_call = hook_caller(port)
    await saturate(make_call, args.concurrency, 1.0)  # warm-up
    before = calls(client)
    measure.start()
    if args.rate:
        started = time.perf_counter()
        done = len(await steady_rate(make_call, args.rate, args.seconds, connections=args.concurrency))
        took_s = time.perf_counter() - started
    else:
        done, took_s, _ = await saturate(make_call, args.concurrency, args.seconds)
    used = measure.stop()
    after = calls(client)
    return {
        "rate": done / took_s,
        **{f"{name}_us": cpu / done * 1e6 for name, cpu in used.items()},
        "per_read": done / max(1, after["xreadgroup"] - before["xreadgroup"]),
        "per_settle": done / max(1, after["evalsha"] - before["evalsha"]),
    }


def run(server: EmbeddedRedis, config: tuple[int, int, int], args: argparse.Namespace) -> dict[str, float]:
    with redis.Redis.from_url(server.url) as client:
        client.flushall()
        port = free_port()
        roles = start(server.url, port, config)
        try:
            assert server.pid is not None
            meter = CpuMeter({"dispatcher": roles[1].pid, "redis": server.pid, "gateway": roles[0].pid})
            return asyncio.run(load(args, port, meter, client))
        finally:
            stop(roles)


def main(args: argparse.Namespace) -> None:
    chosen = {name: CONFIGS[name] for name in args.configs}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in chosen}
    with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False) as server:
        for round_ in range(args.rounds):
            order = list(chosen) if round_ % 2 == 0 else list(reversed(chosen))
            for name in order:
                results[name].append(run(server, chosen[name], args))
                r = results[name][-1]
                print(
                    f"round {round_} {name}: {r['rate']:,.0f}/s dispatcher {r['dispatcher_us']:.0f} µs "
                    f"redis {r['redis_us']:.0f} µs gateway {r['gateway_us']:.0f} µs, {r['per_read']:.1f}/read "
                    f"{r['per_settle']:.1f}/settle",
                    file=sys.stderr,
                )
    load_text = f"{args.rate:g} requests/s" if args.rate else "saturation"
    print(f"{args.rounds} rounds of {args.seconds:g} s, {load_text}, {args.concurrency} connections")
    print("(medians; in brackets ÷ now, round by round, median)\n")
    print(
        "| configuration | decisions/s | dispatcher CPU µs / decision | Redis CPU µs / decision | "
        "gateway CPU µs / decision | events per read | events per settle |"
    )
    print("|---|---|---|---|---|---|---|")
    base = results["now"] if "now" in results else None
    for name, runs in results.items():

        def cell(key: str, digits: int = 0, runs: list[dict[str, float]] = runs) -> str:
            value = f"{statistics.median(r[key] for r in runs):,.{digits}f}"
            if base is None or runs is base:
                return value
            ratio = statistics.median(r[key] / b[key] for r, b in zip(runs, base, strict=True))
            return f"{value} ({ratio:.2f})"

        print(
            f"| {name} | {cell('rate')} | {cell('dispatcher_us')} | {cell('redis_us')} | {cell('gateway_us')} | "
            f"{cell('per_read', 1)} | {cell('per_settle', 1)} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=128, help="connections (default 128)")
    parser.add_argument("--rate", type=float, default=0, help="an open-loop rate, requests/s (default: saturate)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    main(parser.parse_args())
