"""Logs of every hookbus process: one line per event of note, as text or JSON.

``--log-format json`` (or ``HOOKBUS_LOG_FORMAT=json``) writes one JSON object per line
(``time``, ``level``, ``logger``, ``pid``, ``message`` and the event's fields); ``text``, the
default, writes ``time LEVEL logger[pid]: message`` followed by the same fields as
``key=value`` (control characters escaped, a value with a space, ``=`` or ``"`` quoted). While
tracing is on (:mod:`bus.runtime.tracing`), a JSON line written inside a span also carries its
``trace_id`` and ``span_id``. Call
sites pass what they know about the event with ``extra=``, under the names of :data:`FIELDS`
(:func:`event_fields` builds them). Per-event decisions are logged at debug level only; no line
carries a hook input, a handler's output or a secret.
"""

from __future__ import annotations

import datetime
import logging
import sys
from typing import Any, Final

import orjson

from bus.runtime import tracing

LOG_FORMATS: Final = ("text", "json")

#: The names call sites use in ``extra=`` (any other extra is written too).
FIELDS: Final = (
    "event_id",
    "event",
    "session_id",
    "tenant",
    "handler",
    "handler_type",
    "decision",
    "reason",
    "stream",
    "entry_id",
    "revision",
)

#: Attributes every LogRecord has (and uvicorn's coloured copy of the message); anything else
#: on a record came from ``extra=``.
_STANDARD: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}
_TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
#: A field a client chose (a session id may be as long as the request body) is cut here.
MAX_FIELD_CHARS: Final = 200

#: What a client could hide in a string to forge a line or drive the reader's terminal: C0
#: (CR, LF, tab, ESC ...), DEL, C1, the bidi controls and the Unicode line separators. Each is
#: written as its escape (``\x1b``, ``\u202e``).
_CONTROLS: Final[dict[int, str]] = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))},
    **{code: f"\\u{code:04x}" for code in (0x61C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))},
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def escape_controls(text: str) -> str:
    """``text`` with every control character written visibly as its escape: one line, inert on a terminal."""
    return text.translate(_CONTROLS)


def _text_value(value: Any) -> str:
    """A ``key=value`` value: escaped, and quoted (``\\`` and ``\"`` inside) when empty or holding a
    space, ``=`` or ``"``, so a value cannot pass for more fields."""
    text = str(value)
    if text and not any(c in text for c in ' ="'):
        return escape_controls(text)
    return '"' + escape_controls(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


def event_fields(
    event_id: str, event: str, tenant: str, session_id: Any = None, handler: str | None = None, **more: Any
) -> dict[str, Any]:
    """The ``extra=`` of a line about one event (None values left out).

    Strings a client sent (the event name, the session id) are cut at :data:`MAX_FIELD_CHARS`.
    """
    fields = {
        "event_id": event_id,
        "event": event,
        "tenant": tenant,
        "session_id": session_id,
        "handler": handler,
        **more,
    }
    return {
        key: value[:MAX_FIELD_CHARS] if isinstance(value, str) else value
        for key, value in fields.items()
        if value is not None
    }


def extras(record: logging.LogRecord) -> dict[str, Any]:
    """What ``extra=`` added to ``record``."""
    return {key: value for key, value in vars(record).items() if key not in _STANDARD and not key.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
            **extras(record),
        }
        if tracing.on and (ids := tracing.log_ids()) is not None:  # the span the line was written in
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:  # exc_text when set: bus.redaction.redact has masked it already
            line["exc_info"] = record.exc_text or self.formatException(record.exc_info)
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    """The classic line, then the event's fields as ``key=value``."""

    def __init__(self) -> None:
        super().__init__(_TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = escape_controls(super().formatMessage(record))
        fields = extras(record)
        if fields:
            line += " " + " ".join(f"{escape_controls(key)}={_text_value(value)}" for key, value in fields.items())
        return line


def setup_logging(level: str, log_format: str) -> None:
    """Send every logger's records to stderr at ``level``, formatted as ``log_format``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler])


__all__ = [
    "FIELDS",
    "LOG_FORMATS",
    "MAX_FIELD_CHARS",
    "JsonFormatter",
    "TextFormatter",
    "escape_controls",
    "event_fields",
    "extras",
    "setup_logging",
]
