"""Running a dispatcher process: signals, metrics port, uvloop."""

from __future__ import annotations

import asyncio
import gc
import signal

from bus.policy.loading import Policy
from bus.runtime.metrics import process_metrics
from bus.runtime.metrics_server import start_http_server
from bus.runtime.settings import Settings
from workers.dispatcher.answering import Dispatcher


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


async def serve_dispatcher(settings: Settings, policy: Policy, redis_url: str, metrics_port: int | None = None) -> None:
    """Run one dispatcher until SIGINT/SIGTERM, then drain (SIGHUP reloads the policy)."""
    metrics = process_metrics()
    metrics.init()
    start_http_server(metrics, metrics_port, settings.metrics_host, settings.metrics_token)
    stop = asyncio.Event()
    install_stop_signals(stop)
    dispatcher = Dispatcher(settings, policy, redis_url, metrics=metrics)
    # Everything imported so far lives for the whole process: keep it out of the collector's
    # scans, so that full collections stay short on the decision path.
    gc.freeze()
    await dispatcher.run(stop)


__all__ = ["install_stop_signals", "serve_dispatcher"]
