"""What the async-delivery tests share: a real ``hookbus worker`` process, a loopback sink, policies.

The worker is ``python -m hookbus worker`` on the suite's Redis, its output in a log file (a
pipe nobody reads would fill up and stop it). The sink is a real HTTP server on 127.0.0.1
(:class:`tests.loopback.LoopbackServer`) that answers each request with the next status of
its plan and records when each request arrived.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
import yaml

from bus.redis.keys import Keyspace
from hookbus.platform.redis_server import free_port
from tests.conftest import REPO, async_wait_for, clean_env, exposition_samples
from tests.loopback import LoopbackServer, Received

LOOPBACK = ["127.0.0.0/8"]
KEYS = Keyspace()


def notification(session: str = "s-async", n: int = 0) -> dict[str, Any]:
    return {"hook_event_name": "Notification", "session_id": session, "message": f"build finished #{n}"}


def sink_policy(
    url: str, *, handler: dict[str, Any] | None = None, event: str = "Notification", **async_settings: Any
) -> str:
    """An async ``http`` hook on ``event`` posting to ``url`` (loopback allowed), ``hookbus.async`` as given."""
    hook = {"type": "http", "url": url, "async": True, "timeout": 5, **(handler or {})}
    platform: dict[str, Any] = {"deadlineSeconds": 5.0, "http": {"allowedNetworks": LOOPBACK}}
    if async_settings:
        platform["async"] = async_settings
    return yaml.safe_dump({"hookbus": platform, "hooks": {event: [{"hooks": [hook]}]}})


class Sink:
    """Answers request n with ``plan[n]`` (then ``default``); keeps ``(arrival, request)`` of each."""

    def __init__(
        self, plan: list[int] | None = None, default: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        self.plan = list(plan or [])
        self.default = default
        self.headers = headers or {}
        self.hits: list[tuple[float, Received]] = []
        self.server = LoopbackServer(self.respond)

    async def respond(self, server: LoopbackServer, request: Received, writer: Any) -> None:
        self.hits.append((time.monotonic(), request))
        status = self.plan.pop(0) if self.plan else self.default
        extra = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items()) if status >= 300 else ""
        writer.write(f"HTTP/1.1 {status} Whatever\r\nContent-Length: 2\r\nConnection: close\r\n{extra}\r\nok".encode())
        await writer.drain()

    async def __aenter__(self) -> Sink:
        await self.server.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.__aexit__(*exc)

    def url(self) -> str:
        return self.server.url("/sink")

    @property
    def requests(self) -> list[Received]:
        return [request for _, request in self.hits]

    def gaps_s(self) -> list[float]:
        """Seconds between consecutive requests."""
        times = [at for at, _ in self.hits]
        return [b - a for a, b in itertools.pairwise(times)]


@dataclasses.dataclass
class WorkerProcess:
    """One ``hookbus worker`` child process."""

    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    async def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5)
        return exposition_samples(response.text)


async def start_worker(
    redis: aioredis.Redis, redis_url: str, policy_path: Path | str, log: Path, keys: Keyspace = KEYS, **env: str
) -> WorkerProcess:
    """Start ``hookbus worker`` and wait until it polls the queue (arq writes its health key then)."""
    health = f"{keys.arq_queue}:health-check"
    await redis.delete(health)
    port = free_port()
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "hookbus", "worker", "--config", str(policy_path), "--metrics-port", str(port)],
            env=clean_env(**{"HOOKBUS_REDIS_URL": redis_url, "HOOKBUS_LOG_LEVEL": "info", **env}),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    worker = WorkerProcess(process, log, port)

    async def polling() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the worker exited ({process.returncode}):\n{worker.output()[-3000:]}")
        return bool(await redis.exists(health))

    await async_wait_for(polling, timeout_s=20, interval_s=0.05)
    return worker


async def drained(redis: aioredis.Redis, keys: Keyspace = KEYS) -> bool:
    """Nothing queued and nothing running."""
    if await redis.zcard(keys.arq_queue):
        return False
    return not [key async for key in redis.scan_iter(match="arq:in-progress:*", count=1000)]


def noop(hook_input: Any) -> None:
    """A ``function`` hook that does nothing (the worker's cost of a job, without the handler's)."""


__all__ = ["LOOPBACK", "Sink", "WorkerProcess", "drained", "noop", "notification", "sink_policy", "start_worker"]
