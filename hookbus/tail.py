"""``hookbus tail``: follow the live decision log, from any directory, filtered if asked.

The log has one stream per partition of the bus (the count is read from Redis,
:func:`bus.stream.partitions.bus_keyspace`): ``--from-start`` prints what they hold merged by entry
id, then every partition is followed with a read of its own (:mod:`bus.decisionlog.reader`).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from typing import Any

from bus.decisionlog.audit import RecordFilter
from bus.decisionlog.reader import LogEntry, LogFollower, newest_ids, read_merged
from bus.errors import ProtocolError
from bus.hooks.decisions import Decision, RecordOutcome
from bus.redis.connection import connect, redis_errors
from bus.redis.keys import Keyspace
from bus.runtime.logs import escape_controls
from bus.stream.partitions import bus_keyspace
from bus.stream.protocol import LogRecord


def format_record(record: LogRecord) -> str:
    """One human line per decision: time, agent, tenant, session, event, tool, decision, outcome
    (and why it failed open), latency, reason, then the session's facts, the shadow decisions and
    the added context.

    Agents choose most of it: control characters (newlines, ESC, bidi ...) come out escaped, so
    a value can neither start a forged line nor drive the terminal."""
    stamp = time.strftime("%H:%M:%S", time.localtime(record.received_ms / 1000))
    latency = record.decided_ms - record.received_ms
    what = record.event + (f"({record.tool_name})" if record.tool_name else "")
    who = f"{record.tenant}/{record.session_id[:12]}"
    if record.fail_open:
        how = (
            f"fail-open: {record.fail_open}"
            if record.outcome == RecordOutcome.FAIL_OPEN
            else (f"{record.outcome}, fail-open: {record.fail_open}")
        )
    else:
        how = record.outcome
    parts = [f"{stamp} {record.agent} {who} {what} -> {record.decision} [{how}, {latency} ms]"]
    if reason := _reason(record.output):
        parts[0] += f" {reason}"
    if record.facts:
        parts.append(f"facts: {', '.join(record.facts)}")
    for shadow in record.shadow:
        decision = shadow.get("decision") if isinstance(shadow, dict) else None
        parts.append(f"shadow: would {decision}" if decision not in (None, Decision.NONE) else "shadow: no opinion")
    specific = record.output.get("hookSpecificOutput")
    context = specific.get("additionalContext") if isinstance(specific, dict) else None
    if isinstance(context, str) and context.strip():
        parts.append(f"context: {_first_line(context)}")
    return escape_controls(" | ".join(parts))


def _first_line(text: str, limit: int = 160) -> str:
    lines = text.strip().splitlines()
    line = lines[0][:limit]
    return line + " ..." if len(lines) > 1 or len(lines[0]) > limit else line


def _reason(output: dict[str, Any]) -> str:
    specific = output.get("hookSpecificOutput") or {}
    for value in (
        specific.get("permissionDecisionReason"),
        output.get("reason"),
        output.get("stopReason"),
        output.get("systemMessage"),
    ):
        if isinstance(value, str) and value.strip():
            return _first_line(value)
    return ""


class _Printer:
    """Prints the records ``filters`` pass, up to ``count``."""

    def __init__(self, as_json: bool, count: int | None, filters: RecordFilter) -> None:
        self.as_json = as_json
        self.count = count
        self.filters = filters
        self.seen = 0

    @property
    def done(self) -> bool:
        return self.count is not None and self.seen >= self.count

    def print(self, entry: LogEntry) -> None:
        try:
            record = LogRecord.decode(entry.fields)
        except ProtocolError as exc:
            print(escape_controls(f"# skipped {entry.log_id}: {exc}"), file=sys.stderr)
            return
        if self.filters.matches(record):
            print(json.dumps(record.to_json()) if self.as_json else format_record(record), flush=True)
            self.seen += 1


async def tail(
    redis_url: str,
    keys: Keyspace,
    *,
    as_json: bool = False,
    from_start: bool = False,
    count: int | None = None,
    filters: RecordFilter | None = None,
) -> None:
    """Print decision-log records (those ``filters`` pass) as they arrive (Ctrl-C stops)."""
    printer = _Printer(as_json, count, filters or RecordFilter())
    # The live reads block for 1 s; a Redis that stops answering (frozen, or its network gone) is
    # an error after the socket timeout, not a silent wait.
    client = connect(redis_url)
    follower: LogFollower | None = None
    try:
        with redis_errors(redis_url):
            keys = await bus_keyspace(client, keys)
            # Resolve "$" once: re-sending "$" on every read would skip what arrived in between.
            positions = (
                ["0-0"] * keys.partitions
                if from_start
                else [newest or "0-0" for newest in await newest_ids(client, keys.decision_logs)]
            )
        if from_start:
            async with contextlib.aclosing(read_merged(client, keys.decision_logs, page=100)) as retained:
                while True:
                    with redis_errors(redis_url):  # only around Redis: a reader that left is no outage
                        entry = await anext(retained, None)
                    if entry is None:
                        break
                    positions[entry.partition] = entry.log_id
                    printer.print(entry)
                    if printer.done:
                        return
        follower = LogFollower(client, keys, positions, count=100, block_ms=1000)
        while not printer.done:
            with redis_errors(redis_url):
                entries = await follower.read()
            for entry in entries:
                printer.print(entry)
                if printer.done:
                    return
    finally:
        if follower is not None:
            await follower.aclose()
        await client.aclose()


__all__ = ["format_record", "tail"]
