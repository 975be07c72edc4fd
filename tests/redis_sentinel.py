"""A real Redis Sentinel on 127.0.0.1: one master and one Sentinel watching it as ``mymaster``.

Both are Debian's ``/usr/bin/redis-server`` (Redis >= 7; ``--sentinel`` makes it a Sentinel),
each on a free port, with a password each: the master's (``requirepass``, which the Sentinel
knows as ``sentinel auth-pass``) and the Sentinel's own (``requirepass`` in its configuration).
Every wait polls under a deadline; nothing sleeps for a fixed time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import redis

from bus.runtime.children import die_with_parent
from hookbus.platform.redis_server import free_port

HOST = "127.0.0.1"
SERVICE = "mymaster"
MIN_VERSION = (7, 0)
MASTER_PASSWORD = "p@ss/w:rd"  # reserved characters: the URL percent-encodes them
SENTINEL_PASSWORD = "sentinel-secret"


class SentinelUnavailable(RuntimeError):
    """No Redis 7 ``redis-server`` on this machine (the message says why)."""


def find_redis7() -> str:
    """``/usr/bin/redis-server`` when it is Redis >= 7; :class:`SentinelUnavailable` otherwise."""
    binary = "/usr/bin/redis-server"
    if not os.access(binary, os.X_OK):
        raise SentinelUnavailable(f"no {binary} (Debian's redis-server package, Redis >= 7)")
    output = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    found = re.search(r"v=(\d+)\.(\d+)", output)
    if found is None or (int(found[1]), int(found[2])) < MIN_VERSION:
        raise SentinelUnavailable(f"{binary} is not Redis >= 7: {output.strip()!r}")
    return binary


class LocalSentinel:
    """``with LocalSentinel() as sentinel:`` starts the master and the Sentinel and waits until
    the Sentinel names the master; leaving the block kills both and removes their folder."""

    def __init__(self) -> None:
        self._server = find_redis7()
        self.base_dir = Path(tempfile.mkdtemp(prefix="redis-sentinel-"))
        self.master_port = free_port()
        self.sentinel_port = free_port()
        self._processes: list[subprocess.Popen[bytes]] = []

    def url(self, db: int = 0, *, sentinel_password: bool = True) -> str:
        """The queue's Sentinel URL: the master's password, and the Sentinel's unless told not to."""
        query = f"?sentinel_password={SENTINEL_PASSWORD}" if sentinel_password else ""
        password = quote(MASTER_PASSWORD, safe="")
        return f"redis+sentinel://:{password}@{HOST}:{self.sentinel_port}/{SERVICE}/{db}{query}"

    def master(self, db: int = 0) -> redis.Redis:
        """A plain client of the master (to look at what went through the Sentinel URL)."""
        return redis.Redis(host=HOST, port=self.master_port, db=db, password=MASTER_PASSWORD, socket_timeout=2.0)

    def start(self, timeout_s: float = 20.0) -> LocalSentinel:
        conf = self.base_dir / "sentinel.conf"
        conf.write_text(
            f"port {self.sentinel_port}\nbind {HOST}\nprotected-mode no\ndir {self.base_dir}\n"
            f"requirepass {SENTINEL_PASSWORD}\n"
            f"sentinel monitor {SERVICE} {HOST} {self.master_port} 1\n"
            f"sentinel auth-pass {SERVICE} {MASTER_PASSWORD}\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
        )
        try:
            self._spawn(
                "master",
                "--port",
                str(self.master_port),
                "--bind",
                HOST,
                "--save",
                "",
                "--appendonly",
                "no",
                "--requirepass",
                MASTER_PASSWORD,
                "--dir",
                str(self.base_dir),
            )
            self._spawn("sentinel", str(conf), "--sentinel")
            self._wait(self._names_the_master, "the Sentinel naming a healthy master", timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, *args: str) -> None:
        self._processes.append(
            subprocess.Popen(
                [self._server, *args, "--logfile", str(self.base_dir / f"{name}.log"), "--daemonize", "no"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
                process_group=0,
            )
        )

    def _names_the_master(self) -> bool:
        with redis.Redis(
            host=HOST, port=self.sentinel_port, password=SENTINEL_PASSWORD, socket_timeout=2.0, decode_responses=True
        ) as client:
            state = client.sentinel_master(SERVICE)
        return bool(
            state["is_master"]
            and not state["is_sdown"]
            and int(state["port"]) == self.master_port
            and state.get("role-reported") == "master"
        )

    def _wait(self, probe: Callable[[], bool], what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            for process in self._processes:
                if process.poll() is not None:
                    raise SentinelUnavailable(f"a redis-server exited with {process.returncode}; see {self.base_dir}")
            try:
                if probe():
                    return
            except (redis.RedisError, OSError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not reached within {timeout_s}s (logs in {self.base_dir})")
            time.sleep(0.05)

    def flushall(self) -> None:
        with self.master() as client:
            client.flushall()

    def stop(self) -> None:
        processes, self._processes = self._processes, []
        for process in processes:
            if process.poll() is None:
                process.kill()  # nothing to keep
        for process in processes:
            process.wait()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalSentinel:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
