"""Async hooks, measured in one run: ``python bench/async.py``.

On a private embedded Redis, with a ``hookbus gateway``, one dispatcher and one ``hookbus
worker`` as processes, the example policy (``examples/policy.yaml``: the rule pack on
PreToolUse) plus an async ``http`` hook on Notification that posts to a loopback sink in this
process:

1. **Intake**, closed loop at ``--concurrency`` connections for ``--saturate-s`` each: blocking
   PreToolUse decisions per second (a dispatcher round trip each), then Notification events
   accepted per second (answered once appended: the async hook runs later). The ratio is the
   figure (target: at least 1.3).
2. **Delivery latency**, open loop at ``--rate`` Notifications/s: from the request being sent
   to the sink receiving the async hook's POST (p50, p99), once the intake backlog is gone.
3. **A burst** of ``--burst`` trivial async jobs (``bench/async_burst.py``) with the worker
   above stopped: Redis memory per queued job, the drain rate of one worker, keys and memory
   after the drain.

Everything shares this machine's cores. Markdown to stdout, JSON to ``bench/results/async.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from async_burst import report as burst_report
from async_burst import run_burst
from harness import BODIES, Connection, hook_caller, saturate, start_roles, steady_rate, summarize

from bus.redis.connection import connect
from bus.redis.keys import Keyspace
from hookbus.platform.redis_server import EmbeddedRedis, free_port

ROOT = Path(__file__).resolve().parent.parent


def bench_policy(sink_url: str) -> str:
    policy = yaml.safe_load((ROOT / "examples" / "policy.yaml").read_text())
    platform = policy.setdefault("hookbus", {})
    platform["http"] = {"allowedNetworks": ["127.0.0.0/8"]}
    platform["async"] = {"maxQueued": 10_000_000}
    policy["hooks"]["Notification"] = [{"hooks": [{"type": "http", "url": sink_url, "async": True, "timeout": 5}]}]
    return yaml.safe_dump(policy)


class LoopbackSink:
    """A bare HTTP/1.1 server on 127.0.0.1 answering 200 to every POST and noting when each body arrived."""

    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}
        self.count = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length)
                now = time.perf_counter()
                self.count += 1
                message = orjson.loads(body).get("message", "")
                if message.startswith("t="):
                    self.arrivals.setdefault(message, now)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


def notification(i: int, message: str | None = None) -> bytes:
    return orjson.dumps(
        {
            "session_id": f"bench-{i % 50}",
            "hook_event_name": "Notification",
            "transcript_path": "/home/dev/.claude/projects/bench/session.jsonl",
            "cwd": "/home/dev/project",
            "message": message or f"Claude needs your permission #{i}",
            "notification_type": "permission_prompt",
        }
    )


NOTES = [notification(i) for i in range(8192)]


async def intake_phase(port: int, args: argparse.Namespace) -> dict[str, Any]:
    await saturate(hook_caller(port, BODIES), 16, 1.0)  # warm-up
    done, seconds, latencies = await saturate(hook_caller(port, BODIES), args.concurrency, args.saturate_s)
    blocking = {"per_s": done / seconds, **summarize(latencies)}
    done, seconds, latencies = await saturate(hook_caller(port, NOTES), args.concurrency, args.saturate_s)
    accepted = {"per_s": done / seconds, **summarize(latencies)}
    return {"blocking_decisions": blocking, "async_accepted": accepted, "ratio": accepted["per_s"] / blocking["per_s"]}


async def settled(redis: Any, keys: Keyspace, timeout_s: float) -> float:
    """Wait until the dispatchers and the worker have caught up; seconds it took."""
    started = time.perf_counter()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        groups = await redis.xinfo_groups(keys.events_stream())
        lag = sum(int(g.get("lag") or 0) + int(g.get("pending") or 0) for g in groups)
        if lag == 0 and await redis.zcard(keys.arq_queue) == 0:
            return time.perf_counter() - started
        await asyncio.sleep(0.2)
    raise RuntimeError(f"the async backlog did not drain within {timeout_s}s")


async def latency_phase(port: int, sink: LoopbackSink, args: argparse.Namespace) -> dict[str, Any]:
    sent: dict[str, float] = {}

    async def make_call() -> Any:
        connection = await Connection("127.0.0.1", port).open()

        async def call(i: int) -> None:
            stamp = f"t={i}"
            sent[stamp] = time.perf_counter()
            status, _ = await connection.post("/v1/hooks", notification(i, stamp))
            if status != 200:
                raise RuntimeError(f"gateway answered {status}")

        return call

    await steady_rate(make_call, args.rate, args.duration, connections=16)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(set(sent) & set(sink.arrivals)) == len(sent):
            break
        await asyncio.sleep(0.1)
    latencies = [sink.arrivals[k] - sent[k] for k in sent if k in sink.arrivals]
    return {"rate_per_s": args.rate, "sent": len(sent), "delivered": len(latencies), **summarize(latencies)}


def start_worker(url: str, policy: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HOOKBUS_REDIS_URL": url, "HOOKBUS_LOG_LEVEL": "warning"}
    return subprocess.Popen([sys.executable, "-m", "hookbus", "worker", "--config", str(policy)], env=env, cwd=ROOT)


def report(results: dict[str, Any]) -> str:
    intake, latency = results["intake"], results["latency"]
    blocking, accepted = intake["blocking_decisions"], intake["async_accepted"]
    lines = [
        f"## Async hooks ({results['machine']})",
        "",
        "| what | figure |",
        "|---|---|",
        f"| blocking PreToolUse decisions/s (rule pack, {results['args']['concurrency']} connections) | "
        f"{blocking['per_s']:,.0f} (p50 {blocking['p50_ms']:.1f} ms, p99 {blocking['p99_ms']:.1f} ms) |",
        f"| async Notification events accepted/s (same connections) | {accepted['per_s']:,.0f} "
        f"(p50 {accepted['p50_ms']:.1f} ms, p99 {accepted['p99_ms']:.1f} ms) |",
        f"| ratio accepted / decided | {intake['ratio']:.2f}x (target >= 1.3x) |",
        f"| backlog of the intake run delivered in | {results['backlog_drain_s']:.1f} s |",
        f"| delivery latency to a loopback sink at {latency['rate_per_s']:g}/s | p50 {latency['p50_ms']:.1f} ms, "
        f"p99 {latency['p99_ms']:.1f} ms, max {latency['max_ms']:.1f} ms ({latency['delivered']}/{latency['sent']}) |",
    ]
    burst = results["burst"]
    lines += [
        f"| Redis memory per queued job (trivial hook) | {burst['memory_per_queued_job_bytes']:,.0f} bytes |",
        f"| one worker, trivial hooks | {burst['worker_jobs_per_s']:,.0f} jobs/s |",
        "",
        burst_report(burst),
    ]
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    import platform

    results: dict[str, Any] = {
        "args": vars(args),
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}",
    }
    sink = LoopbackSink()
    await sink.start()
    with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False) as server:
        policy = Path(state) / "async-bench.yaml"
        policy.write_text(bench_policy(f"http://127.0.0.1:{sink.port}/sink"))
        port = free_port()
        roles = start_roles(server.url, port, 1, policy)
        roles.append(start_worker(server.url, policy))
        redis = connect(server.url, socket_timeout_s=30)
        try:
            print("intake ...", file=sys.stderr)
            results["intake"] = await intake_phase(port, args)
            results["backlog_drain_s"] = await settled(redis, Keyspace(), timeout_s=600)
            print("delivery latency ...", file=sys.stderr)
            results["latency"] = await latency_phase(port, sink, args)
            results["sink_received"] = sink.count
        finally:
            for role in roles:
                role.send_signal(signal.SIGTERM)
            for role in roles:
                role.wait(30)
            await redis.aclose()
            await sink.stop()
    print("burst ...", file=sys.stderr)
    with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False) as server:
        results["burst"] = await run_burst(server.url, args.burst, args.keep_result, Path(state))
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64, help="connections at saturation (default 64)")
    parser.add_argument("--saturate-s", type=float, default=5.0, help="seconds per saturation phase (default 5)")
    parser.add_argument("--rate", type=float, default=200.0, help="Notifications/s for the latency phase (default 200)")
    parser.add_argument("--duration", type=float, default=10.0, help="latency phase seconds (default 10)")
    parser.add_argument("--burst", type=int, default=20_000, help="jobs in the burst phase (default 20000)")
    parser.add_argument(
        "--keep-result", type=float, default=0.0, help="keepResultSeconds in the burst (default 0, as hookbus)"
    )
    results = uvloop.run(main(parser.parse_args()))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "async.json").write_text(json.dumps(results, indent=2))
    print(report(results))
