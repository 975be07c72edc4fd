"""Running the gateway on uvicorn."""

from __future__ import annotations

import ipaddress
import logging

import uvicorn

from bus.errors import ConfigError
from bus.policy import Policy
from bus.settings import Settings
from gateway.app import create_app

logger = logging.getLogger("hookbus.gateway")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings) -> None:
    """Refuse a non-loopback bind with no tokens unless ``--insecure`` (contract §3)."""
    if not is_loopback(settings.host) and not settings.tokens and not settings.insecure:
        raise ConfigError(
            f"refusing to bind {settings.host} with no tokens: set HOOKBUS_TOKENS (tenant:token) "
            "or pass --insecure"
        )


def serve(settings: Settings, policy: Policy, redis_url: str) -> None:
    """Serve the gateway in the foreground until SIGINT/SIGTERM."""
    check_bind(settings)
    app = create_app(settings, policy, redis_url)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level=settings.log_level.lower(),
        server_header=False,
        timeout_graceful_shutdown=5,
        backlog=4096,
    )
    logger.info("gateway listening on http://%s:%d", settings.host, settings.port)
    uvicorn.Server(config).run()


__all__ = ["check_bind", "serve"]
