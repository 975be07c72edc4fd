"""Four async hooks, ready to use as ``function`` handlers (see ``examples/async_policy.yaml``).

    hookbus up --config examples/async_policy.yaml

They run on the async worker, never on the agent's path: whatever they return as
``systemMessage`` / ``additionalContext`` reaches the session with its next turn.

- :func:`audit_log` appends every event to a JSON Lines file (``$ASYNC_AUDIT_LOG``, default
  ``async-audit.jsonl`` in the worker's directory), secrets masked the way the decision log
  masks them, a huge ``tool_response`` replaced by its size.
- :func:`large_output_warning` warns when a tool's ``tool_response`` is over 100,000 characters.
- :func:`session_summary` counts each session's tool calls by tool (PostToolUse) and sums
  them up at Stop and SessionEnd.
- :func:`execution_time` tracks how long tools take (``duration_ms`` of PostToolUse) and warns
  past 30 s.

:func:`session_summary` and :func:`execution_time` keep their counts in the worker process
(bounded: the least recently seen sessions go first), so run one worker, or keep the counts in
a shared store instead. Async jobs of one session may run out of order: a summary can miss a
tool call that finished at the same moment.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import time
from typing import Any, Final

from bus.hooks.models import HookInput
from bus.redaction.redact import DEFAULT as REDACTOR

logger = logging.getLogger("hookbus.examples")

#: A tool response longer than this many characters gets a warning.
LARGE_OUTPUT_CHARS: Final = 100_000
#: A tool call slower than this gets a warning.
SLOW_TOOL_S: Final = 30.0
#: Sessions whose counts are kept at most (the least recently seen go first).
MAX_SESSIONS: Final = 10_000
#: A ``tool_response`` longer than this is written to the audit log as its size only.
AUDIT_RESPONSE_CHARS: Final = 10_000

_lock = threading.Lock()  # synchronous functions run in a pool of threads


def _size(value: Any) -> int:
    """Characters of a tool response as the model sees it (JSON for anything but text)."""
    if value is None:
        return 0
    return len(value) if isinstance(value, str) else len(json.dumps(value, ensure_ascii=False, default=str))


# -- the audit log ------------------------------------------------------------------------------


def audit_line(hook_input: HookInput, at_s: float | None = None) -> str:
    """One JSON Lines record of an event: when, what, and the input (masked, a huge response as its size)."""
    wire = hook_input.to_wire()
    response = wire.get("tool_response")
    if response is not None and _size(response) > AUDIT_RESPONSE_CHARS:
        wire["tool_response"] = {"omitted_chars": _size(response)}
    stamp = time.time() if at_s is None else at_s
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp)) + f".{int(stamp * 1000) % 1000:03d}Z",
        "event": hook_input.hook_event_name,
        "session_id": hook_input.session_id,
        "tool_name": hook_input.tool_name,
        "input": REDACTOR.value(wire),
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def audit_log(hook_input: HookInput) -> None:
    """Append the event to the JSON Lines audit file (``$ASYNC_AUDIT_LOG``); no opinion."""
    path = os.environ.get("ASYNC_AUDIT_LOG", "async-audit.jsonl")
    line = audit_line(hook_input) + "\n"
    with _lock, open(path, "a", encoding="utf-8") as out:
        out.write(line)


# -- large output -----------------------------------------------------------------------------


def large_output_warning(hook_input: HookInput) -> dict[str, Any] | None:
    """PostToolUse: a warning for the next turn when ``tool_response`` is over 100,000 characters."""
    if hook_input.hook_event_name != "PostToolUse":
        return None
    size = _size(hook_input.tool_response)
    if size <= LARGE_OUTPUT_CHARS:
        return None
    tool = hook_input.tool_name or "a tool"
    return {
        "systemMessage": f"{tool} returned {size:,} characters (over {LARGE_OUTPUT_CHARS:,}).",
        "hookSpecificOutput": {
            "hookEventName": "PostToolUse",
            "additionalContext": f"The last {tool} output was {size:,} characters long; prefer narrower commands "
            "(head, grep, a path filter) so the context is not flooded.",
        },
    }


# -- per-session summary ------------------------------------------------------------------------


class SessionCounts:
    """Tool calls per session and tool, for at most ``max_sessions`` sessions (thread-safe)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self._sessions: collections.OrderedDict[str, collections.Counter[str]] = collections.OrderedDict()

    def count(self, session: str, tool: str) -> None:
        with _lock:
            counts = self._sessions.pop(session, None) or collections.Counter()
            counts[tool] += 1
            self._sessions[session] = counts
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)

    def take(self, session: str, *, forget: bool) -> collections.Counter[str]:
        with _lock:
            counts = self._sessions.pop(session, None) if forget else self._sessions.get(session)
            return collections.Counter(counts or {})


SESSIONS = SessionCounts()


def summary_text(counts: collections.Counter[str]) -> str:
    """``12 tool calls: Bash 7, Edit 4, Read 1`` (most used first)."""
    total = sum(counts.values())
    parts = ", ".join(f"{tool} {n}" for tool, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    return f"{total} tool call{'s' if total != 1 else ''}" + (f": {parts}" if parts else "")


def session_summary(hook_input: HookInput) -> dict[str, Any] | None:
    """Count PostToolUse calls by tool; at Stop return the session's summary, at SessionEnd log it and forget."""
    event, session = hook_input.hook_event_name, hook_input.session_id
    if event == "PostToolUse":
        SESSIONS.count(session, hook_input.tool_name or "unknown")
        return None
    if event not in ("Stop", "SessionEnd"):
        return None
    counts = SESSIONS.take(session, forget=event == "SessionEnd")
    text = f"Session {session}: {summary_text(counts)}"
    logger.info("%s", text)
    return {"systemMessage": text} if event == "Stop" else None


# -- execution time -----------------------------------------------------------------------------


class ToolTimes:
    """Per tool: calls, total and slowest duration (thread-safe)."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.total_s: dict[str, float] = {}
        self.slowest_s: dict[str, float] = {}

    def add(self, tool: str, seconds: float) -> None:
        with _lock:
            self.calls[tool] += 1
            self.total_s[tool] = self.total_s.get(tool, 0.0) + seconds
            self.slowest_s[tool] = max(seconds, self.slowest_s.get(tool, 0.0))


TIMES = ToolTimes()


def execution_time(hook_input: HookInput) -> dict[str, Any] | None:
    """PostToolUse: record the tool's ``duration_ms``; a warning for the next turn past 30 s."""
    if hook_input.hook_event_name != "PostToolUse":
        return None
    duration_ms = hook_input.extra_fields.get("duration_ms")
    if not isinstance(duration_ms, int | float) or isinstance(duration_ms, bool) or duration_ms < 0:
        return None
    tool = hook_input.tool_name or "unknown"
    seconds = duration_ms / 1000
    TIMES.add(tool, seconds)
    if seconds <= SLOW_TOOL_S:
        return None
    return {
        "systemMessage": f"{tool} took {seconds:.1f} s (over {SLOW_TOOL_S:g} s); slowest {tool} call so far "
        f"{TIMES.slowest_s[tool]:.1f} s."
    }


__all__ = ["audit_line", "audit_log", "execution_time", "large_output_warning", "session_summary", "summary_text"]
