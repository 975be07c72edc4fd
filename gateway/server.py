"""Running the gateway on uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import socket

import uvicorn

from bus.errors import BusUnavailable, ConfigError
from bus.policy.loading import Policy
from bus.redis.connection import connect, redis_errors
from bus.runtime.settings import Settings
from bus.stream.partitions import claim_layout
from gateway.app import create_app
from gateway.headtimeout import HeadTimeoutProtocol

logger = logging.getLogger("hookbus.gateway")

#: Seconds an idle kept-alive connection stays open (uvicorn's default is 5).
KEEP_ALIVE_S = 120


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings) -> None:
    """Refuse a non-loopback bind with no tokens unless ``--insecure``."""
    if not is_loopback(settings.host) and not settings.tokens and not settings.managed_tokens and not settings.insecure:
        raise ConfigError(
            f"refusing to bind {settings.host} with no tokens: set HOOKBUS_TOKENS (tenant:token) or pass --insecure"
        )


def bind_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` as uvicorn binds it; ConfigError when the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} is in use; pass --port") from exc
        raise ConfigError(f"cannot bind {host}:{port}: {exc.strerror or exc}") from exc
    return sock


def check_layout(settings: Settings, policy: Policy, redis_url: str) -> None:
    """Refuse to start when the bus runs with another partition count than the policy's (with
    Redis out of reach the gateway starts anyway, failing open; the dispatchers check too)."""

    async def check() -> None:
        redis = connect(redis_url, connect_timeout_s=1.0, socket_timeout_s=1.0)
        try:
            with contextlib.suppress(BusUnavailable, TimeoutError):
                async with asyncio.timeout(2.0):
                    with redis_errors(redis_url):
                        await claim_layout(redis, settings.keys.with_partitions(policy.settings.streams.partitions))
        finally:
            await redis.aclose()

    asyncio.run(check())


def serve(settings: Settings, policy: Policy, redis_url: str) -> None:
    """Serve the gateway in the foreground until SIGINT/SIGTERM."""
    check_bind(settings)
    check_layout(settings, policy, redis_url)
    sock = bind_socket(settings.host, settings.port)
    app = create_app(settings, policy, redis_url)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=HeadTimeoutProtocol,
        lifespan="on",
        access_log=False,
        log_config=None,  # uvicorn's records go through hookbus's handler (text or JSON, bus.runtime.logs)
        log_level=settings.log_level.lower(),
        server_header=False,
        # Nothing reads the client's address: no X-Forwarded-* rewriting middleware per request.
        proxy_headers=False,
        timeout_graceful_shutdown=5,
        # An idle kept-alive connection stays open longer than agents' HTTP clients keep theirs
        # (Node's undici 4 s, httpx 5 s, Go and Rust's hyper 90 s), so the client closes first: a
        # server that closes at the moment a client reuses the connection fails that request,
        # and an agent takes a failed hook request as no verdict and runs the tool.
        timeout_keep_alive=KEEP_ALIVE_S,
        backlog=4096,
    )
    logger.info("gateway listening on http://%s:%d", settings.host, settings.port)
    uvicorn.Server(config).run(sockets=[sock])


__all__ = ["KEEP_ALIVE_S", "bind_socket", "check_bind", "check_layout", "serve"]
