"""In-flight budgets: bytes of request bodies being handled at one gateway, per session, per
token and per tenant.

They bound the memory (the gateway's, and Redis's while the events wait) that one sender
holds. Each scope has its own budget, so a session that floods fills its own long before its
tenant's. A request that finds nothing else held in a scope is let in whatever its size (the
body limit bounds it), so a budget smaller than one body never stops a quiet session.
"""

from __future__ import annotations

import dataclasses

from bus.runtime.settings import Settings
from gateway.limits import Limited, LimitKind, Scope

#: A session's share of its tenant's budget when ``HOOKBUS_SESSION_INFLIGHT_BYTES`` is not set.
SESSION_SHARE = 0.25

_SETTINGS = {
    Scope.SESSION: "HOOKBUS_SESSION_INFLIGHT_BYTES",
    Scope.TOKEN: "HOOKBUS_TOKEN_INFLIGHT_BYTES",
    Scope.TENANT: "HOOKBUS_TENANT_INFLIGHT_BYTES",
}


@dataclasses.dataclass(slots=True)
class Ticket:
    """One request's claim on its budgets: who sent it and its size; ``held`` once admitted."""

    tenant: str
    token_id: str | None
    size_bytes: int
    session_id: str | None = None
    held: bool = False
    #: The address of the client that sent it (its records' ``src_endpoint``).
    client_address: str = ""


class InflightBudgets:
    """Bytes in flight per session, token and tenant at this gateway (0 at a scope: no budget)."""

    def __init__(self, tenant_bytes: int, token_bytes: int = 0, session_bytes: int = 0) -> None:
        self.budgets = {Scope.SESSION: session_bytes, Scope.TOKEN: token_bytes, Scope.TENANT: tenant_bytes}
        self.held: dict[Scope, dict[object, int]] = {scope: {} for scope in Scope}
        # Each scope's budget and counts, looked up once here: an enum member hashes in Python,
        # and every request goes through here twice.
        self._session = (Scope.SESSION, session_bytes, self.held[Scope.SESSION])
        self._token = (Scope.TOKEN, token_bytes, self.held[Scope.TOKEN])
        self._tenant = (Scope.TENANT, tenant_bytes, self.held[Scope.TENANT])

    @classmethod
    def from_settings(cls, settings: Settings) -> InflightBudgets:
        """The budgets of ``settings``: a session's is a quarter of its tenant's unless set."""
        session = settings.session_inflight_bytes
        if session is None:
            session = int(settings.tenant_inflight_bytes * SESSION_SHARE)
        return cls(settings.tenant_inflight_bytes, settings.token_inflight_bytes, session)

    def _budgeted(self, ticket: Ticket) -> list[tuple[tuple[Scope, int, dict[object, int]], object]]:
        """``ticket``'s name at each scope it has one at and that has a budget, narrowest first (a
        session's name is ``(tenant, session_id)``)."""
        names: list[tuple[tuple[Scope, int, dict[object, int]], object]] = []
        if self._session[1] and ticket.session_id is not None:
            names.append((self._session, (ticket.tenant, ticket.session_id)))
        if self._token[1] and ticket.token_id is not None:
            names.append((self._token, ticket.token_id))
        if self._tenant[1]:
            names.append((self._tenant, ticket.tenant))
        return names

    def hold(self, ticket: Ticket) -> Limited | None:
        """Take ``ticket``'s bytes from each of its budgets, or from none: the narrowest budget it
        would overrun, else None (then :meth:`release` it once answered)."""
        names = self._budgeted(ticket)
        size = ticket.size_bytes
        for (scope, budget, counts), name in names:
            held = counts.get(name, 0)
            if held and held + size > budget:
                detail = (
                    f"the {scope} has {held} bytes of events in flight at this gateway; "
                    f"its budget is {budget} ({_SETTINGS[scope]})"
                )
                return Limited(LimitKind.INFLIGHT, scope, 1.0, detail)
        for (_, _, counts), name in names:
            counts[name] = counts.get(name, 0) + size
        ticket.held = True
        return None

    def release(self, ticket: Ticket) -> None:
        """Give back what :meth:`hold` took for ``ticket`` (nothing if it took nothing)."""
        if not ticket.held:
            return
        ticket.held = False
        for (_, _, counts), name in self._budgeted(ticket):
            if (left := counts[name] - ticket.size_bytes) > 0:
                counts[name] = left
            else:
                del counts[name]

    def held_bytes(self, scope: Scope, name: object) -> int:
        """What ``name`` holds at ``scope`` now (a session's name: ``(tenant, session_id)``)."""
        return self.held[scope].get(name, 0)


__all__ = ["SESSION_SHARE", "InflightBudgets", "Ticket"]
