"""What tracing costs the platform's decisions/s, end to end: ``python bench/tracing_platform.py``.

A gateway and a dispatcher (``bench/run.py``'s roles, the example ``rule`` policy) on an embedded
Redis, saturated by ``--concurrency`` connections for ``--seconds`` each round; every round
starts the roles again with tracing off, then with tracing on at ``--ratio`` (1 %) exporting
over OTLP/HTTP to a collector in this process that answers every export and drops it. The
modes alternate round by round; reported: the median decisions/s of each and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen import Connection, saturate
from run import BODIES, start_roles

from hookbus.platform.redis_server import EmbeddedRedis, free_port


class DroppingCollector(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that accepts every export (an empty ExportTraceServiceResponse)."""

    exports = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        DroppingCollector.exports += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def decisions_per_s(port: int, concurrency: int, seconds: float) -> float:
    async def make_call() -> Any:
        connection = await Connection("127.0.0.1", port).open()

        async def call(i: int) -> None:
            status, body = await connection.post("/v1/hooks", BODIES[i % len(BODIES)])
            if status != 200:
                raise RuntimeError(f"gateway answered {status}: {body[:200]!r}")

        return call

    await saturate(make_call, concurrency, 1.0)  # warm-up
    done, took_s, _ = await saturate(make_call, concurrency, seconds)
    return done / took_s


def run_round(redis_url: str, env: dict[str, str], args: argparse.Namespace) -> float:
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
    collector = ThreadingHTTPServer(("127.0.0.1", 0), DroppingCollector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    traced = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
        "OTEL_TRACES_SAMPLER_ARG": str(args.ratio),
    }
    modes = {"off": {}, f"on {args.ratio:.0%}": traced}
    rates: dict[str, list[float]] = {name: [] for name in modes}
    with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False) as redis_server:
        for _ in range(args.rounds):
            for name, env in modes.items():
                rates[name].append(run_round(redis_server.url, env, args))
                print(f"{name}: {rates[name][-1]:,.0f}/s", file=sys.stderr)
    collector.shutdown()
    median = {name: statistics.median(values) for name, values in rates.items()}
    exports = DroppingCollector.exports
    print(f"{args.rounds} rounds of {args.seconds:g} s at {args.concurrency} connections; {exports} exports\n")
    print("| tracing | decisions/s (median; min-max) | ÷ off |")
    print("|---|---|---|")
    for name, values in rates.items():
        spread = f"{min(values):,.0f}-{max(values):,.0f}"
        print(f"| {name} | {median[name]:,.0f} ({spread}) | {median[name] / median['off']:.3f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--ratio", type=float, default=0.01)
    main(parser.parse_args())
