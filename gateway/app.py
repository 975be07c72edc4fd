"""The gateway application: ``POST /v1/hooks``, ``/healthz``, ``/readyz``, ``/metrics``, ``/v1/whoami``.

``POST /v1/hooks`` is served as plain ASGI ahead of the Starlette router (it is the hot
path); everything else is ordinary Starlette. Every error, 404 and 405 included, is JSON
``{"error", "detail"}``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from bus.errors import RequestRejected
from bus.policy.loading import Policy
from bus.runtime import tracing
from bus.runtime.metrics import Metrics
from bus.runtime.metrics_server import authorized
from bus.runtime.settings import Settings
from gateway.access import bearer_token, check_single_authorization, error_body, error_response, rejection
from gateway.approvals.desk import HOOK_RECEIVE
from gateway.approvals.routes import ApprovalRoutes
from gateway.decisionlog.archive import archive_routes
from gateway.decisionlog.export import audit_routes
from gateway.freezes import freeze_routes
from gateway.hooks import HooksEndpoint
from gateway.observer import Observer
from gateway.state import Gateway

_JSON = (b"content-type", b"application/json")


@functools.lru_cache(maxsize=64)
def _header_name(name: str) -> bytes:
    """A response header's name as ASGI sends it (the gateway's few names, made once each)."""
    return name.lower().encode()


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, headers=headers, media_type="application/json")


class HookbusApp:
    """The ASGI app: the hooks endpoint directly, the rest through Starlette."""

    def __init__(self, gateway: Gateway, router: Starlette) -> None:
        self.gateway = gateway
        self.hooks = HooksEndpoint(gateway)
        self.router = router
        self.state = router.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/hooks" and scope["method"] == "POST":
            await self._hooks(scope, receive, send)
        else:
            await self.router(scope, receive, send)

    async def _hooks(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        try:
            if len(headers) != len(scope["headers"]):
                check_single_authorization(scope["headers"])
            client = scope.get("client")
            HOOK_RECEIVE.set(receive)  # a request held for a person ends when its agent goes away
            body, extra = await self.hooks.handle(headers, scope["query_string"], receive, client[0] if client else "")
            status = 200
        except RequestRejected as exc:
            self.gateway.metrics.rejected.labels(str(exc.status)).inc()
            body, extra, status = error_body(exc.code, exc.detail), exc.headers, exc.status
        raw_headers = [_JSON, (b"content-length", str(len(body)).encode())]
        raw_headers += [(_header_name(k), v.encode()) for k, v in extra.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": body})


def create_app(settings: Settings, policy: Policy, redis_url: str, metrics: Metrics | None = None) -> HookbusApp:
    """The ASGI app of one gateway process (counting into ``metrics``, the process's by default)."""
    gateway = Gateway(settings, policy, redis_url, metrics)

    async def healthz(request: HTTPRequest) -> Response:
        return json_response({"status": "ok"})

    async def readyz(request: HTTPRequest) -> Response:
        ready, checks = await gateway.readiness()
        policy = gateway.policy
        checks["policy"].update(empty=policy.empty, handlers=policy.handler_count)
        if policy.empty:
            checks["policy"]["warning"] = "no policy: every event gets no opinion (pass --config)"
        checks["policy_signatures"] = gateway.registry.signatures()  # informs; refusals keep the last good version
        # Announced so that 'hookbus tokens create' can warn when no gateway accepts its tokens.
        body = {"ready": ready, "checks": checks, "managed_tokens": settings.managed_tokens}
        return json_response(body, 200 if ready else 503)

    async def metrics_endpoint(request: HTTPRequest) -> Response:
        if not authorized(request.headers.get("authorization"), settings.metrics_token):
            return error_response(401, "unauthorized", "missing or wrong metrics token", {"WWW-Authenticate": "Bearer"})
        openmetrics = "application/openmetrics-text" in request.headers.get("accept", "")
        body, content_type = gateway.metrics.render(openmetrics)
        return Response(body, media_type=content_type)

    async def whoami(request: HTTPRequest) -> Response:
        headers = dict(request.scope["headers"])
        tokens = bool(settings.tokens) or settings.managed_tokens
        try:
            check_single_authorization(request.scope["headers"])
            token = bearer_token(headers)
            if token is not None and settings.admin_tokens.tenant_for(token) is not None:
                # An org-admin token sends no events (it has no tenant) and reads every tenant.
                return json_response({"tenant": None, "admin": True, "tokens": tokens})
            if token is not None and (managed := settings.tenant_admin_tokens.tenant_for(token)) is not None:
                # A tenant's admin token reads its tenant and sets its freeze; it sends no events.
                return json_response({"tenant": managed, "tenant_admin": True, "tokens": tokens})
            tenant, _ = await gateway.authorize(headers)
        except RequestRejected as exc:
            return rejection(exc)
        return json_response({"tenant": tenant, "tokens": tokens})

    async def http_error(request: HTTPRequest, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        where = f"{request.method} {request.url.path}"
        if exc.status_code == 404:
            code, detail = "not_found", f"no such endpoint: {where} (hook events go to POST /v1/hooks)"
        elif exc.status_code == 405:
            code, detail = "method_not_allowed", f"{request.url.path} does not take {request.method}"
        else:
            code, detail = str(exc.detail).lower().replace(" ", "_"), f"{where}: {exc.detail}"
        return error_response(exc.status_code, code, detail, exc.headers)

    async def server_error(request: HTTPRequest, exc: Exception) -> Response:
        return error_response(500, "internal_error", f"{type(exc).__name__} (see the gateway's log)")

    async def not_allowed(request: HTTPRequest) -> Response:
        return error_response(405, "method_not_allowed", "use POST /v1/hooks", {"Allow": "POST"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        gateway.metrics.init()
        await gateway.start()
        # The platform's Redis state (every partition), for /metrics; the async queue's where it lives.
        observer = Observer(redis_url, gateway.keys, queue_url=settings.queue_redis_url, metrics=gateway.metrics)
        observer.start()
        # What exists now lives as long as the process: keep it out of the collector's scans
        # (full collections over it cost tens of milliseconds on the request path).
        gc.freeze()
        try:
            yield
        finally:
            await observer.stop()
            await gateway.stop()
            tracing.flush()  # uvicorn ends the process by its signal next: no exit handler runs

    from starlette.routing import Route

    from gateway.decisionlog.sse import console_routes  # the console: /v1/events/stream, /ui, /v1/policy/replay

    router = Starlette(
        routes=[
            Route("/v1/hooks", not_allowed, methods=["GET", "PUT", "DELETE", "PATCH"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            Route("/v1/whoami", whoami, methods=["GET"]),
            *console_routes(settings, redis_url, lambda: gateway.policy),
            *audit_routes(settings, lambda: gateway.redis, gateway.keys),  # GET /v1/audit/events
            *archive_routes(settings, lambda: gateway.redis, gateway.keys),  # GET /v1/audit/query
            *freeze_routes(settings, gateway),  # GET, POST, DELETE /v1/freeze
            *ApprovalRoutes(settings, gateway).routes(),  # /v1/approvals
        ],
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error, 500: server_error},
    )
    router.state.gateway = gateway
    return HookbusApp(gateway, router)


__all__ = ["HookbusApp", "create_app"]
