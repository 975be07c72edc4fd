"""What a freeze is, which events it denies, and how its deny reads.

A freeze stops one tenant's tools: while it holds, every ``PreToolUse`` and
``PermissionRequest`` (the event a tool runs after, in every agent's dialect once translated
to Claude Code's) of a tool it covers is denied, whatever the policy says. It covers the tools
its matchers name, written as a hook group's ``matcher`` (``Bash``, ``Write|Edit``,
``mcp__github__.*``, ``*`` for every tool); by default the state-changing ones,
:data:`STATE_CHANGING_TOOLS`. It lifts itself at ``until`` when one is given.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import time
from collections.abc import Sequence
from typing import Any, Final

import orjson

from bus.errors import ConfigError
from bus.hooks.matching import compile_matcher
from bus.hooks.results import HandlerResult, Outcome

#: The tools a freeze covers when it names none: every tool that can change state, run code or
#: reach out. Every MCP tool counts (hookbus cannot tell a read-only one); WebFetch and
#: WebSearch, Read, Glob, Grep and the like keep working.
STATE_CHANGING_TOOLS: Final = ("Bash", "PowerShell", "Write", "Edit", "MultiEdit", "NotebookEdit", "mcp__.*")
#: The events a freeze denies: those a tool waits on before it runs.
FROZEN_EVENTS: Final = frozenset({"PreToolUse", "PermissionRequest"})
#: The handler type a freeze's deny carries in records.
FREEZE_HANDLER: Final = "freeze"
_TENANT = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_MAX_REASON_CHARS = 300
_MAX_BY_CHARS = 120


def now_ms() -> int:
    return int(time.time() * 1000)


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def check_tenant(tenant: str) -> str:
    """``tenant`` when it is a tenant name (ConfigError otherwise)."""
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
        raise ConfigError(f"tenant {tenant!r}: use 1-64 letters, digits, '.', '_' or '-'")
    return tenant


def check_tools(tools: Sequence[str] | None) -> tuple[str, ...]:
    """The matchers of ``tools`` (the default set when empty); ConfigError for one that does not compile."""
    found = tuple(t.strip() for t in tools or () if isinstance(t, str) and t.strip())
    if tools and len(found) != len(tools):
        raise ConfigError("tools must be non-empty matcher strings like Bash, Write|Edit or mcp__.*")
    for tool in found:
        try:
            compile_matcher(tool, "PreToolUse")
        except ValueError as exc:
            raise ConfigError(f"tools: {exc}") from exc
    return found or STATE_CHANGING_TOOLS


def parse_until_ms(text: str | None, now: int | None = None) -> int | None:
    """When a freeze given ``--until text`` lifts, in epoch ms (None: never).

    ``text`` is a duration from now (``45s``, ``30m``, ``2h``, ``1d``, ``1w``) or an ISO 8601 time
    (``2026-12-06T21:00:00Z``; UTC when it names no zone). ConfigError for anything else, or a
    time that has passed.
    """
    if text is None or not str(text).strip():
        return None
    text = str(text).strip()
    now = now_ms() if now is None else now
    if match := _DURATION.match(text):
        until = now + int(match.group(1)) * _UNITS[match.group(2)] * 1000
    else:
        try:
            when = datetime.datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(
                f"until {text!r}: give a duration (45s, 30m, 2h, 1d) or an ISO 8601 time (2026-12-06T21:00:00Z)"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        until = int(when.timestamp() * 1000)
    if until <= now:
        raise ConfigError(f"until {text!r} has already passed")
    return until


@dataclasses.dataclass(frozen=True, slots=True)
class Freeze:
    """One tenant's freeze."""

    tenant: str
    #: Hook-group matchers of the tools it covers.
    tools: tuple[str, ...]
    #: Who set it (a name and the role that allowed it), and why.
    by: str
    reason: str
    since_ms: int
    #: When it lifts itself (epoch ms); None: when someone lifts it.
    until_ms: int | None = None

    def active(self, at_ms: int | None = None) -> bool:
        return self.until_ms is None or (now_ms() if at_ms is None else at_ms) < self.until_ms

    def covers(self, event: str, tool_name: object) -> bool:
        """Whether this freeze denies ``event`` of ``tool_name`` (ignoring ``until``)."""
        if event not in FROZEN_EVENTS or not isinstance(tool_name, str):
            return False
        return any(compile_matcher(tool, "PreToolUse").matches(tool_name) for tool in self.tools)

    @property
    def deny_reason(self) -> str:
        """What the agent (and the record) reads: the freeze, who set it, since and until when, why."""
        until = f"until {_when(self.until_ms)}" if self.until_ms is not None else "until lifted"
        why = f": {self.reason}" if self.reason else ""
        return (
            f"hookbus: tenant {self.tenant} is frozen ({'|'.join(self.tools)}) by {self.by} "
            f"since {_when(self.since_ms)}, {until}{why}"
        )

    def result(self, event: str) -> HandlerResult:
        """The handler result a frozen ``event`` is answered with: a deny."""
        reason = self.deny_reason
        if event == "PermissionRequest":  # exit 2 means nothing there: a deny decision does
            deny = {"hookEventName": event, "decision": {"behavior": "deny", "message": reason}}
            output = {"hookSpecificOutput": deny}
            return HandlerResult(Outcome.OK, output, reason=reason, handler_type=FREEZE_HANDLER, handler_id="freeze")
        return HandlerResult(Outcome.BLOCK, reason=reason, handler_type=FREEZE_HANDLER, handler_id="freeze")

    def public(self) -> dict[str, Any]:
        """The JSON view (``GET /v1/freeze``, ``/readyz``)."""
        return {
            "tenant": self.tenant,
            "tools": list(self.tools),
            "by": self.by,
            "reason": self.reason,
            "since_ms": self.since_ms,
            "until_ms": self.until_ms,
            "since": _when(self.since_ms),
            "until": _when(self.until_ms) if self.until_ms is not None else None,
        }

    def encode(self) -> bytes:
        return orjson.dumps({k: v for k, v in self.public().items() if k not in ("since", "until")})

    @classmethod
    def decode(cls, raw: bytes | str) -> Freeze:
        data = orjson.loads(raw)
        return cls(
            tenant=str(data["tenant"]),
            tools=tuple(data.get("tools") or STATE_CHANGING_TOOLS),
            by=str(data.get("by", "")),
            reason=str(data.get("reason", "")),
            since_ms=int(data["since_ms"]),
            until_ms=int(data["until_ms"]) if data.get("until_ms") is not None else None,
        )

    @classmethod
    def new(
        cls,
        tenant: str,
        tools: Sequence[str] | None = None,
        until_ms: int | None = None,
        reason: str = "",
        by: str = "",
    ) -> Freeze:
        """A freeze starting now; ConfigError for a bad tenant, tool matcher or a past ``until_ms``."""
        since = now_ms()
        if until_ms is not None and until_ms <= since:
            raise ConfigError("until has already passed")
        one_line = " ".join(str(reason).split())[:_MAX_REASON_CHARS]
        return cls(
            check_tenant(tenant),
            check_tools(tools),
            " ".join(str(by).split())[:_MAX_BY_CHARS] or "unknown",
            one_line,
            since,
            until_ms,
        )


__all__ = [
    "FREEZE_HANDLER",
    "FROZEN_EVENTS",
    "STATE_CHANGING_TOOLS",
    "Freeze",
    "check_tenant",
    "check_tools",
    "parse_until_ms",
]
