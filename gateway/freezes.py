"""``GET``, ``POST`` and ``DELETE /v1/freeze``: set, lift and list tenant freezes (:mod:`bus.freeze`).

Only an org admin (``HOOKBUS_ADMIN_TOKENS``) or the tenant's own admin
(``HOOKBUS_TENANT_ADMIN_TOKENS``) may set or lift a tenant's freeze (403 otherwise, naming the
tokens that may); an agent's token never can, so an agent cannot lift the freeze that stops it.
``GET`` lists the freezes the caller may see: every tenant's for an org admin, its own
tenant's for any other token. The gateway that takes the call applies it at once; every other
gateway and dispatcher within a second (:mod:`bus.freeze.cache`).
"""

from __future__ import annotations

import logging

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response
from starlette.routing import Route

from bus.errors import BusUnavailable, ConfigError, RequestRejected
from bus.freeze.freezes import check_tenant, parse_until_ms
from bus.freeze.store import active_freezes, freeze, unfreeze
from bus.runtime.settings import Settings
from gateway.access import Caller, check_single_authorization, rejection, request_caller
from gateway.state import Gateway

logger = logging.getLogger("hookbus.gateway")
#: The largest ``POST /v1/freeze`` body read.
MAX_BODY_BYTES = 16 * 1024


class FreezeBody(BaseModel):
    """The body of ``POST /v1/freeze``."""

    model_config = ConfigDict(extra="forbid")

    tenant: str
    #: Hook-group matchers of the tools to freeze; the state-changing tools when left out.
    tools: list[str] | None = Field(default=None, max_length=64)
    #: A duration from now (``30m``, ``2h``) or an ISO 8601 time; never lifts itself when left out.
    until: str | None = None
    reason: str = Field(default="", max_length=2000)
    #: Who sets it (a name; the role that allowed it is added).
    by: str = Field(default="", max_length=200)


def _json(body: object, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json", headers={"Cache-Control": "no-store"})


def _check_manages(caller: Caller, tenant: str, what: str) -> None:
    """403 unless ``caller`` may set or lift ``tenant``'s freeze."""
    if caller.manages(tenant):
        return
    raise RequestRejected(
        403,
        "forbidden",
        f"{what} tenant {tenant} needs an org-admin token (HOOKBUS_ADMIN_TOKENS) or tenant {tenant}'s admin "
        f"token (HOOKBUS_TENANT_ADMIN_TOKENS); this is {caller.role}",
    )


def _unavailable(exc: BusUnavailable) -> RequestRejected:
    return RequestRejected(503, "unavailable", f"cannot reach the freezes: {exc}", {"Retry-After": "1"})


async def _read_body(request: HTTPRequest) -> FreezeBody:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise RequestRejected(413, "payload_too_large", f"the body is over {MAX_BODY_BYTES} bytes")
    try:
        return FreezeBody.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise RequestRejected(400, "invalid_freeze", f"{where}: {first['msg']}") from None


def freeze_routes(settings: Settings, gateway: Gateway) -> list[Route]:
    """The freeze routes of ``gateway``."""

    async def caller_of(request: HTTPRequest) -> Caller:
        check_single_authorization(request.scope["headers"])
        return await request_caller(settings, request)

    async def listing(request: HTTPRequest) -> Response:
        try:
            caller = await caller_of(request)
            try:
                found = await active_freezes(gateway.redis, gateway.keys, gateway.redis_url)
            except BusUnavailable as exc:
                raise _unavailable(exc) from exc
        except RequestRejected as exc:
            return rejection(exc)
        visible = [f.public() for f in found if caller.tenant is None or f.tenant == caller.tenant]
        return _json({"freezes": visible})

    async def set_freeze(request: HTTPRequest) -> Response:
        try:
            caller = await caller_of(request)
            body = await _read_body(request)
            try:
                tenant = check_tenant(body.tenant)
                _check_manages(caller, tenant, "freezing")
                until_ms = parse_until_ms(body.until)
                # The role in brackets is the gateway's word: a name cannot claim one.
                name = " ".join(body.by.translate({ord("("): " ", ord(")"): " "}).split())
                by = f"{name} ({caller.role})" if name else caller.role
                found = await freeze(
                    gateway.redis, gateway.keys, tenant, body.tools, until_ms, body.reason, by, gateway.redis_url
                )
            except ConfigError as exc:
                raise RequestRejected(400, "invalid_freeze", str(exc)) from exc
            except BusUnavailable as exc:
                raise _unavailable(exc) from exc
        except RequestRejected as exc:
            return rejection(exc)
        gateway.freezes.put(found)
        logger.warning("tenant %s frozen by %s: %s", found.tenant, found.by, found.deny_reason)
        return _json({"freeze": found.public()})

    async def lift(request: HTTPRequest) -> Response:
        try:
            caller = await caller_of(request)
            tenant = request.query_params.get("tenant", "")
            try:
                check_tenant(tenant)
            except ConfigError as exc:
                raise RequestRejected(400, "invalid_freeze", f"give ?tenant=T: {exc}") from exc
            _check_manages(caller, tenant, "unfreezing")
            try:
                lifted = await unfreeze(gateway.redis, gateway.keys, tenant, gateway.redis_url)
            except BusUnavailable as exc:
                raise _unavailable(exc) from exc
        except RequestRejected as exc:
            return rejection(exc)
        gateway.freezes.drop(tenant)
        if lifted is not None:
            logger.warning("tenant %s unfrozen by %s", tenant, caller.role)
        return _json({"tenant": tenant, "lifted": lifted.public() if lifted is not None else None})

    return [
        Route("/v1/freeze", listing, methods=["GET"]),
        Route("/v1/freeze", set_freeze, methods=["POST"]),
        Route("/v1/freeze", lift, methods=["DELETE"]),
    ]


__all__ = ["FreezeBody", "freeze_routes"]
