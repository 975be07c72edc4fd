"""A single redis-server on a free TCP port, for benchmarks that compare it with the local cluster."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import redis

from bus.runtime.children import die_with_parent
from hookbus.platform.redis_server import free_port
from tests.redis_cluster import find_cluster_binaries


class PlainRedis:
    """A single redis-server (Debian's, the cluster nodes' binary) on a free TCP port."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def __enter__(self) -> PlainRedis:
        server, _ = find_cluster_binaries()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            [
                server,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.base_dir),
                "--logfile",
                str(self.base_dir / "redis.log"),
                "--daemonize",
                "no",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with redis.Redis(port=self.port, socket_connect_timeout=0.5) as client:
                    client.ping()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    raise
                time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()


__all__ = ["PlainRedis"]
