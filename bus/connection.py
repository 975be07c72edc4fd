"""Redis connections, and the one place where redis-py's errors become hookbus's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import redis.asyncio as aioredis
import redis.exceptions

from bus.errors import BusUnavailable
from bus.settings import mask_url


def connect(url: str, *, connect_timeout_s: float = 1.0, socket_timeout_s: float | None = 5.0) -> aioredis.Redis:
    """An asyncio Redis client for ``url`` that fails fast instead of retrying.

    hookbus never retries a Redis call on the request path: the gateway's deadline is the
    only clock that matters, and a fail-open answer beats a late one.
    """
    return aioredis.Redis.from_url(
        url,
        socket_connect_timeout=connect_timeout_s,
        socket_timeout=socket_timeout_s,
        retry_on_timeout=False,
        health_check_interval=0,
        decode_responses=False,
    )


@contextlib.contextmanager
def redis_errors(url: str = "") -> Iterator[None]:
    """Map redis-py connection failures to :class:`BusUnavailable`."""
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        where = f" at {mask_url(url)}" if url else ""
        raise BusUnavailable(f"redis unavailable{where}: {exc}") from exc
    except redis.exceptions.ResponseError as exc:
        if "LOADING" in str(exc) or "MISCONF" in str(exc) or "READONLY" in str(exc):
            raise BusUnavailable(f"redis not ready: {exc}") from exc
        raise


__all__ = ["connect", "redis_errors"]
