"""``hookbus tail``: follow the live decision log."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bus.connection import connect, redis_errors
from bus.keys import Keyspace
from bus.protocol import LogRecord, ProtocolError


def format_record(record: LogRecord) -> str:
    """One human line per decision: time, tenant, session, event, tool, decision, reason."""
    stamp = time.strftime("%H:%M:%S", time.localtime(record.received_ms / 1000))
    latency = record.decided_ms - record.received_ms
    what = record.event + (f"({record.tool_name})" if record.tool_name else "")
    reason = _reason(record.output)
    who = f"{record.tenant}/{record.session_id[:12]}"
    line = f"{stamp} {who} {what} -> {record.decision} [{record.outcome}, {latency} ms]"
    return f"{line} {reason}" if reason else line


def _reason(output: dict[str, Any]) -> str:
    specific = output.get("hookSpecificOutput") or {}
    for value in (specific.get("permissionDecisionReason"), output.get("reason"), output.get("stopReason"),
                  output.get("systemMessage")):
        if isinstance(value, str) and value:
            return value.splitlines()[0][:160]
    return ""


async def tail(redis_url: str, keys: Keyspace, *, as_json: bool = False, from_start: bool = False,
               count: int | None = None) -> None:
    """Print decision-log records as they arrive (Ctrl-C stops)."""
    client = connect(redis_url, socket_timeout_s=None)
    last_id = "0-0" if from_start else "$"
    seen = 0
    try:
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
                    print(json.dumps(record.to_json()) if as_json else format_record(record), flush=True)
                    seen += 1
                    if count is not None and seen >= count:
                        return
    finally:
        await client.aclose()


__all__ = ["format_record", "tail"]
