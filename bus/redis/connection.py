"""Redis connections, and the one place where redis-py's errors become hookbus's.

A bus on a Redis Cluster is named by a ``redis+cluster://`` (or ``rediss+cluster://``) URL:
``HOOKBUS_REDIS_CLUSTER=1`` / ``--redis-cluster`` turn the configured URL into one
(:func:`bus.redis.urls.cluster_url`), so the choice travels with the URL to every role and
command; each role reads it once, as a :class:`bus.redis.topology.Topology`. :func:`connect`
then answers a redis-py ``RedisCluster`` seeded from that node. The cluster client speaks the
same commands; what it cannot do is named where it matters: no MULTI transactions
(:func:`transaction`: a connection to the slot's node), no scripts in its pipelines (the
dispatcher sends them one by one), and no asyncio Pub/Sub (the gateway's sharded
subscriptions use connections of their own, :mod:`gateway.replies.sharded`).

The async queue's Redis may be named by a Sentinel URL (``redis+sentinel://``,
:mod:`bus.redis.urls`): :func:`connect` then answers a client of the master the Sentinels name
(:class:`SentinelBlockingPool`), which follows it across failovers.
"""

from __future__ import annotations

import ast
import contextlib
import re
import socket
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Final, cast
from urllib.parse import urlsplit, urlunsplit

import hiredis
import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio import BlockingConnectionPool
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

from bus.errors import BusUnavailable, RedisCommandError
from bus.redis.lean import framed_alike
from bus.redis.urls import CLUSTER_SCHEMES, SentinelURL, is_sentinel_url, mask_url, parse_sentinel_url

#: TCP options of every connection to Redis over TCP: a peer that vanishes without closing (its
#: host gone, a network dropping packets) is noticed in seconds, not after the kernel's 15
#: retransmissions (many minutes): keepalive probes after 5 s idle, every 2 s, 3 of them, and
#: data unacknowledged for 10 s fails the connection. The kernel keeps that watch, for no timer
#: per command. Only the options this platform has.
TCP_KEEPALIVE_OPTIONS: dict[int, int] = {
    getattr(socket, name): value
    for name, value in (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 3), ("TCP_USER_TIMEOUT", 10_000))
    if hasattr(socket, name)
}


def keepalive_options(url: str) -> dict[str, Any]:
    """The redis-py options that put :data:`TCP_KEEPALIVE_OPTIONS` on ``url``'s connections
    (none for a unix socket, which has no TCP options)."""
    if url.startswith("unix:"):
        return {}
    return {"socket_keepalive": True, "socket_keepalive_options": TCP_KEEPALIVE_OPTIONS}


#: The codes of the error replies that mean "Redis cannot serve this right now", not "this
#: command is wrong" (a whole word: ``BUSYGROUP`` is an ordinary answer, not ``BUSY``). redis-py
#: strips the code of OOM / READONLY / LOADING replies and raises a class of its own instead.
_TRANSIENT_CLASSES = (
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.MasterDownError,
)
_TRANSIENT_CODES: Final = frozenset(
    ("OOM", "READONLY", "LOADING", "MISCONF", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS")
)
#: A script's failed call reads "Error running script ...: -OOM command not allowed ...", an
#: aborted MULTI "Transaction discarded because of: OOM command not allowed ...".
_WRAPPED_CODE = re.compile(r"(?:(?<!\S)-|because of: )([A-Z]+) ")
#: What a raising pipeline makes of an error's text: redis-py's asyncio client puts the repr of
#: the error's args after it (``('MISCONF ...',)``), its other clients the text itself.
_PIPELINE_ANNOTATION = re.compile(r"Command # \d+ \(.*\) of pipeline caused error: (?P<reply>.*)", re.DOTALL)


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def node_url(url: str) -> str:
    """The plain ``redis://`` URL of a cluster URL's seed node (``url`` itself otherwise)."""
    parts = urlsplit(url)
    if parts.scheme in CLUSTER_SCHEMES:
        return urlunsplit(parts._replace(scheme=CLUSTER_SCHEMES[parts.scheme]))
    return url


def is_cluster(client: object) -> bool:
    """Whether ``client`` talks to a Redis Cluster. For the helpers here that are handed a client
    (:func:`read_streams`, :func:`transaction`); the roles ask their
    :class:`~bus.redis.topology.Topology` instead."""
    return isinstance(client, RedisCluster)


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
    set (CLIENT SETNAME) on every connection, also after a reconnect. A cluster URL answers
    a ``RedisCluster`` (typed as ``Redis``: it has the same command methods); a Sentinel URL a
    client of its master.
    """
    if is_cluster_url(url):
        cluster = RedisCluster.from_url(
            node_url(url),
            socket_connect_timeout=connect_timeout_s,
            socket_timeout=socket_timeout_s,
            decode_responses=False,
            client_name=client_name,
            **keepalive_options(url),
            # Follows MOVED/ASK and re-reads the topology after a failover; the caller's own
            # deadline still bounds every call.
            cluster_error_retry_attempts=3,
        )
        return cast(aioredis.Redis, cluster)
    options: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout_s,
        "socket_timeout": socket_timeout_s,
        "retry_on_timeout": False,
        "health_check_interval": 0,
        "decode_responses": False,
        "client_name": client_name,
        **keepalive_options(url),
    }
    if is_sentinel_url(url):
        # No bound (as from_url's pool): max_connections=None is redis-py's "no limit".
        return aioredis.Redis.from_pool(sentinel_pool(parse_sentinel_url(url), max_connections=None, **options))
    client: aioredis.Redis = aioredis.Redis.from_url(url, **options)
    pool = client.connection_pool
    pool.connection_class = hiredis_packing(pool.connection_class)  # no connection is open yet
    return client


class _HiredisPacking(AbstractConnection):
    def pack_command(self, *args: Any) -> list[bytes]:
        # redis-py's asyncio connections pack in Python, re-joining the buffer at every argument:
        # a settle call's hundred arguments cost more than Redis takes to run it. hiredis packs
        # what both encode alike: bytes, str (a StrEnum too) and a plain int; redis-py keeps an
        # int subclass (packed by repr), a bool (refused) and a float (its text may differ).
        if framed_alike(args):
            head = args[0]
            if isinstance(head, str):  # "CONFIG GET": the words are separate arguments, as redis-py does
                args = (*head.encode().split(), *args[1:])
            elif b" " in head:
                args = (*head.split(), *args[1:])
            return [hiredis.pack_command(args)]
        return super().pack_command(*args)


_PACKING_CLASSES: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def hiredis_packing(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """``connection_class`` packing commands with hiredis (C) instead of redis-py's Python (one
    subclass per class)."""
    if issubclass(connection_class, _HiredisPacking):
        return connection_class
    found = _PACKING_CLASSES.get(connection_class)
    if found is None:
        found = _PACKING_CLASSES[connection_class] = type(
            f"Hiredis{connection_class.__name__}", (_HiredisPacking, connection_class), {}
        )
    return found


class SentinelBlockingPool(SentinelConnectionPool, BlockingConnectionPool):
    """Connections to the master of a Sentinel service, bounded as :class:`BlockingConnectionPool`
    bounds them (a caller waits for a free one rather than open more).

    A connection asks the Sentinels where the master is when it connects, and connects again
    when its master is gone or answers ``READONLY`` (demoted by a failover): that call fails, as
    any call to a Redis that went away does, and the next one reaches the new master.
    """

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        if inuse_connections:  # the pool is being closed: so are its connections to the Sentinels
            for sentinel in self.sentinel_manager.sentinels:
                await sentinel.aclose()


def sentinel_pool(url: SentinelURL, **options: Any) -> SentinelBlockingPool:
    """A :class:`SentinelBlockingPool` for ``url``; ``options`` as :class:`BlockingConnectionPool` takes
    them (its ``socket_*`` timeouts apply to the Sentinels too)."""
    timeouts = {name: value for name, value in options.items() if name.startswith("socket_")}
    sentinels = Sentinel(
        list(url.sentinels),  # type: ignore[no-untyped-call]
        sentinel_kwargs={**timeouts, "password": url.sentinel_password},
    )
    pool: SentinelBlockingPool = SentinelBlockingPool(  # type: ignore[no-untyped-call]
        url.service_name, sentinels, db=url.db, username=url.username, password=url.password, **options
    )
    pool.connection_class = hiredis_packing(pool.connection_class)
    return pool


async def read_streams(
    client: aioredis.Redis,
    streams: Mapping[Any, Any],
    *,
    count: int | None = None,
    block_ms: int | None = None,
    group: str | None = None,
    consumer: str | None = None,
) -> Any:
    """``XREAD`` (or ``XREADGROUP`` with ``group``) of streams that share one slot.

    On a cluster the command goes straight to the node that serves the slot: redis-py would
    first ask its default node for the keys of a command with movable keys (``COMMAND
    GETKEYS``), a round trip more per read, and one that fails every partition's reads while
    that node is the master failing over.
    """
    if not is_cluster(client):
        if group is not None:
            return await client.xreadgroup(group, consumer or "", dict(streams), count=count, block=block_ms)
        return await client.xread(dict(streams), count=count, block=block_ms)
    pieces: list[Any] = ["XREADGROUP", "GROUP", group, consumer] if group is not None else ["XREAD"]
    if count is not None:
        pieces += ["COUNT", count]
    if block_ms is not None:
        pieces += ["BLOCK", block_ms]
    pieces += ["STREAMS", *streams.keys(), *streams.values()]
    cluster = cast(RedisCluster, client)
    await cluster.initialize()
    node = cluster.get_node_from_key(next(iter(streams)))
    if node is None:
        raise redis.exceptions.ConnectionError(f"no node of the cluster serves the slot of {next(iter(streams))}")
    return await cluster.execute_command(*pieces, target_nodes=node)


@contextlib.asynccontextmanager
async def transaction(client: aioredis.Redis, key: str) -> AsyncIterator[Pipeline]:
    """A MULTI/EXEC pipeline for keys that share ``key``'s slot. On a cluster (whose client has
    no MULTI) it runs on a connection of its own to the node that owns the slot; for the rare
    writes that need it (tokens, policy versions), not for the hot path."""
    if not is_cluster(client):
        async with client.pipeline(transaction=True) as pipe:
            yield pipe
        return
    cluster = cast(RedisCluster, client)
    await cluster.initialize()
    node = cluster.get_node_from_key(key)
    if node is None:
        raise redis.exceptions.ConnectionError(f"no node of the cluster serves the slot of {key}")
    options = {
        name: value
        for name, value in node.connection_kwargs.items()
        if name in ("username", "password", "socket_connect_timeout", "socket_timeout")
    }
    ssl = node.connection_class is not None and issubclass(node.connection_class, aioredis.SSLConnection)
    direct = aioredis.Redis(host=node.host, port=int(node.port), ssl=ssl, **options)
    try:
        async with direct.pipeline(transaction=True) as pipe:
            yield pipe
    finally:
        await direct.aclose()


def error_reply(exc: BaseException) -> str:
    """The error reply Redis sent for ``exc`` (without the code redis-py strips off the replies it
    raises a class of its own for), also when a raising pipeline has wrapped it in the failed
    command's text."""
    text = str(exc.args[0]) if exc.args else ""
    annotated = _PIPELINE_ANNOTATION.fullmatch(text)
    if annotated is None:
        return text
    reply = annotated["reply"]
    if reply.startswith("(") and reply.endswith(")"):
        with contextlib.suppress(ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            args = ast.literal_eval(reply)
            if isinstance(args, tuple) and args and isinstance(args[0], str):
                return args[0]
    return reply


def is_transient(exc: BaseException) -> bool:
    """Whether a Redis error means "not now" (retry later) rather than "never" (a wrong command):
    read from its class, or the code of the error reply it carries, raised or pipelined."""
    if isinstance(
        exc,
        (
            redis.exceptions.ConnectionError,
            redis.exceptions.TimeoutError,
            redis.exceptions.RedisClusterException,
            *_TRANSIENT_CLASSES,
        ),
    ):
        return True
    if not isinstance(exc, redis.exceptions.ResponseError):
        return False
    reply = error_reply(exc)
    if reply.split(" ", 1)[0] in _TRANSIENT_CODES:
        return True
    return any(code in _TRANSIENT_CODES for code in _WRAPPED_CODE.findall(reply))


#: The code of the error replies that redis-py raises as a class of their own, without it.
_CODES: Final = {
    redis.exceptions.NoScriptError: "NOSCRIPT",
    redis.exceptions.WatchError: "WATCH",
    redis.exceptions.ReadOnlyError: "READONLY",
    redis.exceptions.OutOfMemoryError: "OOM",
    redis.exceptions.BusyLoadingError: "LOADING",
}
_UNREACHABLE = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    OSError,
    redis.exceptions.RedisClusterException,  # no node of a cluster answers
)


def hookbus_error(exc: BaseException, url: str = "") -> BusUnavailable | RedisCommandError | None:
    """The hookbus error a redis-py error stands for (None for anything else): an outage is
    :class:`BusUnavailable`, a refused command :class:`RedisCommandError` with its code.

    Pipelines run with ``raise_on_error=False`` hold such errors among their results: this is
    how their callers read them, as :func:`redis_errors` reads raised ones.
    """
    if isinstance(exc, _UNREACHABLE):
        where = f" at {mask_url(url)}" if url else ""
        # A deadline that ran out (the builtin TimeoutError is an OSError) carries no message.
        detail = str(exc) or ("timed out" if isinstance(exc, TimeoutError) else type(exc).__name__)
        return BusUnavailable(f"redis unavailable{where}: {detail}")
    if not isinstance(exc, redis.exceptions.RedisError):
        return None
    # A Redis at maxmemory (OOM), loading its data set or running a long script cannot take
    # writes for now: that is an outage to fail open on, not a 500.
    if is_transient(exc):
        return BusUnavailable(f"redis not ready: {exc}")
    code = next((c for cls, c in _CODES.items() if isinstance(exc, cls)), None)
    if code is None:
        first = error_reply(exc).split(" ", 1)[0]
        code = first if first.isupper() else type(exc).__name__
    return RedisCommandError(code, str(exc) or type(exc).__name__)


def lost_connection(result: object) -> bool:
    """Whether a pipelined result is the error of a connection that broke or timed out."""
    return isinstance(result, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError))


def missing_script(result: object) -> bool:
    """Whether a pipelined result says the script is not loaded (a restarted or flushed Redis)."""
    return isinstance(result, redis.exceptions.NoScriptError)


@contextlib.contextmanager
def redis_errors(url: str = "") -> Iterator[None]:
    """The one boundary of redis-py's errors: inside the block, an outage raises
    :class:`BusUnavailable` and a refused command :class:`RedisCommandError` (see :func:`hookbus_error`)."""
    try:
        yield
    except (redis.exceptions.RedisError, OSError) as exc:
        mapped = hookbus_error(exc, url)
        if mapped is None:
            raise
        raise mapped from exc


__all__ = [
    "TCP_KEEPALIVE_OPTIONS",
    "SentinelBlockingPool",
    "connect",
    "error_reply",
    "hookbus_error",
    "is_cluster",
    "is_cluster_url",
    "is_transient",
    "keepalive_options",
    "lost_connection",
    "missing_script",
    "node_url",
    "read_streams",
    "redis_errors",
    "sentinel_pool",
    "transaction",
]
