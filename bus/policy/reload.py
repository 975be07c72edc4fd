"""Hot reload of the policy: poll the files, reload on change or SIGHUP, keep the last good one.

A policy that fails to load is reported (every problem, with its line) and ignored: the
running policy stays in force until a valid one replaces it. Each process reloads on its
own; every decision-log record names the policy revision that made it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

from bus.errors import PolicyError
from bus.policy.loading import Policy, load_policy
from bus.runtime.metrics import Metrics, process_metrics
from bus.runtime.retry import BackgroundTask

logger = logging.getLogger("hookbus.policy")

Stamp = tuple[tuple[str, float, int], ...]


def stamp(paths: Sequence[str]) -> Stamp:
    """What changes when a policy file is edited, replaced or removed."""
    parts = []
    for path in paths:
        try:
            st = os.stat(path)
            parts.append((path, st.st_mtime, st.st_size))
        except OSError:
            parts.append((path, -1.0, -1))
    return tuple(parts)


class PolicyWatcher:
    """Reloads the policy from ``paths`` and hands each new one to ``apply``."""

    def __init__(
        self,
        paths: Sequence[str | Path],
        apply: Callable[[Policy], None],
        interval_s: float = 1.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.metrics = metrics or process_metrics()
        self.paths = [str(p) for p in paths]
        self.apply = apply
        self.interval_s = interval_s
        self.last_error: str | None = None
        self._stamp = stamp(self.paths)
        self._wake = asyncio.Event()
        self._task = BackgroundTask(self._run, "hookbus-policy-watcher")

    async def start(self) -> None:
        # SIGHUP is handled even with no files: its default action would end the process, and
        # ``hookbus up`` forwards it to every role.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._on_sighup)
        if self.paths:
            self._task.start()

    def _on_sighup(self) -> None:
        if self.paths:
            self._wake.set()
        else:
            logger.info("SIGHUP: no policy file to reload (started without --config)")

    async def stop(self) -> None:
        await self._task.stop()

    def reload(self) -> bool:
        """Load the files now; apply and return True when they are valid."""
        self._stamp = stamp(self.paths)
        try:
            policy = load_policy(self.paths)
        except PolicyError as exc:
            self.last_error = str(exc)
            self.metrics.policy_load_failures.inc()
            logger.error("policy reload failed, keeping the running policy:\n%s", exc)
            return False
        self.last_error = None
        self.apply(policy)
        logger.info("policy reloaded: revision %s", policy.revision, extra={"revision": policy.revision})
        return True

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval_s):
                    await self._wake.wait()
            forced = self._wake.is_set()
            self._wake.clear()
            if forced or stamp(self.paths) != self._stamp:
                self.reload()


__all__ = ["PolicyWatcher", "stamp"]
