"""``GET /v1/events/stream``: the decision log as Server-Sent Events, as it is written (docs/api.md).

Every record is one ``decision`` event whose ``id`` is its entry id in the log and whose
``data`` is the record's JSON, exactly as the log holds it (inputs are redacted when the
dispatcher writes them; ``masked`` names what was masked). A stream sees its token's tenant
only; an org-admin token (``HOOKBUS_ADMIN_TOKENS``), or a gateway with no tokens at all, sees
every tenant. Filters (``tenant``, ``session`` by prefix, ``event``, ``decision``, ``tool``,
``agent``) repeat or take commas.

Resuming: a ``Last-Event-ID`` header (or ``?last_event_id=``) replays every record after that
entry from the log before going live, so a reconnecting client loses nothing the log still
holds; when the log was trimmed past that point a ``gap`` event says so. ``?backlog=N``
starts with (up to) the newest N entries instead.

Slow clients never hold anyone up: the gateway reads the log once for all streams
(:mod:`gateway.decisionlog.tail`); a client that falls behind by more than a queue leaves the live
feed and catches up from the log at its own pace; one whose socket takes nothing for
``SEND_TIMEOUT_S`` is dropped (it may reconnect with ``Last-Event-ID``). Keep-alive comments
go out every ``KEEPALIVE_S``; one token holds at most ``HOOKBUS_MAX_STREAMS_PER_TOKEN``
streams at once (429 past that). The framing is sse-starlette's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.datastructures import QueryParams
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from bus.decisionlog.audit import RecordFilter
from bus.errors import BusUnavailable, RequestRejected
from bus.policy.loading import Policy
from bus.redis.entries import is_entry_id
from bus.redis.keys import Keyspace
from bus.runtime.settings import Settings
from gateway.access import Caller, Slots, check_single_authorization, rejection, request_caller
from gateway.decisionlog.query import check_parameters, query_filter
from gateway.decisionlog.tail import Cursor, LogItem, LogTail, Subscriber

logger = logging.getLogger("hookbus.gateway")

#: Seconds between keep-alive comments on an idle stream (read per stream, so tests may lower it).
KEEPALIVE_S = 15.0
#: A client whose socket takes nothing for this long is dropped.
SEND_TIMEOUT_S = 30.0
#: What a client waits before reconnecting, in milliseconds (the SSE ``retry`` field).
RETRY_MS = 2000
MAX_BACKLOG = 2000
FILTERS = ("tenant", "session", "event", "decision", "tool", "agent")
_PARAMS = frozenset({*FILTERS, "backlog", "last_event_id"})


def stream_filter(query: QueryParams, caller: Caller) -> RecordFilter:
    """From the query string; 400 for an unknown parameter, 403 for a tenant outside the caller's scope."""
    check_parameters(query, _PARAMS)
    return query_filter(query, caller.tenant, FILTERS)


def resume_point(request: HTTPRequest) -> str | None:
    """The entry id to resume after (``Last-Event-ID`` or ``?last_event_id=``), or None."""
    given = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    if given is None or not given.strip():
        return None
    if not is_entry_id(given.strip()):
        raise RequestRejected(400, "invalid_last_event_id", "Last-Event-ID must be a decision-log entry id (ms-seq)")
    return given.strip()


def backlog_size(query: QueryParams) -> int:
    raw = query.get("backlog", "0")
    if not raw.isdigit() or int(raw) > MAX_BACKLOG:
        raise RequestRejected(400, "invalid_parameter", f"'backlog' must be a whole number from 0 to {MAX_BACKLOG}")
    return int(raw)


def _event(item: LogItem) -> ServerSentEvent:
    return ServerSentEvent(item.data, event="decision", id=item.entry_id)


def _notice(kind: str, **data: Any) -> ServerSentEvent:
    return ServerSentEvent(orjson.dumps(data).decode(), event=kind)


class _Stream(EventSourceResponse):
    """An event stream that gives its slot and its place in the tail back however it ends."""

    def __init__(
        self, content: AsyncIterator[ServerSentEvent], on_close: Callable[[], Awaitable[None]], what: str
    ) -> None:
        super().__init__(
            content,
            ping=KEEPALIVE_S,
            send_timeout=SEND_TIMEOUT_S,
            ping_message_factory=lambda: ServerSentEvent(comment="keep-alive"),
        )
        self._on_close = on_close
        self._what = what

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            # The connection is closed behind us (uvicorn notes the unfinished response).
            logger.warning("dropped an event stream (%s): its client read nothing for %gs", self._what, SEND_TIMEOUT_S)
        finally:
            await self._on_close()


class EventStream:
    """The stream endpoint of one gateway process: its tail, its slots."""

    def __init__(self, settings: Settings, redis_url: str, keys: Keyspace | None = None) -> None:
        self.settings = settings
        self.tail = LogTail(redis_url, keys or settings.keys)
        per_token = settings.max_streams_per_token
        self.slots = Slots(
            per_token,
            code="too_many_streams",
            per_key_detail=f"this token already holds {per_token} open event streams "
            "(HOOKBUS_MAX_STREAMS_PER_TOKEN); close one first",
            retry_after_s=5,
        )
        #: Streams open right now.
        self.open = 0

    async def endpoint(self, request: HTTPRequest) -> Response:
        try:
            check_single_authorization(request.scope["headers"])
            caller = await request_caller(self.settings, request)
            passes = stream_filter(request.query_params, caller)
            start = resume_point(request)
            backlog = backlog_size(request.query_params)
            if request.method == "HEAD":
                return Response(media_type="text/event-stream")
            self.slots.take(caller.key)
        except RequestRejected as exc:
            return rejection(exc)
        # What the stream reads from the log itself skips other tenants' records before decoding them.
        subscriber = Subscriber(passes.matches, passes.entry_filter())
        try:
            position = await self.tail.join(subscriber)
        except BusUnavailable as exc:
            self.slots.give_back(caller.key)
            return rejection(RequestRejected(503, "redis_unavailable", str(exc), {"Retry-After": "2"}))
        self.open += 1

        async def close() -> None:
            self.open -= 1
            self.slots.give_back(caller.key)
            await self.tail.leave(subscriber)

        return _Stream(self._events(caller, subscriber, position, start, backlog), close, caller.scope)

    async def _events(
        self, caller: Caller, subscriber: Subscriber, position: Cursor, start: str | None, backlog: int
    ) -> AsyncIterator[ServerSentEvent]:
        hello = {"scope": caller.tenant, "admin": caller.admin, "resumed_after": start}
        yield ServerSentEvent(orjson.dumps(hello).decode(), event="hello", retry=RETRY_MS)
        cursor = position
        try:
            if start is not None:
                cursor = Cursor.after(start, len(position.marks))
                if gap := await self._gap(cursor):
                    yield gap
                async for item in self.tail.history(cursor, subscriber.accept, subscriber.may_pass):
                    cursor.sent(item)
                    yield _event(item)
            elif backlog:
                items, newest = await self.tail.latest(backlog, subscriber.accept, subscriber.may_pass)
                for item in items:
                    yield _event(item)
                cursor.skip_to(newest)
            # What follows is written now (the console counts rates from here).
            yield _notice("live", after=cursor.last_id)
            while True:
                if subscriber.lagging and subscriber.queue.empty():
                    # It has sent all it was given: back to the live feed, and what it missed from the log.
                    subscriber.lagging = False
                    if gap := await self._gap(cursor):
                        yield gap
                    async for item in self.tail.history(cursor, subscriber.accept, subscriber.may_pass):
                        cursor.sent(item)
                        yield _event(item)
                    continue
                item = await subscriber.queue.get()
                if cursor.has(item):
                    continue  # already sent from the log
                cursor.sent(item)
                yield _event(item)
        except BusUnavailable as exc:
            yield _notice("error", error="redis_unavailable", detail=str(exc), last_event_id=cursor.last_id)

    async def _gap(self, cursor: Cursor) -> ServerSentEvent | None:
        """A ``gap`` notice when the log no longer holds what follows ``cursor``."""
        resumes_at = await self.tail.trimmed(cursor)
        if resumes_at is None:
            return None
        return _notice(
            "gap",
            after=cursor.last_id,
            resumes_at=resumes_at,
            detail="the decision log was trimmed past this point: records in between may be missing",
        )


def console_routes(settings: Settings, redis_url: str, current_policy: Callable[[], Policy]) -> list[Any]:
    """The console's routes: the event stream, the page, policy replay and coverage (mounted by :mod:`gateway.app`)."""
    from starlette.routing import Route

    from gateway.console import console_page, coverage_route, replay_route

    # The bus's partitions as the gateway fixed them at start (gateway.hooks): the stream reads every partition's log.
    partitions = current_policy().settings.streams.partitions
    stream = EventStream(settings, redis_url, settings.keys.with_partitions(partitions))
    return [
        Route("/v1/events/stream", stream.endpoint, methods=["GET"]),
        *console_page(),
        replay_route(settings, redis_url, current_policy),
        coverage_route(settings, redis_url, current_policy),
    ]


__all__ = ["KEEPALIVE_S", "SEND_TIMEOUT_S", "EventStream", "console_routes"]
