"""Running a dispatcher process: signals, metrics port, uvloop."""

from __future__ import annotations

import asyncio
import signal

from bus.policy import Policy
from bus.settings import Settings
from workers.dispatcher import Dispatcher


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


def start_metrics_server(port: int | None) -> None:
    if port:
        from prometheus_client import start_http_server

        start_http_server(port, addr="0.0.0.0")


async def serve_dispatcher(settings: Settings, policy: Policy, redis_url: str, metrics_port: int | None = None) -> None:
    """Run one dispatcher until SIGINT/SIGTERM, then drain."""
    start_metrics_server(metrics_port)
    stop = asyncio.Event()
    install_stop_signals(stop)
    await Dispatcher(settings, policy, redis_url).run(stop)


__all__ = ["install_stop_signals", "serve_dispatcher", "start_metrics_server"]
