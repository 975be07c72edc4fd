"""The gateway application: ``POST /v1/hooks``, ``/healthz``, ``/readyz``, ``/metrics``.

``POST /v1/hooks`` is served as plain ASGI ahead of the Starlette router (it is the hot
path); everything else is ordinary Starlette.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from bus import metrics
from bus.policy import Policy
from bus.settings import Settings
from gateway.hooks import Gateway, HookError

_JSON = (b"content-type", b"application/json")


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, headers=headers, media_type="application/json")


class HookbusApp:
    """The ASGI app: the hooks endpoint directly, the rest through Starlette."""

    def __init__(self, gateway: Gateway, router: Starlette) -> None:
        self.gateway = gateway
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
            body, extra = await self.gateway.handle(headers, scope["query_string"], receive)
            status = 200
        except HookError as exc:
            metrics.REJECTED.labels(str(exc.status)).inc()
            body, extra, status = orjson.dumps({"error": exc.code, "detail": exc.detail}), exc.headers, exc.status
        raw_headers = [_JSON, (b"content-length", str(len(body)).encode())]
        raw_headers += [(k.lower().encode(), v.encode()) for k, v in extra.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": body})


def create_app(settings: Settings, policy: Policy, redis_url: str) -> HookbusApp:
    """The ASGI app of one gateway process."""
    gateway = Gateway(settings, policy, redis_url)

    async def healthz(request: HTTPRequest) -> Response:
        return json_response({"status": "ok"})

    async def readyz(request: HTTPRequest) -> Response:
        ready, checks = await gateway.readiness()
        return json_response({"ready": ready, "checks": checks}, 200 if ready else 503)

    async def metrics_endpoint(request: HTTPRequest) -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    async def not_allowed(request: HTTPRequest) -> Response:
        return json_response({"error": "method_not_allowed", "detail": "use POST /v1/hooks"}, 405,
                             {"Allow": "POST"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await gateway.start()
        # What exists now lives as long as the process: keep it out of the collector's scans
        # (full collections over it cost tens of milliseconds on the request path).
        gc.freeze()
        try:
            yield
        finally:
            await gateway.stop()

    from starlette.routing import Route

    router = Starlette(
        routes=[
            Route("/v1/hooks", not_allowed, methods=["GET", "PUT", "DELETE", "PATCH"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    router.state.gateway = gateway
    return HookbusApp(gateway, router)


__all__ = ["HookbusApp", "create_app"]
