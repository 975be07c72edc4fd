"""``hookbus up``: the whole platform in the foreground.

Starts an embedded Redis when no URL is given, then one gateway, N dispatchers and one
async worker as child processes sharing a Prometheus multiprocess directory (so the
gateway's ``/metrics`` shows every role). Ctrl-C or SIGTERM stops the children in order
(gateway first, Redis last); a child that dies takes the platform down with a clear message
rather than leaving it half-alive. Children get SIGTERM if this process is killed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bus.children import die_with_parent
from bus.settings import Settings, mask_url
from hookbus.redis_server import EmbeddedRedis


def _child(role: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "hookbus", role, *args], env=env, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,
        process_group=0,  # Ctrl-C reaches only this process, which stops the children in order
    )


def _stop(children: list[tuple[str, subprocess.Popen[bytes]]], timeout_s: float = 10.0) -> None:
    """Stop the gateway first (no new work), then the dispatchers and the worker."""
    for role in ("gateway", "dispatcher", "worker"):
        group = [process for name, process in children if name == role]
        for process in group:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for process in group:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def run_platform(settings: Settings, dispatchers: int = 1) -> int:
    """Run everything until Ctrl-C / SIGTERM; returns the exit code."""
    from gateway.server import check_bind

    check_bind(settings)
    state = Path(settings.state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    redis: EmbeddedRedis | None = None
    redis_url = settings.redis_url
    if not redis_url:
        redis = EmbeddedRedis(state / "redis").start()
        redis_url = redis.url
        print(f"hookbus: embedded Redis {redis.url} (pid {redis.pid}, data in {redis.state_dir})", flush=True)
    else:
        print(f"hookbus: using Redis at {mask_url(redis_url)}", flush=True)
    metrics_dir = state / "metrics"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True)
    env = {**os.environ, "HOOKBUS_REDIS_URL": redis_url, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    config = [arg for path in settings.policy_paths for arg in ("--config", path)]
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    children: list[tuple[str, subprocess.Popen[bytes]]] = []
    try:
        gateway_args = [*config, "--host", settings.host, "--port", str(settings.port)]
        if settings.insecure:
            gateway_args.append("--insecure")
        children.append(("gateway", _child("gateway", gateway_args, env)))
        for _ in range(max(1, dispatchers)):
            children.append(("dispatcher", _child("dispatcher", config, env)))
        children.append(("worker", _child("worker", config, env)))
        print(
            f"hookbus: gateway on http://{settings.host}:{settings.port}/v1/hooks, "
            f"{max(1, dispatchers)} dispatcher(s), 1 async worker. Ctrl-C stops everything.",
            flush=True,
        )
        code = 0
        while not stopping:
            for role, process in children:
                if process.poll() is not None:
                    print(f"hookbus: {role} (pid {process.pid}) exited with {process.returncode}; stopping",
                          file=sys.stderr, flush=True)
                    stopping, code = True, 1
                    break
            else:
                time.sleep(0.2)
        return code
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop(children)
        if redis is not None:
            redis.stop()
        print("hookbus: stopped", flush=True)


__all__ = ["run_platform"]
