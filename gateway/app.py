"""The gateway application: ``POST /v1/hooks``, ``/healthz``, ``/readyz``, ``/metrics``.

Blocking events are appended to the blocking stream and the request waits for the
dispatchers' reply up to the event's deadline; past it, or when Redis cannot be reached,
the reply is ``200 {}`` with ``X-Hookbus-Outcome: fail-open`` (counted in
``hookbus_fail_open_total``). Non-blocking events are answered once appended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response
from starlette.routing import Route

from bus import metrics
from bus.connection import connect, redis_errors
from bus.errors import BusUnavailable
from bus.events import event_spec
from bus.keys import Keyspace
from bus.policy import Policy
from bus.protocol import Reply, Request, now_ms
from bus.settings import Settings
from gateway.dialects import from_dialect, to_dialect
from gateway.ratelimit import RateLimiter
from gateway.replies import ReplyWaiter
from gateway.spool import Spool

logger = logging.getLogger("hookbus.gateway")

_STREAM_MAXLEN = 1_000_000


class HookError(Exception):
    """A request refused with a 4xx status and a JSON error body."""

    def __init__(self, status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> None:
        self.status, self.code, self.detail, self.headers = status, code, detail, headers or {}


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, headers=headers, media_type="application/json")


class Gateway:
    """State of one gateway process: settings, policy, Redis, the reply reader."""

    def __init__(self, settings: Settings, policy: Policy, redis_url: str) -> None:
        self.settings = settings
        self.policy = policy
        self.redis_url = redis_url
        self.keys: Keyspace = settings.keys
        self.gateway_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.redis = connect(redis_url, connect_timeout_s=0.5, socket_timeout_s=5.0)
        self.waiter = ReplyWaiter(redis_url, self.keys.reply_channel(self.gateway_id))
        self.spool = Spool(self._append_many)
        self.limiter = RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst)

    async def start(self) -> None:
        await self.waiter.start()
        await self.spool.start()
        with contextlib.suppress(asyncio.TimeoutError):
            async with asyncio.timeout(2.0):
                await self.waiter.subscribed.wait()

    async def stop(self) -> None:
        await self.spool.stop()
        await self.waiter.stop()
        await self.redis.aclose()

    async def _append_many(self, entries: list[tuple[str, dict[str, bytes | str | int]]]) -> None:
        with redis_errors(self.redis_url):
            async with self.redis.pipeline(transaction=False) as pipe:
                for stream, fields in entries:
                    pipe.xadd(stream, fields, maxlen=_STREAM_MAXLEN, approximate=True)  # type: ignore[arg-type]
                await pipe.execute()

    async def append(self, stream: str, fields: dict[str, bytes | str | int]) -> None:
        with redis_errors(self.redis_url):
            await self.redis.xadd(stream, fields, maxlen=_STREAM_MAXLEN, approximate=True)  # type: ignore[arg-type]

    # -- request handling ----------------------------------------------------------------

    def authenticate(self, request: HTTPRequest) -> str:
        if not self.settings.tokens:
            return "default"
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        tenant = self.settings.tokens.tenant_for(token.strip()) if scheme.lower() == "bearer" else None
        if tenant is None:
            raise HookError(401, "unauthorized", "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        return tenant

    async def read_body(self, request: HTTPRequest) -> bytes:
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise HookError(413, "payload_too_large", f"body is {declared} bytes; the limit is {limit}")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HookError(413, "payload_too_large", f"body is over the limit of {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    @staticmethod
    def parse(body: bytes) -> dict[str, Any]:
        try:
            hook_input = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise HookError(400, "invalid_json", f"body is not valid JSON: {exc}") from exc
        if not isinstance(hook_input, dict):
            raise HookError(400, "invalid_input", "body must be a JSON object (a Claude Code hook input)")
        for name in ("hook_event_name", "session_id"):
            value = hook_input.get(name)
            if value is None:
                raise HookError(400, "missing_field", f"'{name}' is required")
            if not isinstance(value, str) or not value:
                raise HookError(400, "invalid_field", f"'{name}' must be a non-empty string")
        return hook_input

    async def handle(self, request: HTTPRequest) -> Response:
        started = time.perf_counter()
        tenant = self.authenticate(request)
        if not self.limiter.allow(tenant):
            retry_after = max(1, round(self.limiter.retry_after_s(tenant)))
            raise HookError(429, "rate_limited", f"tenant '{tenant}' is over its rate limit",
                            {"Retry-After": str(retry_after)})
        body = await self.read_body(request)
        dialect = request.query_params.get("dialect") or request.headers.get("x-hookbus-dialect", "")
        hook_input = self.parse(body)
        if dialect:
            hook_input, body = from_dialect(dialect, hook_input, body)
        event = hook_input["hook_event_name"]
        label = metrics.event_label(event)
        event_id = uuid.uuid4().hex
        request_ = Request(event_id=event_id, event=event, tenant=tenant, payload=body,
                           received_ms=now_ms(), dialect=dialect)
        headers = {"X-Hookbus-Event-Id": event_id}
        blocking = event_spec(event).blocking and bool(self.policy.entries(event))
        if blocking:
            output, decision, fail_open = await self._decide(request_, event)
        else:
            output, decision, fail_open = await self._record(request_)
        if fail_open is not None:
            headers["X-Hookbus-Outcome"] = "fail-open"
            metrics.FAIL_OPEN.labels(label, fail_open).inc()
        else:
            headers["X-Hookbus-Outcome"] = "decided" if blocking else "recorded"
        metrics.DECISIONS.labels(label, decision).inc()
        metrics.DECISION_LATENCY.labels(label).observe(time.perf_counter() - started)
        if dialect:
            output = to_dialect(dialect, event, output)
        return json_response(output, headers=headers)

    async def _record(self, request: Request) -> tuple[dict[str, Any], str, str | None]:
        fields = request.encode()
        try:
            await self.append(self.keys.events_stream, fields)
        except BusUnavailable:
            self.spool.put(self.keys.events_stream, fields)
            return {}, "none", "redis_unavailable"
        return {}, "none", None

    async def _decide(self, request: Request, event: str) -> tuple[dict[str, Any], str, str | None]:
        deadline_s = self.policy.settings.deadline_for(event)
        request.reply_to = self.waiter.channel
        request.deadline_ms = request.received_ms + int(deadline_s * 1000)
        future = self.waiter.expect(request.event_id)
        try:
            async with asyncio.timeout(deadline_s):
                await self.append(self.keys.blocking_stream, request.encode())
                reply: Reply = await future
        except TimeoutError:
            return {}, "none", "timeout"
        except BusUnavailable as exc:
            logger.debug("failing open: %s", exc)
            # Keep the audit record: the dispatchers log it as expired once Redis is back.
            self.spool.put(self.keys.blocking_stream, request.encode())
            return {}, "none", "redis_unavailable"
        finally:
            self.waiter.forget(request.event_id)
        return reply.output, reply.decision, reply.fail_open

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        checks: dict[str, Any] = {"policy": {"ok": True, "revision": self.policy.revision}}
        try:
            async with asyncio.timeout(0.5):
                with redis_errors(self.redis_url):
                    await self.redis.ping()
                    beats = await self.redis.hgetall(self.keys.dispatchers)  # type: ignore[misc]
            alive = sum(1 for ms in beats.values() if now_ms() - int(ms) < 10_000)
            checks["redis"] = {"ok": True}
            checks["dispatchers"] = {"ok": alive > 0, "alive": alive}
        except (BusUnavailable, TimeoutError) as exc:
            checks["redis"] = {"ok": False, "error": str(exc) or "timed out after 0.5s"}
        checks["replies"] = {"ok": self.waiter.subscribed.is_set(), "error": self.waiter.last_error}
        ready = checks["redis"]["ok"] and checks["replies"]["ok"]
        return ready, checks


def create_app(settings: Settings, policy: Policy, redis_url: str) -> Starlette:
    """The ASGI app of one gateway process."""
    gateway = Gateway(settings, policy, redis_url)

    async def hooks(request: HTTPRequest) -> Response:
        try:
            return await gateway.handle(request)
        except HookError as exc:
            metrics.REJECTED.labels(str(exc.status)).inc()
            return json_response({"error": exc.code, "detail": exc.detail}, exc.status, exc.headers)

    async def healthz(request: HTTPRequest) -> Response:
        return json_response({"status": "ok"})

    async def readyz(request: HTTPRequest) -> Response:
        ready, checks = await gateway.readiness()
        return json_response({"ready": ready, "checks": checks}, 200 if ready else 503)

    async def metrics_endpoint(request: HTTPRequest) -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    app = Starlette(
        routes=[
            Route("/v1/hooks", hooks, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    return app


__all__ = ["Gateway", "create_app"]
