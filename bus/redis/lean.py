"""A lean path for a hot pipeline: hiredis framing on one held connection of a client's pool.

redis-py's pipeline costs its caller far more CPU than Redis takes to run the commands: its
command stack, a response callback and a ``read_response`` (with its own timeout and error
wrapping) per reply. ``bench/redis_clients.py``: 12 µs of client CPU per ``XADD`` in pipelines
of 32, 64 µs for one alone; framed here, 2.3 µs and 20 µs.

The connection stays redis-py's: the pool made it (TLS, ``AUTH``, ``SELECT``, ``CLIENT SETNAME``,
a Sentinel's current master) and is the one that closes it. Only its socket is used here, one
round trip at a time: the commands packed by hiredis, written at once, their replies read by a
hiredis reader that makes an error reply redis-py's exception, returned in its place as
``pipeline.execute(raise_on_error=False)`` returns it. A round trip that fails, or is
cancelled, drops the connection (a half-read reply must not meet the next caller) and raises;
the next round trip takes a fresh one from the pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.connection import AbstractConnection

#: What one read takes from the socket at most.
_READ_BYTES = 1 << 16
_PLAIN = frozenset({bytes, str, int})
Command = Sequence[bytes | str | int]


def framed_alike(command: Sequence[Any]) -> bool:
    """Whether hiredis packs every argument of ``command`` as redis-py does: bytes, a str (a
    ``StrEnum`` too) and a plain int (a float's text may differ; an int subclass is packed by repr).
    Each type is looked at once, not each argument (a settle call has hundreds)."""
    kinds = set(map(type, command))
    return kinds <= _PLAIN or all(kind is int or issubclass(kind, (bytes, str)) for kind in kinds)


class LeanLink:
    """Round trips of a few hot commands over one connection held from ``client``'s pool."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._pool = client.connection_pool
        self._connection: AbstractConnection | None = None
        self._reader: Any = None
        self._timeout_s: float | None = None
        self._lock = asyncio.Lock()
        self._dropped: set[asyncio.Task[None]] = set()

    async def execute(self, commands: Sequence[Command]) -> list[Any]:
        """Each command's reply, in order (an error reply as redis-py's exception, not raised).
        Raises ``OSError`` (or redis-py's connection errors) when the round trip itself fails."""
        # (hiredis's stub types the argument as a tuple of one element)
        packed = b"".join([hiredis.pack_command(tuple(command)) for command in commands])  # type: ignore[arg-type]
        async with self._lock:
            connection = self._connection or await self._take()
            try:
                if self._timeout_s is None:
                    return await self._round_trip(connection, packed, len(commands))
                async with asyncio.timeout(self._timeout_s):  # the client's socket timeout, as redis-py's
                    return await self._round_trip(connection, packed, len(commands))
            except BaseException:
                self._drop()
                raise

    async def _round_trip(self, connection: AbstractConnection, packed: bytes, count: int) -> list[Any]:
        reader, writer = connection._reader, connection._writer
        if reader is None or writer is None:
            raise ConnectionResetError("the connection to Redis is closed")
        writer.write(packed)
        return [await _next_reply(self._reader, reader) for _ in range(count)]

    async def _take(self) -> AbstractConnection:
        connection: AbstractConnection = await self._pool.get_connection()
        # redis-py's own reader settings: an error reply becomes the exception redis-py raises for it.
        self._reader = hiredis.Reader(replyError=connection._parser.parse_error)
        self._timeout_s = connection.socket_timeout
        self._connection = connection
        return connection

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            task = asyncio.get_running_loop().create_task(self._release_closed(connection))
            self._dropped.add(task)
            task.add_done_callback(self._dropped.discard)

    async def _release_closed(self, connection: AbstractConnection) -> None:
        try:
            await connection.disconnect()
        finally:
            await self._pool.release(connection)

    async def aclose(self) -> None:
        """Give the connection back to the pool (healthy: no round trip is in flight)."""
        async with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None:
                await self._pool.release(connection)
        if self._dropped:
            await asyncio.gather(*self._dropped, return_exceptions=True)


async def pushes(pubsub: PubSub) -> AsyncIterator[Any]:
    """Every push on a subscribed ``pubsub``'s connection, read by hiredis: ``[b"message", channel,
    data]``, ``[b"pong", b""]``, the subscribe confirmations. redis-py still sends (``PING``, a
    subscription) on the connection; nothing else may read it. Raises ``ConnectionResetError``
    when Redis closes it, an error reply as redis-py's exception."""
    connection = pubsub.connection
    stream = connection._reader if connection is not None else None
    if connection is None or stream is None:
        raise ConnectionResetError("the subscription's connection is closed")
    reader = hiredis.Reader(replyError=connection._parser.parse_error)
    while True:
        push = await _next_reply(reader, stream)
        if isinstance(push, Exception):
            raise push
        yield push


async def _next_reply(parser: Any, stream: asyncio.StreamReader) -> Any:
    """The next reply ``parser`` (a hiredis reader) makes of what ``stream`` sends."""
    while (reply := parser.gets()) is False:
        data = await stream.read(_READ_BYTES)
        if not data:
            raise ConnectionResetError("Redis closed the connection")
        parser.feed(data)
    return reply


__all__ = ["Command", "LeanLink", "framed_alike", "pushes"]
