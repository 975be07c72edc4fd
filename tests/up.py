"""A real ``hookbus up`` as a child process on a free port, for the tests that need the whole platform."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from hookbus.platform.redis_server import free_port
from tests.conftest import wait_for


class UpProcess:
    """``hookbus up --config policy`` in ``tmp_path``, its output in ``up.out``, no ``HOOKBUS_*`` but ``env``."""

    def __init__(self, tmp_path: Path, policy: Path, env: Mapping[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.out = tmp_path / "up.out"
        self.state = tmp_path / "state"
        child_env = {**{k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}, **env}
        command = [sys.executable, "-m", "hookbus", "up", "--config", str(policy), "--port", str(self.port)]
        with self.out.open("wb") as out:
            self.process = subprocess.Popen(
                [*command, "--state-dir", str(self.state)],
                env=child_env,
                cwd=tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def ready(self) -> bool:
        """Whether the gateway is ready and a dispatcher alive (AssertionError once ``up`` exited)."""
        if self.process.poll() is not None:
            raise AssertionError(f"hookbus up exited: {self.out.read_text()}")
        try:
            answer = httpx.get(f"{self.url}/readyz", timeout=1).json()
        except (httpx.HTTPError, ValueError):
            return False
        return bool(answer["ready"] and answer["checks"].get("dispatchers", {}).get("alive"))

    def redis_url(self) -> str:
        return f"unix://{self.state / 'redis' / 'redis.sock'}"

    def emit(self, token: str, hook_input: dict[str, Any]) -> dict[str, Any]:
        """Post one hook input with ``token``; its answer (the status must be 200)."""
        reply = httpx.post(
            f"{self.url}/v1/hooks", json=hook_input, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        assert reply.status_code == 200, reply.text
        answer: dict[str, Any] = reply.json()
        return answer

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@contextlib.contextmanager
def running_up(tmp_path: Path, policy: Path, env: Mapping[str, str]) -> Iterator[UpProcess]:
    """A ready ``hookbus up`` for the block, stopped after it."""
    platform = UpProcess(tmp_path, policy, env)
    try:
        wait_for(platform.ready, timeout_s=60, interval_s=0.1)
        yield platform
    finally:
        platform.stop()
