"""Decision-log records for the archive's tests: as LogRecords, and as the stream fields Redis returns."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from bus.stream.protocol import LogRecord

#: 2023-11-14T22:13:20Z, a Tuesday.
AT_MS = 1_700_000_000_000
DAY_MS = 86_400_000


def log_record(
    i: int,
    *,
    tenant: str = "acme",
    decision: str = "allow",
    rule: str = "allow-reads",
    at_ms: int | None = None,
    event: str = "PreToolUse",
) -> LogRecord:
    """Record ``i``: received ``i`` seconds after :data:`AT_MS` unless ``at_ms`` says, decided by ``rule``."""
    received_ms = AT_MS + i * 1000 if at_ms is None else at_ms
    return LogRecord(
        event_id=f"ev-{tenant}-{i:05d}",
        event=event,
        tenant=tenant,
        session_id=f"s-{i % 3}",
        outcome="decided",
        decision=decision,
        output={"hookSpecificOutput": {"permissionDecision": decision}},
        payload=orjson.dumps({"tool_name": "Bash", "tool_input": {"command": f"echo {i}"}}),
        received_ms=received_ms,
        decided_ms=received_ms + 4,
        tool_name="Bash",
        revision="rev1",
        hooks=[{"id": rule, "type": "rule", "outcome": "ok", "duration_ms": 0, "decided": True}],
    )


def fields_of(record: LogRecord) -> dict[bytes, bytes]:
    """The stream fields of ``record`` as Redis returns them."""
    return {
        key.encode(): value if isinstance(value, bytes) else str(value).encode()
        for key, value in record.encode().items()
    }


def entry(i: int, **given: object) -> tuple[str, Mapping[bytes, bytes]]:
    """``(log_id, fields)`` of record ``i`` (:func:`log_record`), its log id ``<AT_MS + i s>-0``."""
    record = log_record(i, **given)  # type: ignore[arg-type]
    assert isinstance(record.received_ms, int)
    return f"{record.received_ms + 5}-{i}", fields_of(record)
