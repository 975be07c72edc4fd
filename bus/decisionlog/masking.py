"""A decision-log record made fit to store: every field that can carry a secret masked.

The masking itself is :mod:`bus.redaction`'s; this module knows which fields of a
:class:`~bus.stream.protocol.LogRecord` hold agent or handler text.
"""

from __future__ import annotations

from typing import Any

from bus.redaction.redact import Masked, Redactor, masked_list
from bus.stream.protocol import LogRecord


def _text_field(value: Any, name: str) -> str:
    found = value.get(name) if isinstance(value, dict) else None
    return found if isinstance(found, str) else "" if found is None else str(found)


def redact_record(redactor: Redactor, record: LogRecord, hook_input: Any = None) -> LogRecord:
    """``record`` made fit to store, in place: input, output, handler reasons, shadow results and
    reason masked, ``masked`` listing where and by which detector (the inputs themselves are
    not changed: masked values are copies). ``hook_input`` is the parsed
    ``record.payload`` when the caller has it. Fields copied from the input (session, tool,
    agent) are taken from the masked input."""
    if not redactor.active:
        return record
    masked: Masked = []
    record.payload, hook_input = redactor.payload(record.payload, hook_input, ("input",), masked)
    changed = bool(masked)
    record.output = redactor.value(record.output, ("output",), masked)
    record.hooks = redactor.value(record.hooks, ("hooks",), masked)
    record.shadow = redactor.value(record.shadow, ("shadow",), masked)
    if record.reason:
        record.reason = redactor.value(record.reason, ("reason",), masked)
    if changed and isinstance(hook_input, dict):
        record.session_id = _text_field(hook_input, "session_id")
        record.tool_name = _text_field(hook_input, "tool_name")
        record.agent_id = _text_field(hook_input, "agent_id")
        record.agent_type = _text_field(hook_input, "agent_type")
        record.tool_use_id = _text_field(hook_input, "tool_use_id")
    record.masked = masked_list(masked)
    return record


__all__ = ["redact_record"]
