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

    def names(self) -> tuple[tuple[Scope, object], ...]:
        """Each scope's key in the budgets (None: the request has no name at that scope)."""
        session = (self.tenant, self.session_id) if self.session_id is not None else None
        return ((Scope.SESSION, session), (Scope.TOKEN, self.token_id), (Scope.TENANT, self.tenant))


class InflightBudgets:
    """Bytes in flight per session, token and tenant at this gateway (0 at a scope: no budget)."""

    def __init__(self, tenant_bytes: int, token_bytes: int = 0, session_bytes: int = 0) -> None:
        self.budgets = {Scope.SESSION: session_bytes, Scope.TOKEN: token_bytes, Scope.TENANT: tenant_bytes}
        self.held: dict[Scope, dict[object, int]] = {scope: {} for scope in Scope}

    @classmethod
    def from_settings(cls, settings: Settings) -> InflightBudgets:
        """The budgets of ``settings``: a session's is a quarter of its tenant's unless set."""
        session = settings.session_inflight_bytes
        if session is None:
            session = int(settings.tenant_inflight_bytes * SESSION_SHARE)
        return cls(settings.tenant_inflight_bytes, settings.token_inflight_bytes, session)

    def _budgeted(self, ticket: Ticket) -> list[tuple[Scope, object]]:
        return [(scope, name) for scope, name in ticket.names() if name is not None and self.budgets[scope]]

    def hold(self, ticket: Ticket) -> Limited | None:
        """Take ``ticket``'s bytes from each of its budgets, or from none: the narrowest budget it
        would overrun, else None (then :meth:`release` it once answered)."""
        names = self._budgeted(ticket)
        for scope, name in names:
            budget = self.budgets[scope]
            held = self.held[scope].get(name, 0)
            if held and held + ticket.size_bytes > budget:
                detail = (
                    f"the {scope} has {held} bytes of events in flight at this gateway; "
                    f"its budget is {budget} ({_SETTINGS[scope]})"
                )
                return Limited(LimitKind.INFLIGHT, scope, 1.0, detail)
        for scope, name in names:
            counts = self.held[scope]
            counts[name] = counts.get(name, 0) + ticket.size_bytes
        ticket.held = True
        return None

    def release(self, ticket: Ticket) -> None:
        """Give back what :meth:`hold` took for ``ticket`` (nothing if it took nothing)."""
        if not ticket.held:
            return
        ticket.held = False
        for scope, name in self._budgeted(ticket):
            counts = self.held[scope]
            if (left := counts[name] - ticket.size_bytes) > 0:
                counts[name] = left
            else:
                del counts[name]

    def held_bytes(self, scope: Scope, name: object) -> int:
        """What ``name`` holds at ``scope`` now (a session's name: ``(tenant, session_id)``)."""
        return self.held[scope].get(name, 0)


__all__ = ["SESSION_SHARE", "InflightBudgets", "Ticket"]
