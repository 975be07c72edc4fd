"""Redis connections, and the one place where redis-py's errors become hookbus's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import redis.asyncio as aioredis
import redis.exceptions

from bus.errors import BusUnavailable
from bus.settings import mask_url

#: Error replies that mean "Redis cannot serve this right now", not "this command is wrong".
#: redis-py strips the code of OOM / READONLY replies and raises a subclass instead; the
#: others keep their code (with a space: ``BUSYGROUP`` is an ordinary answer, not ``BUSY``).
_TRANSIENT_CLASSES = (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError)
_SCRIPT_TRANSIENT = ("OOM ", "READONLY ", "LOADING ", "MISCONF ", "MASTERDOWN ", "TRYAGAIN ", "CLUSTERDOWN ")
_TRANSIENT_REPLIES = ("LOADING ", "MISCONF ", "BUSY ", "MASTERDOWN ", "TRYAGAIN ", "CLUSTERDOWN ", "NOREPLICAS ")


def connect(
    url: str,
    *,
    connect_timeout_s: float = 1.0,
    socket_timeout_s: float | None = 5.0,
    client_name: str | None = None,
) -> aioredis.Redis:
    """An asyncio Redis client for ``url`` that fails fast instead of retrying.

    hookbus never retries a Redis call on the request path: the gateway's deadline is the
    only clock that matters, and a fail-open answer beats a late one. ``client_name`` is
    set (CLIENT SETNAME) on every connection, also after a reconnect.
    """
    client: aioredis.Redis = aioredis.Redis.from_url(
        url,
        socket_connect_timeout=connect_timeout_s,
        socket_timeout=socket_timeout_s,
        retry_on_timeout=False,
        health_check_interval=0,
        decode_responses=False,
        client_name=client_name,
    )
    return client


def is_transient(exc: BaseException) -> bool:
    """Whether a Redis error means "not now" (retry later) rather than "never" (a wrong command)."""
    if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, *_TRANSIENT_CLASSES)):
        return True
    if not isinstance(exc, redis.exceptions.ResponseError):
        return False
    reply = str(exc).rpartition("of pipeline caused error: ")[2]
    # A script's failed call reads "Error running script ...: -OOM command not allowed ...", an
    # aborted MULTI "Transaction discarded because of: OOM command not allowed ...".
    return reply.startswith(_TRANSIENT_REPLIES) or any(
        f"-{code}" in reply or f"because of: {code}" in reply for code in _SCRIPT_TRANSIENT)


@contextlib.contextmanager
def redis_errors(url: str = "") -> Iterator[None]:
    """Map redis-py connection failures to :class:`BusUnavailable`."""
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        where = f" at {mask_url(url)}" if url else ""
        raise BusUnavailable(f"redis unavailable{where}: {exc}") from exc
    except redis.exceptions.ResponseError as exc:
        # A Redis at maxmemory (OOM), loading its data set or running a long script cannot
        # take writes for now: that is an outage to fail open on, not a 500.
        if is_transient(exc):
            raise BusUnavailable(f"redis not ready: {exc}") from exc
        raise


__all__ = ["connect", "is_transient", "redis_errors"]
