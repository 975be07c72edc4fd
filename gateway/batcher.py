"""Auto-pipelining of the gateway's stream appends (:class:`bus.autopipeline.AutoPipeline`).

Every request that arrives while an append round trip is in flight joins the next one:
under load one pipeline carries dozens of XADDs (one write, one read, one connection),
at low load an append leaves at once. Each caller still gets its own result or error: one
refused XADD must not make the others look lost (they would be spooled and appended twice).
An append whose request gave up waiting is still sent: its event must reach the log. On a
Redis Cluster each stream (one partition's, one slot) has its round trips of its own, so a
master that fails over holds up its own partition's appends only.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions

from bus.autopipeline import AutoPipeline
from bus.connection import is_cluster, redis_errors
from bus.keys import WORK_STREAM_MAXLEN
from bus.protocol import StreamFields

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
        self._pipeline: AutoPipeline[tuple[str, StreamFields]] = AutoPipeline(self._send, redis_url, what="append")

    async def append(self, stream: str, fields: StreamFields) -> None:
        """Append one entry; raises :class:`BusUnavailable` if Redis cannot take it."""
        await self._pipeline.call(stream if self._per_stream else "", (stream, fields))

    async def _send(self, group: Hashable, batch: list[tuple[str, StreamFields]]) -> list[Any]:
        """One pipeline; per entry, its id or the error Redis answered with."""
        client = self.client_for(batch[0][0])
        with redis_errors(self.redis_url):
            async with client.pipeline(transaction=False) as pipe:
                for stream, fields in batch:
                    pipe.xadd(stream, fields, maxlen=self.maxlen, approximate=True)  # type: ignore[arg-type]
                results: list[Any] = await pipe.execute(raise_on_error=False)
        if self._per_stream and any(isinstance(r, _CONNECTION_ERRORS) for r in results):
            # A cluster pipeline that does not raise keeps its map of the slots: after a failover
            # it would go on sending to the dead master. Closing it makes the next use re-read it.
            await client.aclose()
        return results


__all__ = ["AppendBatcher"]
