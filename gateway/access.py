"""Who may read what on the gateway's read endpoints (the console, its stream, policy replay).

A caller is one of:

* an **org admin**: a token of ``HOOKBUS_ADMIN_TOKENS``; sees every tenant and may run
  policy replays;
* a **tenant**: a token of ``HOOKBUS_TOKENS``, or a managed one (``hookbus tokens create``,
  with ``HOOKBUS_MANAGED_TOKENS``); sees its own tenant's records only;
* a **tenant admin**: a token of ``HOOKBUS_TENANT_ADMIN_TOKENS``; reads its tenant like a tenant
  token and may also set or lift that tenant's freeze (it sends no events);
* **anyone**, when no token of any kind is configured (a loopback gateway for one person):
  sees everything, like an admin.

Tokens are compared in constant time (:class:`bus.runtime.settings.Tokens`) and never kept: a caller
is identified for per-token limits by a digest of its token.

A refusal, here or anywhere in the gateway, is answered with one JSON body, ``{"error": code,
"detail": why}`` (:func:`error_body`, :func:`error_response`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from starlette.responses import Response

from bus.errors import BusUnavailable, RequestRejected
from bus.redis.tokens import TokenStore
from bus.runtime.settings import Settings


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated reader."""

    #: The one tenant this caller may see, or None for every tenant.
    tenant: str | None
    #: May run policy replays (an org-admin token, or no tokens configured).
    admin: bool
    #: Identifies the token for per-token limits: a digest, never the token itself.
    key: str
    #: The id of a managed token (per-token rate limits), else None.
    token_id: str | None = None
    #: A tenant-admin token (``HOOKBUS_TENANT_ADMIN_TOKENS``) of :attr:`tenant`.
    tenant_admin: bool = False
    #: May answer its tenant's approvals (``HOOKBUS_APPROVER_TOKENS``; an admin answers any).
    approver: bool = False

    @property
    def scope(self) -> str:
        return "all tenants" if self.tenant is None else f"tenant {self.tenant}"

    @property
    def role(self) -> str:
        """What this caller is, in words (who set a freeze)."""
        if self.key == "anonymous":
            return "a caller of a gateway without tokens"
        if self.admin:
            return "org admin"
        return f"tenant {self.tenant}'s {'admin' if self.tenant_admin else 'token'}"

    def manages(self, tenant: str) -> bool:
        """May set or lift ``tenant``'s freeze: an org admin, or that tenant's admin."""
        return self.admin or (self.tenant_admin and self.tenant == tenant)


def error_body(code: str, detail: str) -> bytes:
    """The JSON body of every error the gateway answers."""
    return orjson.dumps({"error": code, "detail": detail})


def error_response(status: int, code: str, detail: str, headers: Mapping[str, str] | None = None) -> Response:
    """An error answer: ``status``, ``headers`` and :func:`error_body`."""
    return Response(error_body(code, detail), status, headers, media_type="application/json")


def rejection(exc: RequestRejected) -> Response:
    """The answer to a refused request."""
    return error_response(exc.status, exc.code, exc.detail, exc.headers)


def json_object(body: bytes, what: str = "a JSON object") -> dict[str, Any]:
    """``body`` parsed as a JSON object (400 ``invalid_json`` / ``invalid_input`` naming ``what`` otherwise)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestRejected(400, "invalid_json", f"body is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise RequestRejected(400, "invalid_input", f"body must be {what}")
    return value


def _unauthorized(detail: str) -> RequestRejected:
    return RequestRejected(401, "unauthorized", detail, {"WWW-Authenticate": "Bearer"})


def check_single_authorization(raw_headers: Sequence[tuple[bytes, bytes]]) -> None:
    """Refuse two ``Authorization`` headers (401): a proxy may check one and hookbus the other."""
    if sum(1 for name, _ in raw_headers if name == b"authorization") > 1:
        raise _unauthorized("more than one Authorization header")


def bearer_token(headers: Mapping[bytes, bytes]) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header, or None."""
    scheme, _, raw = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    token = raw.strip()
    return token if scheme.lower() == "bearer" and token else None


def token_digest(token: str) -> str:
    """What identifies a token in per-token limits and keys: a digest, never the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


async def caller_for(
    settings: Settings, headers: Mapping[bytes, bytes], token_store: TokenStore | None = None
) -> Caller:
    """The caller that ``headers`` (raw ASGI, lower-case names) authenticate; 401 when none.

    ``token_store`` (the gateway's, set when managed tokens are on) checks tokens kept in Redis
    after the static ones; 503 when Redis cannot answer.
    """
    tokens = (settings.tokens, settings.admin_tokens, settings.tenant_admin_tokens, settings.approver_tokens)
    if not any(tokens) and token_store is None:
        return Caller(tenant=None, admin=True, key="anonymous")
    token = bearer_token(headers)
    if token is None:
        raise _unauthorized("missing bearer token")
    key = token_digest(token)
    # Both lists are always compared in full: which one matched must not show in the timing.
    is_admin = settings.admin_tokens.tenant_for(token) is not None
    tenant = settings.tokens.tenant_for(token)
    managed = settings.tenant_admin_tokens.tenant_for(token)
    approves = settings.approver_tokens.tenant_for(token)
    if is_admin:
        return Caller(tenant=None, admin=True, key=key)
    if managed is not None:
        return Caller(tenant=managed, admin=False, key=key, tenant_admin=True)
    if approves is not None:
        return Caller(tenant=approves, admin=False, key=key, approver=True)
    if tenant is not None:
        return Caller(tenant=tenant, admin=False, key=key)
    if token_store is not None:
        try:
            info = await token_store.verify(token)
        except BusUnavailable as exc:
            raise RequestRejected(
                503, "unavailable", "cannot check the token: Redis is unavailable", {"Retry-After": "1"}
            ) from exc
        if info is not None:
            return Caller(tenant=info.tenant, admin=False, key=key, token_id=info.id)
    raise _unauthorized("missing, wrong, revoked or expired bearer token")


async def request_caller(settings: Settings, request: Any) -> Caller:
    """:func:`caller_for` of a Starlette request, with its gateway's managed tokens."""
    gateway = getattr(request.app.state, "gateway", None)
    return await caller_for(settings, dict(request.scope["headers"]), getattr(gateway, "token_store", None))


class Slots:
    """At most ``per_key`` held at once per caller key, and ``total`` in all when given: what a
    read endpoint admits concurrently. :meth:`take` is refused (429 ``code``) past either."""

    def __init__(
        self,
        per_key: int,
        *,
        code: str,
        per_key_detail: str,
        total: int | None = None,
        total_detail: str = "",
        retry_after_s: int = 1,
    ) -> None:
        self.per_key, self.total = per_key, total
        self._code, self._per_key_detail, self._total_detail = code, per_key_detail, total_detail
        self._retry_after = {"Retry-After": str(retry_after_s)}
        self._held: dict[str, int] = {}

    def held(self, key: str | None = None) -> int:
        return sum(self._held.values()) if key is None else self._held.get(key, 0)

    def take(self, key: str) -> None:
        """Hold one slot for ``key``; 429 when it, or every caller together, holds all."""
        if self._held.get(key, 0) >= self.per_key:
            detail = self._per_key_detail
        elif self.total is not None and self.held() >= self.total:
            detail = self._total_detail
        else:
            self._held[key] = self._held.get(key, 0) + 1
            return
        raise RequestRejected(429, self._code, detail, dict(self._retry_after))

    def give_back(self, key: str) -> None:
        left = self._held.get(key, 0) - 1
        if left > 0:
            self._held[key] = left
        else:
            self._held.pop(key, None)


__all__ = [
    "Caller",
    "Slots",
    "caller_for",
    "check_single_authorization",
    "error_body",
    "error_response",
    "json_object",
    "rejection",
    "token_digest",
]
