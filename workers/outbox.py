"""Coalesces a dispatcher's writes (replies, log records, acks) into pipelined round trips.

Under load, everything finished while the previous pipeline was in flight goes out in the
next one; at low load each write leaves at once. A failed flush is retried with backoff so
that nothing is acknowledged before its decision-log record is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import redis.asyncio as aioredis

from bus.connection import redis_errors
from bus.errors import BusUnavailable
from bus.keys import DISPATCH_GROUP
from bus.protocol import LogRecord

logger = logging.getLogger("hookbus.dispatcher")

_Op = tuple[str, tuple[Any, ...]]


class Outbox:
    """Queued Redis writes, flushed by one background task."""

    def __init__(self, redis: aioredis.Redis, redis_url: str = "", log_stream: str = "") -> None:
        self.redis = redis
        self.redis_url = redis_url
        self._ops: list[_Op] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self.log_stream = log_stream

    def publish(self, channel: str, data: bytes) -> None:
        self._push(("publish", (channel, data)))

    def ack(self, stream: str, entry_id: bytes) -> None:
        self._push(("xack", (stream, DISPATCH_GROUP, entry_id)))

    def xadd(self, stream: str, fields: dict[str, Any], maxlen: int) -> None:
        self._push(("xadd", (stream, fields, maxlen)))

    def log(self, record: LogRecord, maxlen: int) -> None:
        self.xadd(self.log_stream, record.encode(), maxlen)

    def _push(self, op: _Op) -> None:
        self._ops.append(op)
        self._idle.clear()
        self._wake.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="hookbus-outbox")

    async def flushed(self) -> None:
        await self._idle.wait()

    async def stop(self, timeout_s: float = 5.0) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self.flushed()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._ops:
            logger.warning("stopping with %d unflushed writes", len(self._ops))

    async def _run(self) -> None:
        failures = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._ops:
                ops, self._ops = self._ops, []
                try:
                    await self._flush(ops)
                    failures = 0
                except BusUnavailable as exc:
                    if failures == 0:
                        logger.warning("outbox: %s; retrying", exc)
                    failures += 1
                    self._ops = ops + self._ops
                    await asyncio.sleep(min(1.0, 0.05 * failures))
                except Exception:
                    # Never let the one writer task die: its entries stay unacknowledged, so
                    # they are claimed again later (and dead-lettered if they keep failing).
                    logger.exception("outbox: dropping %d writes that could not be sent", len(ops))
            self._idle.set()

    async def _flush(self, ops: list[_Op]) -> None:
        """One pipeline: one PUBLISH per reply channel (agents wait on those), then the log
        records, then one XACK per stream (nothing is acknowledged before its record)."""
        replies: dict[str, list[bytes]] = {}
        acks: dict[str, list[bytes]] = {}
        records: list[tuple[Any, ...]] = []
        for name, args in ops:
            if name == "xadd":
                records.append(args)
            elif name == "publish":
                replies.setdefault(args[0], []).append(args[1])
            else:
                acks.setdefault(args[0], []).append(args[2])
        with redis_errors(self.redis_url):
            async with self.redis.pipeline(transaction=False) as pipe:
                for channel, batch in replies.items():
                    # Several replies for one gateway travel as one message: a JSON array.
                    pipe.publish(channel, batch[0] if len(batch) == 1 else b"[" + b",".join(batch) + b"]")
                for stream, fields, maxlen in records:
                    pipe.xadd(stream, fields, maxlen=maxlen, approximate=True)
                for stream, ids in acks.items():
                    pipe.xack(stream, DISPATCH_GROUP, *ids)
                await pipe.execute(raise_on_error=False)


__all__ = ["Outbox"]
