"""``GET /v1/audit/events``: a window of the decision log as JSON Lines (docs/api.md).

Query: ``since`` / ``until`` (``now``, ``15m``, ``2h``, ``7d`` ago, epoch seconds or
milliseconds, ISO 8601; both optional and inclusive), ``tenant``, ``session`` (a prefix),
``event``, ``decision`` (a decision or an outcome such as ``fail-open``), each repeatable or
comma-separated, ``after`` (a ``log_id``: resume after it) and ``limit``. One record per
line, oldest first, each with its ``log_id``; records are masked already (:mod:`bus.redaction.redact`).

Scope: a tenant token reads its own tenant only (asking for another is 403); an org-admin
token (``HOOKBUS_ADMIN_TOKENS``), or a gateway with no tokens at all, reads every tenant
(:mod:`gateway.access`). The body is streamed page by page as the client reads it; if Redis
fails midway the connection is cut without the closing chunk, so a client can never take a
truncated export for a whole one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Final

import orjson
import redis.asyncio as aioredis
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from bus.decisionlog.audit import RecordFilter, Window, read_window
from bus.errors import BusUnavailable, RequestRejected, TimeError
from bus.redis.connection import redis_errors
from bus.redis.entries import is_entry_id
from bus.redis.keys import Keyspace
from bus.runtime.settings import Settings
from gateway.access import check_single_authorization, rejection, request_caller
from gateway.decisionlog.query import check_parameters, query_filter

logger = logging.getLogger("hookbus.gateway")

MEDIA_TYPE: Final = "application/x-ndjson"
_FILTERS: Final = ("tenant", "session", "event", "decision")
_PARAMS: Final = frozenset({"since", "until", *_FILTERS, "after", "limit"})


def _query(request: HTTPRequest, scope: str | None) -> tuple[Window, RecordFilter, str | None, int | None]:
    """Window, filter, resume point and limit from the query string (400/403 with the reason)."""
    query = request.query_params
    check_parameters(query, _PARAMS)
    try:
        window = Window.parse(query.get("since"), query.get("until"))
    except TimeError as exc:
        raise RequestRejected(400, "invalid_time", str(exc)) from exc
    passes = query_filter(query, scope, _FILTERS)
    after = query.get("after")
    if after is not None and not is_entry_id(after):
        raise RequestRejected(400, "invalid_parameter", "'after' must be a log_id (<ms>-<seq>)")
    limit = query.get("limit")
    if limit is not None and (not limit.isdigit() or int(limit) == 0):
        raise RequestRejected(400, "invalid_parameter", "'limit' must be a positive whole number")
    return window, passes, after, int(limit) if limit is not None else None


def audit_routes(settings: Settings, redis: Callable[[], aioredis.Redis], keys: Keyspace | None = None) -> list[Route]:
    """The audit routes of a gateway reading the log (every partition of ``keys``) through ``redis()``."""
    keys = keys or settings.keys

    async def events(request: HTTPRequest) -> Response:
        try:
            check_single_authorization(request.scope["headers"])
            caller = await request_caller(settings, request)
            window, passes, after, limit = _query(request, caller.tenant)
        except RequestRejected as exc:
            return rejection(exc)
        records = read_window(redis(), keys, window, passes, after=after, limit=limit)
        try:  # the first page decides the status: Redis down is a 503, not an empty 200
            with redis_errors():
                first = await anext(records, None)
        except BusUnavailable as exc:
            return rejection(RequestRejected(503, "unavailable", f"cannot read the decision log: {exc}"))

        async def lines() -> AsyncIterator[bytes]:
            sent = 0
            item = first
            try:
                while item is not None:  # read_window stops at the limit
                    log_id, record = item
                    yield orjson.dumps({"log_id": log_id, **record.to_json()}) + b"\n"
                    sent += 1
                    with redis_errors():
                        item = await anext(records, None)
            except BusUnavailable:
                logger.warning("audit export to %s cut after %d records: Redis failed", caller.scope, sent)
                raise  # no closing chunk: the client sees an incomplete body, not a short export
            finally:
                await records.aclose()

        return StreamingResponse(lines(), media_type=MEDIA_TYPE, headers={"Cache-Control": "no-store"})

    return [Route("/v1/audit/events", events, methods=["GET"])]


__all__ = ["MEDIA_TYPE", "audit_routes"]
