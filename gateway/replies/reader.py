"""One reply reader per gateway process (on a single Redis; :mod:`gateway.replies.sharded` on a cluster).

Every waiting request registers a future under its event id; a single Pub/Sub
subscription on the process's reply channel resolves them. Thousands of waiting agents
therefore cost one Redis connection, not one each. When Redis goes away the reader
reconnects with backoff; requests waiting meanwhile fail open on their own deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import redis.asyncio as aioredis

from bus.errors import BusUnavailable, ProtocolError, RedisCommandError
from bus.redis.connection import connect, redis_errors
from bus.runtime.retry import BackgroundTask, Backoff
from bus.stream.protocol import Reply

logger = logging.getLogger("hookbus.gateway")

_PING_EVERY_S = 5.0


class PendingReplies:
    """The requests waiting for a reply, by event id, and what resolves them."""

    def __init__(self) -> None:
        #: Set while the reader receives every reply this gateway may be sent.
        self.subscribed = asyncio.Event()
        self.last_error: str | None = None
        self._pending: dict[str, asyncio.Future[Reply]] = {}

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def expect(self, event_id: str) -> asyncio.Future[Reply]:
        """A future resolved with the reply to ``event_id``; call :meth:`forget` when done."""
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[event_id] = future
        return future

    def forget(self, event_id: str) -> None:
        self._pending.pop(event_id, None)

    def _resolve(self, data: bytes) -> None:
        try:
            replies = Reply.decode_many(data)
        except ProtocolError as exc:
            logger.warning("dropping reply: %s", exc)
            return
        for reply in replies:
            future = self._pending.pop(reply.event_id, None)
            if future is not None and not future.done():
                future.set_result(reply)


class ReplyWaiter(PendingReplies):
    """Resolves waiting requests from the replies published on ``channel``."""

    def __init__(self, redis_url: str, channel: str) -> None:
        super().__init__()
        self.redis_url = redis_url
        self.channel = channel
        self._task = BackgroundTask(self._run, "hookbus-reply-reader")
        self._backoff = Backoff(cap_s=1.0)
        self._last_seen = 0.0

    def channel_for(self, partition: int) -> str:
        """The channel a dispatcher answers on (one for every partition on a single Redis)."""
        return self.channel

    async def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self) -> None:
        while True:
            client = connect(self.redis_url, socket_timeout_s=None)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                with redis_errors():
                    await pubsub.subscribe(self.channel)
                    self.subscribed.set()
                    self.last_error = None
                    if self._backoff.failures:
                        logger.info("reply reader reconnected to %s", self.channel)
                    self._backoff.reset()
                    await self._read(pubsub)
            except asyncio.CancelledError:
                raise
            except (BusUnavailable, RedisCommandError) as exc:
                self.subscribed.clear()
                self.last_error = str(exc) or type(exc).__name__
                if self._backoff.failures == 0:
                    logger.warning("reply reader lost redis: %s", self.last_error)
                await self._backoff.wait()
            finally:
                self.subscribed.clear()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
                with contextlib.suppress(Exception):
                    await client.aclose()

    async def _read(self, pubsub: aioredis.client.PubSub) -> None:
        """Read replies until the connection fails; a watchdog pings and notices silence."""
        self._last_seen = time.monotonic()
        reader = asyncio.create_task(self._read_messages(pubsub))
        try:
            while True:
                done, _ = await asyncio.wait({reader}, timeout=_PING_EVERY_S)
                if done:
                    reader.result()
                    return
                if time.monotonic() - self._last_seen > 3 * _PING_EVERY_S:
                    # A silent half-open connection would otherwise hang the reader forever.
                    raise BusUnavailable("no traffic on the reply channel, not even pongs")
                await pubsub.ping()
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, BusUnavailable, RedisCommandError), redis_errors():
                await reader

    async def _read_messages(self, pubsub: aioredis.client.PubSub) -> None:
        while True:
            # Blocking read with no timer: the per-message cost stays at parsing the reply.
            message = await pubsub.get_message(timeout=None)
            self._last_seen = time.monotonic()
            if message is not None and message["type"] == "message":
                self._resolve(message["data"])


__all__ = ["PendingReplies", "ReplyWaiter"]
