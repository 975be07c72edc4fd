"""``GET /v1/audit/query``: SQL over the audit archive and the log's unarchived tail, a tenant's own only (docs/api.md).

Query: ``sql`` (required; a query of the view ``records``, :mod:`bus.decisionlog.archivesql`)
and ``group`` (the archiver's consumer group, default ``archive``). The answer is JSON Lines,
one object per row. The archive is the gateway's ``HOOKBUS_ARCHIVE_DIR`` (404 without one).

Scope: a tenant token's view holds its tenant's files and records only, so no SQL reaches
another tenant's (the other files are not even readable to it); an org-admin token, or a gateway
with no tokens, reads every tenant. The SQL runs read-only, with no file but the view's and no
network; SQL that fails or is refused is a 400 with DuckDB's reason in one line.

Cost: a query runs in a thread on one DuckDB thread, at most :data:`QUERIES_PER_TOKEN` per token
and :data:`QUERIES_PER_PROCESS` per gateway at once (429 past either), is interrupted after
:data:`TIMEOUT_S` (400 ``query_failed``) and answers at most :data:`MAX_ROWS` rows (400
``too_many_rows``: aggregate, or add a ``LIMIT``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import orjson
import redis.asyncio as aioredis
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response
from starlette.routing import Route

from bus.errors import ArchiveError, BusUnavailable, RequestRejected
from bus.redis.connection import redis_errors
from bus.redis.keys import Keyspace
from bus.runtime.settings import Settings
from gateway.access import Slots, check_single_authorization, rejection, request_caller
from gateway.decisionlog.query import check_parameters

if TYPE_CHECKING:
    from bus.decisionlog.parquet import Entry

MEDIA_TYPE: Final = "application/x-ndjson"
QUERIES_PER_TOKEN = 1
QUERIES_PER_PROCESS = 2
#: Seconds a query may run (read at each request, so tests may lower it).
TIMEOUT_S = 30.0
MAX_ROWS = 100_000
#: Log entries past the archive group a query reads from Redis at most (the rest wait for the archiver).
MAX_TAIL = 200_000
MAX_SQL_CHARS: Final = 20_000
_PARAMS: Final = frozenset({"sql", "group"})


def _answer(archive: str, scope: str | None, tail: list[Entry], sql: str, timeout_s: float) -> bytes:
    """The rows of ``sql`` as JSON Lines (in a worker thread)."""
    from bus.decisionlog.archivesql import ReadOnlyQuery, archive_files, view_rows

    with ReadOnlyQuery(archive_files(archive, scope), view_rows(tail, scope), threads=1) as db:
        timer = threading.Timer(timeout_s, db.db.interrupt)
        timer.start()
        try:
            names, rows = db.run(sql)
            lines: list[bytes] = []
            for row in rows:
                if len(lines) == MAX_ROWS:
                    raise RequestRejected(
                        400, "too_many_rows", f"the answer has more than {MAX_ROWS} rows: aggregate, or add a LIMIT"
                    )
                lines.append(orjson.dumps(dict(zip(names, row, strict=True)), default=str))
        finally:
            timer.cancel()
    return b"".join(line + b"\n" for line in lines)


def archive_routes(settings: Settings, redis: Callable[[], aioredis.Redis], keys: Keyspace) -> list[Route]:
    """``GET /v1/audit/query``: the log read through ``redis()``, the archive at ``settings.archive_dir``."""
    slots = Slots(
        QUERIES_PER_TOKEN,
        code="too_many_reads",
        per_key_detail=f"this token already runs {QUERIES_PER_TOKEN} archive query at once; wait for it to end",
        total=QUERIES_PER_PROCESS,
        total_detail=f"this gateway already runs {QUERIES_PER_PROCESS} archive queries at once; try again shortly",
    )

    async def query(request: HTTPRequest) -> Response:
        try:
            check_single_authorization(request.scope["headers"])
            caller = await request_caller(settings, request)
            check_parameters(request.query_params, _PARAMS)
            sql = request.query_params.get("sql", "")
            if not sql.strip() or len(sql) > MAX_SQL_CHARS:
                raise RequestRejected(
                    400, "invalid_parameter", f"'sql' must be a query of at most {MAX_SQL_CHARS} characters"
                )
            if not settings.archive_dir:
                raise RequestRejected(404, "not_found", "this gateway has no archive (HOOKBUS_ARCHIVE_DIR)")
            slots.take(caller.key)
        except RequestRejected as exc:
            return rejection(exc)
        try:
            from bus.decisionlog.archivesql import tail_entries

            group = request.query_params.get("group") or "archive"
            with redis_errors():
                tail = await tail_entries(redis(), keys, group, caller.tenant, limit=MAX_TAIL)
            body = await asyncio.to_thread(_answer, settings.archive_dir, caller.tenant, tail, sql, TIMEOUT_S)
        except ImportError:
            return rejection(
                RequestRejected(501, "not_installed", "archive queries need pip install 'hookbus[archive]'")
            )
        except BusUnavailable as exc:
            return rejection(RequestRejected(503, "unavailable", f"cannot read the decision log: {exc}"))
        except ArchiveError as exc:
            return rejection(RequestRejected(400, "query_failed", str(exc)))
        except RequestRejected as exc:
            return rejection(exc)
        finally:
            slots.give_back(caller.key)
        return Response(body, media_type=MEDIA_TYPE, headers={"Cache-Control": "no-store"})

    return [Route("/v1/audit/query", query, methods=["GET"])]


__all__ = [
    "MAX_ROWS",
    "MAX_TAIL",
    "MEDIA_TYPE",
    "QUERIES_PER_PROCESS",
    "QUERIES_PER_TOKEN",
    "TIMEOUT_S",
    "archive_routes",
]
