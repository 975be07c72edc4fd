"""``hookbus tail``: follow the live decision log, from any directory, filtered if asked."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Iterable
from typing import Any

from bus.connection import connect, redis_errors
from bus.keys import Keyspace
from bus.protocol import LogRecord, ProtocolError


@dataclasses.dataclass(frozen=True)
class Filters:
    """Which records to show: each non-empty set must match (sessions by prefix)."""

    sessions: frozenset[str] = frozenset()
    tenants: frozenset[str] = frozenset()
    events: frozenset[str] = frozenset()
    decisions: frozenset[str] = frozenset()

    @classmethod
    def of(cls, **given: Iterable[str] | None) -> Filters:
        """From repeated / comma-separated flag values (``None`` for a flag not given)."""
        return cls(**{name: frozenset(v.strip() for chunk in values or () for v in chunk.split(",") if v.strip())
                      for name, values in given.items()})

    def match(self, record: LogRecord) -> bool:
        return ((not self.sessions or any(record.session_id.startswith(s) for s in self.sessions))
                and (not self.tenants or record.tenant in self.tenants)
                and (not self.events or record.event in self.events)
                and (not self.decisions or record.decision in self.decisions))


def format_record(record: LogRecord) -> str:
    """One human line per decision: time, tenant, session, event, tool, decision, outcome (and
    why it failed open), latency, reason, then the shadow decisions and the added context."""
    stamp = time.strftime("%H:%M:%S", time.localtime(record.received_ms / 1000))
    latency = record.decided_ms - record.received_ms
    what = record.event + (f"({record.tool_name})" if record.tool_name else "")
    who = f"{record.tenant}/{record.session_id[:12]}"
    if record.fail_open:
        how = f"fail-open: {record.fail_open}" if record.outcome == "fail-open" else (
            f"{record.outcome}, fail-open: {record.fail_open}")
    else:
        how = record.outcome
    parts = [f"{stamp} {who} {what} -> {record.decision} [{how}, {latency} ms]"]
    if reason := _reason(record.output):
        parts[0] += f" {reason}"
    for shadow in record.shadow:
        decision = shadow.get("decision") if isinstance(shadow, dict) else None
        parts.append(f"shadow: would {decision}" if decision not in (None, "none") else "shadow: no opinion")
    specific = record.output.get("hookSpecificOutput")
    context = specific.get("additionalContext") if isinstance(specific, dict) else None
    if isinstance(context, str) and context.strip():
        parts.append(f"context: {_first_line(context)}")
    return " | ".join(parts)


def _first_line(text: str, limit: int = 160) -> str:
    lines = text.strip().splitlines()
    line = lines[0][:limit]
    return line + " ..." if len(lines) > 1 or len(lines[0]) > limit else line


def _reason(output: dict[str, Any]) -> str:
    specific = output.get("hookSpecificOutput") or {}
    for value in (specific.get("permissionDecisionReason"), output.get("reason"), output.get("stopReason"),
                  output.get("systemMessage")):
        if isinstance(value, str) and value.strip():
            return _first_line(value)
    return ""


async def tail(redis_url: str, keys: Keyspace, *, as_json: bool = False, from_start: bool = False,
               count: int | None = None, filters: Filters | None = None) -> None:
    """Print decision-log records (those ``filters`` pass) as they arrive (Ctrl-C stops)."""
    filters = filters or Filters()
    client = connect(redis_url, socket_timeout_s=None)
    last_id = "0-0"
    seen = 0
    try:
        if not from_start:
            # Resolve "$" once: re-sending "$" on every read would skip what arrived in between.
            with redis_errors(redis_url):
                newest = await client.xrevrange(keys.decision_log, count=1)
            if newest:
                last_id = newest[0][0].decode()
        while count is None or seen < count:
            with redis_errors(redis_url):
                response = await client.xread({keys.decision_log: last_id}, block=1000, count=100)
            for _, entries in response or ():
                for entry_id, fields in entries:
                    last_id = entry_id.decode()
                    try:
                        record = LogRecord.decode(fields)
                    except ProtocolError as exc:
                        print(f"# skipped {last_id}: {exc}", file=sys.stderr)
                        continue
                    if not filters.match(record):
                        continue
                    print(json.dumps(record.to_json()) if as_json else format_record(record), flush=True)
                    seen += 1
                    if count is not None and seen >= count:
                        return
    finally:
        await client.aclose()


__all__ = ["Filters", "format_record", "tail"]
