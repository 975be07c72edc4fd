"""Log lines (:mod:`bus.runtime.logs`): JSON objects or text, with the event's fields from ``extra=``."""

from __future__ import annotations

import json
import logging
import os
import sys

import pytest

from bus.errors import ConfigError
from bus.runtime.logs import MAX_FIELD_CHARS, JsonFormatter, TextFormatter, event_fields
from bus.runtime.settings import Settings


def record(message: str, *args: object, level: int = logging.INFO, **extra: object) -> logging.LogRecord:
    return logging.getLogger("hookbus.test").makeRecord(
        "hookbus.test", level, __file__, 1, message, args, None, extra=extra
    )


def test_json_lines_carry_the_message_and_the_event_fields() -> None:
    fields = event_fields("evt-1", "PreToolUse", "acme", "s-1", "abc123", decision="deny")
    line = JsonFormatter().format(record("answered %s", "deny", **fields))
    assert "\n" not in line
    data = json.loads(line)
    assert data["message"] == "answered deny"
    assert (data["level"], data["logger"]) == ("info", "hookbus.test")
    assert isinstance(data["pid"], int) and data["time"].endswith("+00:00")
    assert {k: data[k] for k in ("event_id", "event", "tenant", "session_id", "handler", "decision")} == {
        "event_id": "evt-1",
        "event": "PreToolUse",
        "tenant": "acme",
        "session_id": "s-1",
        "handler": "abc123",
        "decision": "deny",
    }


def test_json_lines_hold_a_traceback_on_one_line() -> None:
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        made = logging.getLogger("hookbus.test").makeRecord(
            "hookbus.test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    line = JsonFormatter().format(made)
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exc_info"]


def test_text_lines_end_with_the_event_fields() -> None:
    line = TextFormatter().format(record("handler %s", "timeout", **event_fields("evt-2", "Stop", "default")))
    assert line.endswith(f"hookbus.test[{os.getpid()}]: handler timeout event_id=evt-2 event=Stop tenant=default")
    assert TextFormatter().format(record("plain")).endswith(": plain")


def test_event_fields_leave_out_what_is_unknown_and_cut_what_a_client_chose() -> None:
    assert event_fields("e", "Stop", "t") == {"event_id": "e", "event": "Stop", "tenant": "t"}
    long = event_fields("e", "x" * 5000, "t", "s" * 5000)
    assert len(long["event"]) == len(long["session_id"]) == MAX_FIELD_CHARS


def test_the_log_format_is_text_or_json() -> None:
    assert Settings.from_env({}).log_format == "text"
    assert Settings.from_env({"HOOKBUS_LOG_FORMAT": "JSON"}).log_format == "json"
    assert Settings.from_env({"HOOKBUS_LOG_FORMAT": "json"}, log_format="text").log_format == "text"  # the flag wins
    with pytest.raises(ConfigError, match="HOOKBUS_LOG_FORMAT"):
        Settings.from_env({"HOOKBUS_LOG_FORMAT": "xml"})
