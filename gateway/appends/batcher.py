"""Auto-pipelining of the gateway's stream appends (:class:`bus.redis.autopipeline.AutoPipeline`).

Every request that arrives while an append round trip is in flight joins the next one:
under load one pipeline carries dozens of XADDs (one write, one read, one connection),
at low load an append leaves at once. Each caller still gets its own result or error: one
refused XADD must not make the others look lost (they would be spooled and appended twice).
An append whose request gave up waiting is still sent: its event must reach the log. On a
Redis Cluster each stream (one partition's, one slot) has its round trips of its own, so a
master that fails over holds up its own partition's appends only.

An append may also take its session's pending context (:mod:`bus.stream.pending_context`): it is
then the script :data:`~bus.stream.pending_context.APPEND_TAKING_CONTEXT` instead of an ``XADD``,
in the same pipeline (single Redis only; the caller passes no context key on a cluster).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Any

import redis.asyncio as aioredis

from bus.redis.autopipeline import AutoPipeline
from bus.redis.connection import lost_connection, missing_script, redis_errors
from bus.redis.keys import WORK_STREAM_MAXLEN
from bus.redis.lean import LeanLink, framed_alike
from bus.redis.topology import Topology
from bus.stream.pending_context import APPEND_TAKING_CONTEXT, CONTEXT_BATCH
from bus.stream.protocol import StreamFields

#: One append: the stream, the entry, the session's context list to take (or None).
_Append = tuple[str, StreamFields, str | None]


class AppendBatcher:
    """Coalesces concurrent XADDs into pipelined round trips."""

    def __init__(
        self,
        redis: aioredis.Redis,
        redis_url: str = "",
        maxlen: int = WORK_STREAM_MAXLEN,
        client_for: Callable[[str], aioredis.Redis] | None = None,
        *,
        topology: Topology | None = None,
    ) -> None:
        """``client_for(stream)``: a stream's partition's client (:class:`bus.redis.topology.PartitionClients`);
        ``topology``: the bus's (read from ``redis_url`` when not given)."""
        self.redis = redis
        self.client_for = client_for or (lambda stream: redis)
        self.redis_url = redis_url
        self.maxlen = maxlen
        self.topology = topology or Topology.from_url(redis_url)
        self._per_stream = not self.topology.batches_appends_across_streams
        #: Whether an append can take its session's pending context (one script: a single Redis only).
        self.can_take_context = self.topology.appends_take_context
        self._append_sha = redis.register_script(APPEND_TAKING_CONTEXT).sha
        self._pipeline: AutoPipeline[_Append] = AutoPipeline(self._send, redis_url, what="append")
        #: On a single Redis, each client's appends go over one held connection, framed by hiredis
        #: (:mod:`bus.redis.lean`); a cluster client routes by slot, so it keeps redis-py's pipeline.
        self._links: dict[int, tuple[aioredis.Redis, LeanLink]] = {}

    async def append(self, stream: str, fields: StreamFields, context_key: str | None = None) -> None:
        """Append one entry; with ``context_key``, take that session's pending context into it
        (single Redis only). Raises :class:`BusUnavailable` if Redis cannot take it."""
        await self._pipeline.call(stream if self._per_stream else "", (stream, fields, context_key))

    def append_failing_into(
        self, waiter: asyncio.Future[Any], stream: str, fields: StreamFields, context_key: str | None = None
    ) -> None:
        """:meth:`append`, for a request that awaits ``waiter`` (its reply) and not the append: the
        append's error (:class:`BusUnavailable` too) is set on ``waiter``, its success tells nobody."""
        self._pipeline.call_failing_into(stream if self._per_stream else "", (stream, fields, context_key), waiter)

    async def _send(self, group: Hashable, batch: list[_Append]) -> list[Any]:
        """One pipeline; per entry, its id or the error Redis answered with."""
        client = self.client_for(batch[0][0])
        with redis_errors(self.redis_url):
            results = await self._pipelined(client, batch, load=False)
            unloaded = [n for n, result in enumerate(results) if missing_script(result)]
            if unloaded:
                # A restarted or flushed Redis: those appends did not run. Sent again with the
                # script, they land after the rest of their pipeline (other sessions' events).
                for n, result in zip(
                    unloaded, await self._pipelined(client, [batch[n] for n in unloaded], load=True), strict=True
                ):
                    results[n] = result
        if self.topology.cluster and any(lost_connection(r) for r in results):
            # A cluster pipeline that does not raise keeps its map of the slots: after a failover
            # it would go on sending to the dead master. Closing it makes the next use re-read it.
            await client.aclose()
        return results

    async def _pipelined(self, client: aioredis.Redis, batch: list[_Append], load: bool) -> list[Any]:
        if not self.topology.cluster:
            commands = [self._command(stream, fields, context_key, load) for stream, fields, context_key in batch]
            if all(framed_alike(command) for command in commands):
                return await self._link(client).execute(commands)
        async with client.pipeline(transaction=False) as pipe:
            for stream, fields, context_key in batch:
                if context_key is None:
                    pipe.xadd(stream, fields, maxlen=self.maxlen, approximate=True)  # type: ignore[arg-type]
                    continue
                args: list[Any] = [self.maxlen, CONTEXT_BATCH]
                for field, value in fields.items():
                    args += (field, value)
                if load:  # EVAL caches the script: the next EVALSHA finds it
                    pipe.eval(APPEND_TAKING_CONTEXT, 2, stream, context_key, *args)
                else:
                    pipe.evalsha(self._append_sha, 2, stream, context_key, *args)
            results: list[Any] = await pipe.execute(raise_on_error=False)
        return results

    def _command(self, stream: str, fields: StreamFields, context_key: str | None, load: bool) -> list[Any]:
        if context_key is None:
            command: list[Any] = ["XADD", stream, "MAXLEN", "~", self.maxlen, "*"]
        elif load:
            command = ["EVAL", APPEND_TAKING_CONTEXT, 2, stream, context_key, self.maxlen, CONTEXT_BATCH]
        else:
            command = ["EVALSHA", self._append_sha, 2, stream, context_key, self.maxlen, CONTEXT_BATCH]
        for field, value in fields.items():
            command += (field, value)
        return command

    def _link(self, client: aioredis.Redis) -> LeanLink:
        found = self._links.get(id(client))
        if found is None:
            found = self._links[id(client)] = (client, LeanLink(client))
        return found[1]

    async def aclose(self) -> None:
        """Give the connections the appends held back to their pools."""
        links, self._links = self._links, {}
        for _, link in links.values():
            await link.aclose()


__all__ = ["AppendBatcher"]
