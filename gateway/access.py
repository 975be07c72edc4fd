"""Who may read what on the gateway's read endpoints (the console, its stream, policy replay).

A caller is one of:

* an **org admin**: a token of ``HOOKBUS_ADMIN_TOKENS``; sees every tenant and may run
  policy replays;
* a **tenant**: a token of ``HOOKBUS_TOKENS``; sees its own tenant's records only;
* **anyone**, when no token of either kind is configured (a loopback gateway for one
  person): sees everything, like an admin.

Tokens are compared in constant time (:class:`bus.settings.Tokens`) and never kept: a caller
is identified for per-token limits by a digest of its token.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence

from bus.errors import RequestRejected
from bus.settings import Settings


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated reader."""

    #: The one tenant this caller may see, or None for every tenant.
    tenant: str | None
    #: May run policy replays (an org-admin token, or no tokens configured).
    admin: bool
    #: Identifies the token for per-token limits: a digest, never the token itself.
    key: str

    @property
    def scope(self) -> str:
        return "all tenants" if self.tenant is None else f"tenant {self.tenant}"


def _unauthorized(detail: str) -> RequestRejected:
    return RequestRejected(401, "unauthorized", detail, {"WWW-Authenticate": "Bearer"})


def check_single_authorization(raw_headers: Sequence[tuple[bytes, bytes]]) -> None:
    """Refuse two ``Authorization`` headers (401): a proxy may check one and hookbus the other."""
    if sum(1 for name, _ in raw_headers if name == b"authorization") > 1:
        raise _unauthorized("more than one Authorization header")


def caller_for(settings: Settings, headers: Mapping[bytes, bytes]) -> Caller:
    """The caller that ``headers`` (raw ASGI, lower-case names) authenticate; 401 when none."""
    if not settings.tokens and not settings.admin_tokens:
        return Caller(tenant=None, admin=True, key="anonymous")
    scheme, _, raw = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    token = raw.strip()
    if scheme.lower() != "bearer" or not token:
        raise _unauthorized("missing bearer token")
    key = hashlib.sha256(token.encode()).hexdigest()[:16]
    # Both lists are always compared in full: which one matched must not show in the timing.
    is_admin = settings.admin_tokens.tenant_for(token) is not None
    tenant = settings.tokens.tenant_for(token)
    if is_admin:
        return Caller(tenant=None, admin=True, key=key)
    if tenant is not None:
        return Caller(tenant=tenant, admin=False, key=key)
    raise _unauthorized("missing or wrong bearer token")


class StreamSlots:
    """At most ``per_key`` concurrent streams per caller key; :meth:`take` is refused past that."""

    def __init__(self, per_key: int) -> None:
        self.per_key = per_key
        self._held: dict[str, int] = {}

    def held(self, key: str) -> int:
        return self._held.get(key, 0)

    def take(self, key: str) -> None:
        """Hold one slot for ``key``; 429 when it holds ``per_key`` already."""
        if self._held.get(key, 0) >= self.per_key:
            raise RequestRejected(
                429, "too_many_streams",
                f"this token already holds {self.per_key} open event streams (HOOKBUS_MAX_STREAMS_PER_TOKEN); "
                "close one first", {"Retry-After": "5"},
            )
        self._held[key] = self._held.get(key, 0) + 1

    def give_back(self, key: str) -> None:
        left = self._held.get(key, 0) - 1
        if left > 0:
            self._held[key] = left
        else:
            self._held.pop(key, None)


__all__ = ["Caller", "StreamSlots", "caller_for", "check_single_authorization"]
