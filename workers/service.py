"""Running a dispatcher process: signals, metrics port, uvloop; and a role's CPU priority."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal

from bus import metrics
from bus.policy import Policy
from bus.settings import Settings
from workers.dispatcher import Dispatcher

logger = logging.getLogger("hookbus.worker")


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


async def serve_dispatcher(settings: Settings, policy: Policy, redis_url: str, metrics_port: int | None = None) -> None:
    """Run one dispatcher until SIGINT/SIGTERM, then drain (SIGHUP reloads the policy)."""
    metrics.init_metrics()
    metrics.start_http_server(metrics_port, settings.metrics_host, settings.metrics_token)
    stop = asyncio.Event()
    install_stop_signals(stop)
    dispatcher = Dispatcher(settings, policy, redis_url)
    # Everything imported so far lives for the whole process: keep it out of the collector's
    # scans, so that full collections stay short on the decision path.
    gc.freeze()
    await dispatcher.run(stop)


def set_cpu_priority(worker_cpu: str) -> None:
    """Schedule this process's threads (and those it starts later) as ``worker_cpu`` says.

    ``idle`` is Linux's ``SCHED_IDLE``: the process runs whenever a core is free, and the
    kernel preempts it at once for any normal process that wakes, instead of letting it
    finish its time slice; the commands its hooks start inherit it. ``hookbus up`` runs its
    async worker so: a burst of async jobs then never delays the gateway, a dispatcher or
    Redis on a shared machine, and costs no CPU of its own. Under sustained full load the
    jobs wait (``maxQueued`` and ``maxAgeSeconds`` bound them). Where the kernel has no such
    policy, one warning says so and the process runs at normal priority.
    """
    if worker_cpu != "idle":
        return
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]  # no /proc: this thread, which starts the others
    try:
        for tid in threads:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError) as exc:
        logger.warning("HOOKBUS_WORKER_CPU=idle: this system cannot run the worker at idle priority (%s); "
                       "running it at normal priority", exc)


__all__ = ["install_stop_signals", "serve_dispatcher", "set_cpu_priority"]
