"""One reply reader per gateway process (on a single Redis; :mod:`gateway.replies.sharded` on a cluster).

Every waiting request registers a future under its event id, with the MAC state of the request
it appended; a single Pub/Sub subscription on the process's reply channel resolves them.
Thousands of waiting agents therefore cost one Redis connection, not one each. A reply whose
MAC does not verify (:mod:`bus.runtime.replykey`: anyone who can write to Redis can publish
here) is dropped, logged and counted in ``hookbus_replies_rejected_total``, and its request
goes on waiting for the real one. When Redis goes away the reader reconnects with backoff;
requests waiting meanwhile fail open on their own deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time

import redis.asyncio as aioredis

from bus.errors import BusUnavailable, ProtocolError, RedisCommandError
from bus.redis.connection import connect, redis_errors
from bus.redis.lean import pushes
from bus.runtime.metrics import Metrics, process_metrics
from bus.runtime.replykey import MAC_CHARS, reply_json, verify
from bus.runtime.retry import BackgroundTask, Backoff
from bus.stream.protocol import Reply

logger = logging.getLogger("hookbus.gateway")

_PING_EVERY_S = 5.0


class PendingReplies:
    """The requests waiting for a reply, by event id, and what resolves them."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        #: Set while the reader receives every reply this gateway may be sent.
        self.subscribed = asyncio.Event()
        self.last_error: str | None = None
        self.metrics = metrics or process_metrics()
        self._pending: dict[str, tuple[asyncio.Future[Reply], hashlib.blake2b]] = {}

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def expect(self, event_id: str, binding: hashlib.blake2b) -> asyncio.Future[Reply]:
        """A future resolved with the reply to ``event_id`` that verifies against ``binding``
        (:meth:`bus.runtime.replykey.ReplyKey.bind` of the request); call :meth:`forget` when done."""
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[event_id] = (future, binding)
        return future

    def forget(self, event_id: str) -> None:
        self._pending.pop(event_id, None)

    def _resolve(self, data: bytes) -> None:
        # One sealed reply per line (one line for a single reply: split returns ``data`` itself).
        for sealed in data.split(b"\n"):
            try:
                reply = Reply.decode(reply_json(sealed))
            except ProtocolError as exc:
                self.metrics.child(self.metrics.replies_rejected, "malformed").inc()
                logger.warning("dropping a reply: %s", exc)
                continue
            waiting = self._pending.get(reply.event_id)
            if waiting is None:  # another gateway's, or answered already
                continue
            future, binding = waiting
            if len(sealed) <= MAC_CHARS or not verify(binding, sealed):
                self._unauthenticated(reply.event_id, "still waiting for the real one")
                continue
            del self._pending[reply.event_id]
            if not future.done():
                future.set_result(reply)

    def verified(self, event_id: str, binding: hashlib.blake2b, sealed: bytes) -> Reply | None:
        """The reply in ``sealed`` (a dispatcher's, stored in the event's outcome key) if it verifies
        against ``binding``; else None, logged and counted."""
        if verify(binding, sealed):
            with contextlib.suppress(ProtocolError):
                return Reply.decode(reply_json(sealed))
        self._unauthenticated(event_id, "stored as settled")
        return None

    def _unauthenticated(self, event_id: str, where: str) -> None:
        self.metrics.child(self.metrics.replies_rejected, "unauthenticated").inc()
        logger.warning(
            "dropping a reply to event %s (%s): its MAC does not verify (forged in Redis, or made by a "
            "dispatcher with another HOOKBUS_REPLY_KEY)",
            event_id,
            where,
        )


class ReplyWaiter(PendingReplies):
    """Resolves waiting requests from the replies published on ``channel``."""

    def __init__(self, redis_url: str, channel: str, metrics: Metrics | None = None) -> None:
        super().__init__(metrics)
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
        # Blocking reads with no timer, framed by hiredis (redis-py's get_message costs twice as
        # much per message): the per-message cost stays at parsing the reply.
        async for push in pushes(pubsub):
            self._last_seen = time.monotonic()
            if push[0] == b"message":
                self._resolve(push[2])


__all__ = ["PendingReplies", "ReplyWaiter"]
