"""Auto-pipelining of the gateway's stream appends.

Every request that arrives while an append round trip is in flight joins the next one:
under load one pipeline carries dozens of XADDs (one write, one read, one connection),
at low load an append leaves at once. Each caller still gets its own result or error. On a
Redis Cluster each stream (one partition's, one slot) has its round trips of its own, so a
master that fails over holds up its own partition's appends only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions

from bus.connection import deliver_results, is_cluster, redis_errors
from bus.errors import BusUnavailable
from bus.keys import WORK_STREAM_MAXLEN
from bus.protocol import StreamFields

logger = logging.getLogger("hookbus.gateway")

_CONNECTION_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)



class AppendBatcher:
    """Coalesces concurrent XADDs into pipelined round trips."""

    def __init__(self, redis: aioredis.Redis, redis_url: str = "", maxlen: int = WORK_STREAM_MAXLEN,
                 client_for: Callable[[str], aioredis.Redis] | None = None) -> None:
        """``client_for(stream)``: the client of a stream's partition (:class:`bus.connection.PartitionClients`)."""
        self.redis = redis
        self.client_for = client_for or (lambda stream: redis)
        self.redis_url = redis_url
        self.maxlen = maxlen
        self._per_stream = is_cluster(redis)
        self._pending: dict[str, list[tuple[str, StreamFields, asyncio.Future[None]]]] = {}
        self._flushing: set[str] = set()

    async def append(self, stream: str, fields: StreamFields) -> None:
        """Append one entry; raises :class:`BusUnavailable` if Redis cannot take it."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        group = stream if self._per_stream else ""
        self._pending.setdefault(group, []).append((stream, fields, future))
        if group not in self._flushing:
            self._flushing.add(group)
            asyncio.get_running_loop().call_soon(self._start_flush, group)
        await future

    def _start_flush(self, group: str) -> None:
        task = asyncio.ensure_future(self._flush_all(group))
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def _flush_all(self, group: str) -> None:
        try:
            while batch := self._pending.pop(group, []):
                try:
                    results = await self._send(batch)
                except BusUnavailable as exc:
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                except BaseException as exc:  # never leave a caller waiting forever
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(BusUnavailable(f"append failed: {exc!r}"))
                    raise
                else:
                    # Each caller learns the fate of its own entry: one refused XADD must not
                    # make the others look lost (they would be spooled and appended twice).
                    deliver_results((future for _, _, future in batch), results, self.redis_url, lambda _: None)
        finally:
            self._flushing.discard(group)

    async def _send(self, batch: list[tuple[str, StreamFields, asyncio.Future[None]]]) -> list[Any]:
        """One pipeline; per entry, its id or the error Redis answered with."""
        client = self.client_for(batch[0][0])
        with redis_errors(self.redis_url):
            async with client.pipeline(transaction=False) as pipe:
                for stream, fields, _ in batch:
                    pipe.xadd(stream, fields, maxlen=self.maxlen, approximate=True)  # type: ignore[arg-type]
                results: list[Any] = await pipe.execute(raise_on_error=False)
        if self._per_stream and any(isinstance(r, _CONNECTION_ERRORS) for r in results):
            # A cluster pipeline that does not raise keeps its map of the slots: after a failover
            # it would go on sending to the dead master. Closing it makes the next use re-read it.
            await client.aclose()
        return results


__all__ = ["AppendBatcher"]
