"""Auto-pipelining of the gateway's stream appends.

Every request that arrives while an append round trip is in flight joins the next one:
under load one pipeline carries dozens of XADDs (one write, one read, one connection),
at low load an append leaves at once. Each caller still gets its own result or error.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio as aioredis

from bus.connection import redis_errors
from bus.errors import BusUnavailable
from bus.keys import WORK_STREAM_MAXLEN
from bus.protocol import StreamFields

logger = logging.getLogger("hookbus.gateway")



class AppendBatcher:
    """Coalesces concurrent XADDs into pipelined round trips."""

    def __init__(self, redis: aioredis.Redis, redis_url: str = "", maxlen: int = WORK_STREAM_MAXLEN) -> None:
        self.redis = redis
        self.redis_url = redis_url
        self.maxlen = maxlen
        self._pending: list[tuple[str, StreamFields, asyncio.Future[None]]] = []
        self._flushing = False

    async def append(self, stream: str, fields: StreamFields) -> None:
        """Append one entry; raises :class:`BusUnavailable` if Redis cannot take it."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((stream, fields, future))
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._start_flush)
        await future

    def _start_flush(self) -> None:
        task = asyncio.ensure_future(self._flush_all())
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def _flush_all(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
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
                    for (_, _, future), result in zip(batch, results, strict=True):
                        if future.done():
                            continue
                        if isinstance(result, Exception):
                            try:
                                with redis_errors(self.redis_url):
                                    raise result
                            except Exception as mapped:  # BusUnavailable, or the error itself
                                future.set_exception(mapped)
                        else:
                            future.set_result(None)
        finally:
            self._flushing = False

    async def _send(self, batch: list[tuple[str, StreamFields, asyncio.Future[None]]]) -> list[Any]:
        """One pipeline; per entry, its id or the error Redis answered with."""
        with redis_errors(self.redis_url):
            async with self.redis.pipeline(transaction=False) as pipe:
                for stream, fields, _ in batch:
                    pipe.xadd(stream, fields, maxlen=self.maxlen, approximate=True)  # type: ignore[arg-type]
                results: list[Any] = await pipe.execute(raise_on_error=False)
                return results


__all__ = ["AppendBatcher"]
