"""How long an idle process takes to wake up on this host: ``python bench/wake.py``.

A Redis PING round trip from a plain synchronous client to an embedded Redis (the same unix
socket the roles use), timed two ways: back to back, while both processes are still awake,
and each after an idle gap (10 ms by default), once both have gone to sleep in ``epoll``.
The difference is what one wake-up costs here. On a virtual machine it can be large (on the
2-core VM these benches were written on: 260-530 µs after idle against 20-60 µs back to
back), plausibly because an idle vCPU is halted and waking it goes through the hypervisor.

The same PINGs also give the client's CPU time per round trip (``time.process_time``): what a
wake-up costs in CPU, not only in latency. That is why the platform's CPU per event falls as
the rate rises (at saturation one wake-up serves a batch).

Why it matters: at low rates every process of the platform goes idle between events, and one
decision crosses about five wake-ups in turn (client -> gateway -> Redis -> dispatcher ->
Redis -> gateway). So the p50 targets at low rates (the ``http`` handler at 500/s) depend
on this figure as much as on the code; at saturation nobody sleeps and it drops out.
``bench/targets.py`` measures it first and prints it next to its calibration line.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hookbus.platform.redis_server import EmbeddedRedis

WARMUP_PINGS = 20


def percentile_us(samples_ns: list[int], q: float) -> float:
    """The ``q`` quantile (nearest rank, as ``bench/harness.py``) of ``samples_ns``, in µs."""
    ordered = sorted(samples_ns)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def ping_round_trips_ns(client: redis.Redis, pings: int, idle_gap_s: float) -> tuple[list[int], float]:
    """``pings`` PING round trips in ns, each after ``idle_gap_s`` of doing nothing (0: back to
    back), and this process's CPU µs per round trip (the sleeps' own wake-ups included)."""
    samples_ns = []
    cpu_started_s = time.process_time()
    for _ in range(pings):
        if idle_gap_s:
            time.sleep(idle_gap_s)  # the idle gap is what is measured: Redis and this process go to sleep
        started_ns = time.perf_counter_ns()
        client.ping()
        samples_ns.append(time.perf_counter_ns() - started_ns)
    return samples_ns, (time.process_time() - cpu_started_s) / pings * 1e6


def measure(pings: int = 200, idle_gap_ms: float = 10.0, timeout_s: float = 5.0) -> dict[str, Any]:
    """PING round trips to a fresh embedded Redis, back to back and after ``idle_gap_ms`` of idle.

    Returns ``{"pings", "idle_gap_ms", "transport", "back_to_back": {"p50_us", "p90_us",
    "client_cpu_us"}, "after_idle": {...}}``.
    """
    with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False) as redis_server:
        client = redis.Redis.from_url(redis_server.url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        try:
            ping_round_trips_ns(client, WARMUP_PINGS, 0)  # connect, and let both sides settle
            phases = {
                "back_to_back": ping_round_trips_ns(client, pings, 0),
                "after_idle": ping_round_trips_ns(client, pings, idle_gap_ms / 1000),
            }
        finally:
            client.close()
        transport = redis_server.url.partition(":")[0]
    return {
        "pings": pings,
        "idle_gap_ms": idle_gap_ms,
        "transport": transport,
        **{
            name: {
                "p50_us": percentile_us(samples, 0.50),
                "p90_us": percentile_us(samples, 0.90),
                "client_cpu_us": cpu_us,
            }
            for name, (samples, cpu_us) in phases.items()
        },
    }


def summary(found: dict[str, Any]) -> str:
    """One line: the p50 and p90 of each phase."""
    busy, idle = found["back_to_back"], found["after_idle"]
    return (
        f"Redis PING ({found['transport']} socket, {found['pings']} each) p50 {busy['p50_us']:.0f} µs "
        f"back to back, {idle['p50_us']:.0f} µs after {found['idle_gap_ms']:g} ms idle "
        f"(p90 {busy['p90_us']:.0f} and {idle['p90_us']:.0f} µs); client CPU per PING "
        f"{busy['client_cpu_us']:.0f} µs and {idle['client_cpu_us']:.0f} µs"
    )


def main(argv: list[str] | None = None) -> None:
    """Measure and print the summary line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pings", type=int, default=200, help="PINGs per phase (default 200)")
    parser.add_argument("--idle-gap-ms", type=float, default=10.0, help="idle before each idle PING (default 10)")
    args = parser.parse_args(argv)
    print(f"Wake-up latency: {summary(measure(args.pings, args.idle_gap_ms))}")


if __name__ == "__main__":
    main()
