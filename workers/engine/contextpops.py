"""Auto-pipelining of the dispatcher's pending-context pops (:class:`bus.redis.autopipeline.AutoPipeline`).

Every blocking event of a policy with ``async`` handlers takes what those hooks left for its
session. On a single Redis the gateway takes it as it appends the event
(:mod:`bus.stream.pending_context`); an entry that came without it (on a Redis Cluster, or from a
gateway whose policy had no async handler yet) is served here, with one ``LPOP key count``.
Every pop requested while such a round trip is in flight (or in the same loop iteration) joins
the next one: under load one pipeline carries many pops (one write, one read, one
connection), at low load a pop leaves at once. Each caller still gets its own items or its own
error: one refused pop (a key of the wrong type) does not fail the others of its pipeline. The
pipeline is not a transaction; each ``LPOP`` with a count is atomic on its own, so two pops of
one key never share an item. A pop whose caller gave up before it was sent is not sent: nobody
would deliver what it took.

On a Redis Cluster the pops are not coalesced: each session's key has a slot of its own, so a
pipeline would be split per slot-owning node anyway, and the concurrent pops of one slot are
too few to be worth a group each (the gateway's appends, many per stream, are). A pop there is
one command, as before, and a master that fails over holds up only its own slots' pops.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import redis.asyncio as aioredis

from bus.redis.autopipeline import AutoPipeline
from bus.redis.connection import is_cluster, redis_errors
from bus.redis.topology import Topology


class ContextPops:
    """Coalesces concurrent ``LPOP key count`` into pipelined round trips (single Redis)."""

    def __init__(self, redis: aioredis.Redis, redis_url: str = "", *, topology: Topology | None = None) -> None:
        """``redis_url`` only names the server in :class:`BusUnavailable` messages; ``topology``
        says whether pops coalesce (:attr:`Topology.coalesces_context_pops`; read from
        ``redis`` itself when not given)."""
        self.redis = redis
        self.redis_url = redis_url
        self._coalesce = topology.coalesces_context_pops if topology is not None else not is_cluster(redis)
        self.pipeline: AutoPipeline[tuple[str, int]] = AutoPipeline(
            self._send, redis_url, what="context pop", drop_cancelled=True
        )

    async def pop(self, key: str, count: int) -> list[bytes]:
        """Pop up to ``count`` items from the head of the list at ``key`` (``[]`` if none).

        Raises :class:`BusUnavailable` if Redis cannot be reached, and Redis's own error for
        this command otherwise (``WRONGTYPE`` for a key that is not a list).
        """
        if not self._coalesce:
            with redis_errors(self.redis_url):
                items: list[bytes] | None = await self.redis.lpop(key, count)  # type: ignore[misc]
        else:
            items = await self.pipeline.call("", (key, count))
        return items or []

    async def _send(self, group: Hashable, batch: list[tuple[str, int]]) -> list[Any]:
        """One pipeline; per pop, its items (``None`` for none) or the error Redis answered with."""
        with redis_errors(self.redis_url):
            async with self.redis.pipeline(transaction=False) as pipe:
                for key, count in batch:
                    pipe.lpop(key, count)
                results: list[Any] = await pipe.execute(raise_on_error=False)
        return results


__all__ = ["ContextPops"]
