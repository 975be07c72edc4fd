"""The OTLP sink of ``hookbus audit follow``: decision-log records as OpenTelemetry log records,
sent over OTLP/HTTP (protobuf) to a collector or any OTLP logs endpoint.

Each record becomes one log record:

* event name ``hookbus.decision``, timestamp the decision time, observed timestamp the send;
* severity ``WARN`` for a deny, a block or a fail-open, ``INFO`` otherwise; the body a line
  saying what was decided (``PreToolUse Bash -> deny: ...``);
* the OpenTelemetry GenAI attributes where they fit: ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id`` (the tool use id), ``gen_ai.conversation.id`` and ``session.id``
  (the session), ``gen_ai.agent.id`` (the agent id, for a subagent);
* every other field of the record under ``hookbus.*`` (``hookbus.decision``,
  ``hookbus.reason``, ``hookbus.tenant``, ``hookbus.event_id``, ...), nested values as JSON
  text; empty and absent ones are left out;
* the trace id of the event, where it has one.

The request is built with the ``opentelemetry-proto`` messages and posted by
:class:`~hookbus.audit.delivery.BatchPoster` itself, not through the OpenTelemetry SDK's
batch processor (which drops records when its queue is full): a batch is acknowledged in
Redis only after the receiver accepted it. A partial success (``rejected_log_records``) sends
the batch to the dead-letter file with the receiver's message, since it does not say which
records it rejected and they must not be sent again.

Headers for the receiver come from ``OTEL_EXPORTER_OTLP_LOGS_HEADERS`` (else
``OTEL_EXPORTER_OTLP_HEADERS``), ``key=value`` pairs separated by commas, as the OpenTelemetry
SDKs read them; they are never logged.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import os
import time
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx
import orjson
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.logs.v1.logs_pb2 import ScopeLogs, SeverityNumber

from bus.errors import ConfigError
from bus.runtime.auditmetrics import SinkCounters
from hookbus.audit.delivery import BatchPoster, DeadLetters, Item, guarded_client

EVENT_NAME: Final = "hookbus.decision"
SCOPE_NAME: Final = "hookbus.audit"
LOGS_PATH: Final = "/v1/logs"
#: Record fields sent under their OpenTelemetry names (each also names the session or the tool).
GEN_AI: Final = {
    "tool_name": ("gen_ai.tool.name",),
    "tool_use_id": ("gen_ai.tool.call.id",),
    "session_id": ("gen_ai.conversation.id", "session.id"),
    "agent_id": ("gen_ai.agent.id",),
}
#: Record fields carried elsewhere in the log record, not as ``hookbus.*``.
_ELSEWHERE: Final = frozenset({"trace_id", "time"})
#: ``hookbus.*`` names of record fields whose own name would mislead.
_RENAMED: Final = {"id": "hookbus.event_id"}
_WARN: Final = frozenset({"deny", "block"})


def logs_url(url: str) -> str:
    """The OTLP/HTTP logs endpoint of ``url``: ``/v1/logs`` when it names no path."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--sink otlp: needs an http(s) URL with a host, like http://127.0.0.1:4318 (got {url!r})")
    if parts.path in ("", "/"):
        parts = parts._replace(path=LOGS_PATH)
    return urlunsplit(parts)


def env_headers(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Headers from ``OTEL_EXPORTER_OTLP_LOGS_HEADERS`` (else ``OTEL_EXPORTER_OTLP_HEADERS``)."""
    environ = os.environ if environ is None else environ
    text = environ.get("OTEL_EXPORTER_OTLP_LOGS_HEADERS") or environ.get("OTEL_EXPORTER_OTLP_HEADERS") or ""
    headers: dict[str, str] = {}
    for pair in text.split(","):
        name, sep, value = pair.partition("=")
        if not pair.strip():
            continue
        if not sep or not name.strip():
            raise ConfigError("OTEL_EXPORTER_OTLP_HEADERS: write the headers as name=value pairs separated by commas")
        headers[unquote(name.strip()).lower()] = unquote(value.strip())
    return headers


@functools.cache
def attribute_names(key: str) -> tuple[str, ...]:
    """The attribute names a record field is sent under (none for those carried elsewhere)."""
    if key in _ELSEWHERE:
        return ()
    return GEN_AI.get(key) or (_RENAMED.get(key) or f"hookbus.{key}",)


def _body(data: Mapping[str, Any]) -> str:
    tool = f" {data['tool_name']}" if data.get("tool_name") else ""
    line = f"{data.get('event')}{tool} -> {data.get('decision')}"
    if data.get("fail_open"):
        line += f" (fail-open: {data['fail_open']})"
    return f"{line}: {data['reason']}" if data.get("reason") else line


def add_log_record(scope: ScopeLogs, data: Mapping[str, Any], observed_ns: int) -> None:
    """Append one decision-log record (its JSON, with ``log_id``) to ``scope`` as an OpenTelemetry
    log record (built in place: the messages' constructors copy, and cost three times as much)."""
    warn = data.get("decision") in _WARN or bool(data.get("fail_open"))
    decided_ms = data.get("decided_ms")
    record = scope.log_records.add()
    record.time_unix_nano = int(decided_ms) * 1_000_000 if isinstance(decided_ms, int) else observed_ns
    record.observed_time_unix_nano = observed_ns
    record.severity_number = SeverityNumber.SEVERITY_NUMBER_WARN if warn else SeverityNumber.SEVERITY_NUMBER_INFO
    record.severity_text = "WARN" if warn else "INFO"
    record.body.string_value = _body(data)
    record.event_name = EVENT_NAME
    trace_id = data.get("trace_id")
    if isinstance(trace_id, str) and len(trace_id) == 32:
        try:
            record.trace_id = bytes.fromhex(trace_id)
        except ValueError:
            pass
    attributes = record.attributes
    for key, value in data.items():
        # Inline and by exact type: this loop is most of the sink's CPU (twenty fields a record).
        kind = type(value)
        if value is None or ((kind is dict or kind is list) and not value):
            continue
        for name in attribute_names(key):
            attribute = attributes.add()
            attribute.key = name
            if kind is str:
                attribute.value.string_value = value
            elif kind is int:
                attribute.value.int_value = value
            elif kind is bool:
                attribute.value.bool_value = value
            elif kind is float:
                attribute.value.double_value = value
            else:
                attribute.value.string_value = orjson.dumps(value).decode()


def export_request(items: list[Item], resource: Mapping[str, str]) -> ExportLogsServiceRequest:
    """An ``ExportLogsServiceRequest`` of ``items``: one resource, one scope, one log record each."""
    request = ExportLogsServiceRequest()
    logs = request.resource_logs.add()
    for key, value in resource.items():
        attribute = logs.resource.attributes.add()
        attribute.key = key
        attribute.value.string_value = value
    scope = logs.scope_logs.add()
    scope.scope.name = SCOPE_NAME
    observed_ns = time.time_ns()
    for _, data in items:
        add_log_record(scope, data, observed_ns)
    return request


def partial_success(response: httpx.Response) -> tuple[int, str | None]:
    """The records an OTLP receiver's 2xx says it rejected, and its message."""
    if not response.content:
        return 0, None
    answer = ExportLogsServiceResponse()
    try:
        if "json" in response.headers.get("content-type", ""):
            found = orjson.loads(response.content).get("partialSuccess") or {}
            return int(found.get("rejectedLogRecords") or 0), found.get("errorMessage") or None
        answer.ParseFromString(response.content)
    except Exception:  # an answer that is not OTLP: the status said it was taken
        return 0, None
    partial = answer.partial_success
    return partial.rejected_log_records, partial.error_message or None


class OtlpSink:
    """Sends records to an OTLP/HTTP logs endpoint, a batch per request (see the module docstring)."""

    kind = "otlp"

    def __init__(
        self,
        url: str,
        *,
        dead_letters: DeadLetters,
        batch: int = 500,
        gzip_body: bool = False,
        allow_networks: tuple[str, ...] = (),
        timeout_s: float = 10.0,
        max_delay_s: float = 30.0,
        max_batch_bytes: int | None = None,
        counters: SinkCounters | None = None,
        environ: Mapping[str, str] | None = None,
        resource: Mapping[str, str] | None = None,
    ) -> None:
        self.url = logs_url(url)
        self.batch = batch
        self.gzip = gzip_body
        self.headers = {"content-type": "application/x-protobuf", **env_headers(environ)}
        if gzip_body:
            self.headers["content-encoding"] = "gzip"
        self.resource = dict(resource or {"service.name": "hookbus"})
        self.client = guarded_client(allow_networks)
        self.poster = BatchPoster(
            self.client,
            self.url,
            kind="otlp",
            where=urlsplit(self.url).netloc.rpartition("@")[2],
            dead_letters=dead_letters,
            counters=counters,
            timeout_s=timeout_s,
            max_delay_s=max_delay_s,
            partial=partial_success,
            max_batch_bytes=max_batch_bytes,
        )

    def encode(self, items: list[Item]) -> tuple[bytes, dict[str, str]]:
        body = export_request(items, self.resource).SerializeToString()
        return (gzip.compress(body, compresslevel=5) if self.gzip else body), self.headers

    async def deliver(self, items: list[Item], stop: asyncio.Event) -> None:
        await self.poster.send(items, self.encode, stop)

    async def aclose(self) -> None:
        await self.client.aclose()
        self.poster.dead_letters.close()


__all__ = [
    "EVENT_NAME",
    "GEN_AI",
    "OtlpSink",
    "add_log_record",
    "attribute_names",
    "env_headers",
    "export_request",
    "logs_url",
]
