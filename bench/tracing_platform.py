"""What tracing costs the platform's decisions/s, end to end: ``python bench/tracing_platform.py``.

A gateway and a dispatcher (``bench/harness.py``'s roles, the example ``rule`` policy) on an embedded
Redis, saturated by ``--concurrency`` connections for ``--seconds`` each round; every round
starts the roles again with tracing off and with tracing on at ``--ratio`` (1 %) exporting
over OTLP/HTTP to a collector in a process of its own that answers every export and drops it.
Redis is emptied before every run, and the order alternates (off-on, on-off, ...) so that
neither mode always runs second; reported: the median decisions/s of each, the ratio of the
medians and the median of each round's own ratio (on ÷ off, run back to back).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from harness import hook_caller, saturate, start_roles

from hookbus.platform.redis_server import EmbeddedRedis, free_port


class DroppingCollector(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that accepts every export (an empty ExportTraceServiceResponse)."""

    #: Exports received, shared with the benchmark's process (proof that the traced runs exported).
    exports: Any = None

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.exports.get_lock():
            self.exports.value += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def decisions_per_s(port: int, concurrency: int, seconds: float) -> float:
    make_call = hook_caller(port)
    await saturate(make_call, concurrency, 1.0)  # warm-up
    done, took_s, _ = await saturate(make_call, concurrency, seconds)
    return done / took_s


def collect(port: int, exports: Any) -> None:
    """The collector's process (the load generator's GIL is not shared with it)."""
    DroppingCollector.exports = exports
    ThreadingHTTPServer(("127.0.0.1", port), DroppingCollector).serve_forever()


def run_round(redis_url: str, env: dict[str, str], args: argparse.Namespace) -> float:
    with redis.Redis.from_url(redis_url) as client:
        client.flushall()  # each run starts from the same empty Redis
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        port = free_port()
        roles = start_roles(redis_url, port, 1)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        return asyncio.run(decisions_per_s(port, args.concurrency, args.seconds))
    finally:
        for role in roles:
            role.send_signal(signal.SIGTERM)
        for role in roles:
            role.wait(10)


def main(args: argparse.Namespace) -> None:
    collector_port = free_port()
    exports = multiprocessing.Value("i", 0)
    collector = multiprocessing.Process(target=collect, args=(collector_port, exports), daemon=True)
    collector.start()
    traced = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}",
        "OTEL_TRACES_SAMPLER_ARG": str(args.ratio),
    }
    on = f"on {args.ratio:.0%}"
    modes = {"off": {}, on: traced}
    rates: dict[str, list[float]] = {name: [] for name in modes}
    with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False) as redis_server:
        for round_ in range(args.rounds):
            order = list(modes) if round_ % 2 == 0 else list(reversed(modes))
            for name in order:
                rates[name].append(run_round(redis_server.url, modes[name], args))
                print(f"{name}: {rates[name][-1]:,.0f}/s", file=sys.stderr)
    collector.terminate()
    median = {name: statistics.median(values) for name, values in rates.items()}
    paired = [traced_rate / off_rate for traced_rate, off_rate in zip(rates[on], rates["off"], strict=True)]
    print(f"{args.rounds} rounds of {args.seconds:g} s at {args.concurrency} connections; {exports.value} exports\n")
    print("| tracing | decisions/s (median; min-max) | ÷ off |")
    print("|---|---|---|")
    for name, values in rates.items():
        spread = f"{min(values):,.0f}-{max(values):,.0f}"
        print(f"| {name} | {median[name]:,.0f} ({spread}) | {median[name] / median['off']:.3f} |")
    print(
        f"\nround by round, {on} ÷ off: median {statistics.median(paired):.3f} "
        f"(min-max {min(paired):.3f}-{max(paired):.3f})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--ratio", type=float, default=0.01)
    main(parser.parse_args())
