"""A dispatcher's slots for the events it has in hand, and each tenant's share of them.

A slot is held from the moment an event is taken in hand until its task ends: while its handlers
run, and while it waits for its session's turn. A tenant whose policy has slow handlers (an http
hook to a server that does not answer, an LLM), sending many events at once, would otherwise
hold every slot until those handlers give up, and another tenant's events, read behind them,
would wait past their deadlines and fail open: one tenant's traffic would turn another's deny
into an allow. So one tenant holds at most its share of the slots; its events over the share
are *parked* in hand, in the order read, and each takes the slot of that tenant's next event to
end. Reading goes on past them, so the other tenants' events get the slots left.

Parked events are bounded (:attr:`DispatchSlots.parked_max`): past that, taking the next event in
hand waits, as it waits for a free slot, so memory stays bounded however many events a tenant
sends. An event already past its deadline is not held to the share: its task only settles it,
at once.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Generic, TypeVar

Item = TypeVar("Item")

#: Parked events per slot at most (all tenants together).
PARKED_PER_SLOT = 4


class DispatchSlots(Generic[Item]):
    """``total`` slots, at most ``per_tenant`` of them (0: no cap) held by one tenant's events."""

    def __init__(self, total: int, per_tenant: int) -> None:
        self.per_tenant = per_tenant
        self.parked_max = total * PARKED_PER_SLOT
        self._free = asyncio.Semaphore(total)
        #: Each tenant's events holding a slot, or taken in hand and waiting for one.
        self._held: collections.Counter[str] = collections.Counter()
        self._parked: dict[str, collections.deque[Item]] = {}
        self._parked_count = 0
        self._room = asyncio.Event()
        self._room.set()

    @classmethod
    def for_settings(cls, dispatch_concurrency: int, tenant_dispatch_slots: int | None) -> DispatchSlots[Item]:
        """The slots of ``HOOKBUS_DISPATCH_CONCURRENCY``, a tenant's share ``HOOKBUS_TENANT_DISPATCH_SLOTS``
        (None: half of them, at least one)."""
        per_tenant = max(1, dispatch_concurrency // 2) if tenant_dispatch_slots is None else tenant_dispatch_slots
        return cls(dispatch_concurrency, per_tenant)

    @property
    def parked(self) -> int:
        """Events in hand waiting for their tenant's share."""
        return self._parked_count

    def held(self, tenant: str) -> int:
        """``tenant``'s events holding a slot (or about to)."""
        return self._held[tenant]

    async def take(self, tenant: str, item: Item, *, over_share: bool = False) -> bool:
        """A slot for ``item``, an event of ``tenant``: True once it holds one (start it now);
        False when it is parked, to be handed a slot by :meth:`give_back` later. ``over_share``:
        not held to the tenant's share (an event that only needs settling)."""
        if not over_share and self.per_tenant and self._held[tenant] >= self.per_tenant:
            self._parked.setdefault(tenant, collections.deque()).append(item)
            self._parked_count += 1
            if self._parked_count >= self.parked_max:
                self._room.clear()
                await self._room.wait()
            return False
        self._held[tenant] += 1  # before the wait: two readers taking at once stay within the share
        await self._free.acquire()
        return True

    def give_back(self, tenant: str) -> Item | None:
        """An event of ``tenant`` ended: the parked event of ``tenant`` that takes its slot (start
        it now), or None when none waits (the slot is free again)."""
        waiting = self._parked.get(tenant)
        if waiting:
            item = waiting.popleft()
            if not waiting:
                del self._parked[tenant]
            self._parked_count -= 1
            if self._parked_count < self.parked_max:
                self._room.set()
            return item
        self._held[tenant] -= 1
        if self._held[tenant] <= 0:
            del self._held[tenant]
        self._free.release()
        return None

    def unpark(self) -> list[tuple[str, Item]]:
        """Every parked event, with its tenant, taken out (a stopping dispatcher starts them all:
        each is settled before it stops). Each then holds a slot of its tenant's, over the share."""
        items = [(tenant, item) for tenant, waiting in self._parked.items() for item in waiting]
        for tenant, _ in items:
            self._held[tenant] += 1
        self._parked.clear()
        self._parked_count = 0
        self._room.set()
        return items


__all__ = ["PARKED_PER_SLOT", "DispatchSlots"]
