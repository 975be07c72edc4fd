"""The Python SDK: send hook events from your own agent loop to hookbus and get a decision.

    with HookBusClient("http://127.0.0.1:8787") as bus:
        decision = bus.emit("PreToolUse", tool_name="Bash", tool_input={"command": "rm -rf /"})
        if decision.allowed:
            ...  # run the tool (with decision.updated_input when set)
        elif decision.asks:
            ...  # run it only if a person confirms (decision.reason says why); no person: don't
        else:
            ...  # don't run the tool (blocked or deferred); tell the model decision.reason

``blocked`` alone is not the test for running a tool: an ``ask`` is not blocked, and must not
run until a person confirms it.

Each ``emit`` posts one Claude Code hook input (``hook_event_name``, the client's
``session_id``, ``cwd``, ``transcript_path`` plus your fields) to ``POST /v1/hooks`` and
reads the Claude Code hook output into a :class:`Decision`. The rules are the
``hookbus hook`` shim's: when the gateway is down, slow, refuses the request (401, 429,
...), sends something that is not a JSON object, or itself answers "fail-open", the
decision is *not blocked* with ``outcome="fail-open"`` and the cause in ``error`` (fail
open); with ``fail_closed=True`` it is *blocked* with ``outcome="fail-closed"`` and that cause
as ``reason``. ``emit``
never raises for a gateway problem: a hook must not crash the agent.

``timeout_s`` bounds connecting and reading the reply (the async client bounds the whole
request). The token defaults to ``$HOOKBUS_TOKEN``, the URL to ``$HOOKBUS_URL`` and then
``http://127.0.0.1:8787``; both a base URL and the full ``/v1/hooks`` URL are accepted.

Requests carry ``X-Hookbus-Dialect: sdk``: the format is Claude Code's, and the decision log
records the agent as ``sdk``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal, Self

import httpx

from hookbus.shim import hook_url

logger = logging.getLogger("hookbus.client")

#: How a decision came about: the dispatchers decided, the gateway recorded a non-blocking
#: event, the gateway or the way to it failed (fail open, or blocked under ``fail_closed``),
#: or only local hooks ran.
Outcome = Literal["decided", "recorded", "fail-open", "fail-closed", "local"]
_RANK = {"deny": 4, "defer": 3, "ask": 2, "allow": 1}
#: The dialect the SDK names (``X-Hookbus-Dialect``): the agent its decision-log records name.
_DIALECT = "sdk"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """What hookbus decided about one event (read-only).

    Before running a tool, read :attr:`allowed`: true only when it may run without a person.
    Otherwise it is :attr:`blocked`, or it :attr:`asks` (run it only once a person confirms),
    or it :attr:`defers` (don't run it now).

    ``blocked`` is true for a PreToolUse ``deny``, a ``decision: "block"`` (Stop, PostToolUse,
    UserPromptSubmit, ...), ``continue: false`` (then ``stop`` is true too), a
    PermissionRequest ``behavior: "deny"``, or a failure under ``fail_closed``; it is false for
    an ``ask`` and a ``defer``. ``reason`` is the text to act on: the block reason, or the
    explanation of an ``ask``/``allow`` (for an ``ask``, what to show the person).
    ``updated_input`` replaces the whole tool input when set. ``raw`` is the hook output
    object exactly as the gateway sent it.
    """

    blocked: bool = False
    reason: str | None = None
    updated_input: dict[str, Any] | None = None
    additional_context: str | None = None
    system_message: str | None = None
    outcome: Outcome = "decided"
    raw: dict[str, Any] = dataclasses.field(default_factory=dict)
    permission_decision: str | None = None
    stop: bool = False
    error: str | None = None
    event_id: str | None = None

    @property
    def asks(self) -> bool:
        """Whether a person must confirm before the tool runs (``permissionDecision: "ask"``):
        show them :attr:`reason`; with no one to ask, don't run it. Never true when :attr:`blocked`."""
        return self.permission_decision == "ask" and not self.blocked

    @property
    def defers(self) -> bool:
        """Whether the tool call is deferred (PreToolUse ``defer``): don't run it now; whoever
        runs the agent resumes it later. Never true when :attr:`blocked`."""
        return self.permission_decision == "defer" and not self.blocked

    @property
    def allowed(self) -> bool:
        """Whether the tool may run without a person: not :attr:`blocked`, and neither :attr:`asks`
        nor :attr:`defers` (an ``allow``, no opinion, or a fail-open)."""
        return not self.blocked and self.permission_decision not in ("ask", "defer")

    @classmethod
    def from_output(
        cls, output: Mapping[str, Any], outcome: Outcome = "decided", event_id: str | None = None
    ) -> Decision:
        """Read a Claude Code hook output object (camelCase, as the gateway answers)."""
        specific = output.get("hookSpecificOutput")
        specific = specific if isinstance(specific, dict) else {}
        request = specific.get("decision")
        request = request if isinstance(request, dict) else {}
        permission = _text(specific.get("permissionDecision")) or _text(request.get("behavior"))
        if permission is None and output.get("decision") == "approve":
            permission = "allow"
        stop = output.get("continue") is False
        blocked = stop or output.get("decision") == "block" or permission == "deny"
        reasons = (
            _text(output.get("stopReason")) if stop else None,
            _text(output.get("reason")) if output.get("decision") == "block" else None,
            _text(specific.get("permissionDecisionReason")),
            _text(request.get("message")),
            _text(output.get("reason")),
        )
        updated = specific.get("updatedInput", request.get("updatedInput"))
        return cls(
            blocked=blocked,
            reason=next((r for r in reasons if r), None),
            updated_input=dict(updated) if isinstance(updated, dict) else None,
            additional_context=_text(specific.get("additionalContext")),
            system_message=_text(output.get("systemMessage")),
            outcome=outcome,
            raw=dict(output),
            permission_decision=permission,
            stop=stop,
            event_id=event_id,
        )

    @classmethod
    def failed(cls, error: str, fail_closed: bool) -> Decision:
        """The decision when the gateway could not answer: fail open, or blocked when closed."""
        return cls(
            blocked=fail_closed,
            reason=f"hookbus: {error}" if fail_closed else None,
            outcome="fail-closed" if fail_closed else "fail-open",
            error=error,
            stop=False,
        )

    def combine(self, other: Decision) -> Decision:
        """This decision followed by ``other``: any block wins, the most restrictive permission
        wins, ``other``'s ``updated_input`` wins when it has one, contexts and messages join."""
        permission = max(
            (p for p in (self.permission_decision, other.permission_decision) if p),
            key=lambda p: _RANK.get(p, 4),
            default=None,
        )
        if other.blocked or not self.blocked:
            reason = other.reason or (None if other.blocked else self.reason)
        else:
            reason = self.reason
        return dataclasses.replace(
            other,
            blocked=self.blocked or other.blocked,
            reason=reason,
            updated_input=other.updated_input if other.updated_input is not None else self.updated_input,
            additional_context="\n\n".join(c for c in (self.additional_context, other.additional_context) if c) or None,
            system_message="\n".join(m for m in (self.system_message, other.system_message) if m) or None,
            permission_decision=permission,
            stop=self.stop or other.stop,
        )


class _Base:
    """What the sync and async clients share: settings, the hook input, reading replies."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout_s: float = 5.0,
        fail_closed: bool = False,
        *,
        session_id: str | None = None,
        cwd: str | None = None,
    ) -> None:
        self.url = hook_url(url)
        self.token = token if token is not None else os.environ.get("HOOKBUS_TOKEN")
        self.timeout_s = timeout_s
        self.fail_closed = fail_closed
        self.session_id = session_id or f"hookbus-sdk-{uuid.uuid4()}"
        self.cwd = cwd or os.getcwd()

    def _headers(self) -> dict[str, str]:
        # The SDK speaks Claude Code's format; its dialect only makes its records say ``sdk``.
        headers = {"X-Hookbus-Dialect": _DIALECT}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def hook_input(self, event: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """The hook input sent for ``event``: the client's defaults, then ``fields``."""
        return {
            "session_id": self.session_id,
            "transcript_path": "",
            "cwd": self.cwd,
            **fields,
            "hook_event_name": event,
        }

    def _fail(self, error: str) -> Decision:
        logger.warning("hookbus: %s (failing %s)", error, "closed" if self.fail_closed else "open")
        return Decision.failed(error, self.fail_closed)

    def _read(self, response: httpx.Response) -> Decision:
        if not response.is_success:
            return self._fail(f"gateway answered {response.status_code}: {response.text.strip()[:300]}")
        outcome = response.headers.get("X-Hookbus-Outcome", "decided")
        if outcome == "fail-open":
            return self._fail("gateway could not decide in time")
        try:
            output = response.json() if response.content.strip() else {}
        except ValueError:
            output = None
        if not isinstance(output, dict):
            return self._fail("gateway sent a reply that is not a JSON object")
        return Decision.from_output(
            output, "recorded" if outcome == "recorded" else "decided", response.headers.get("X-Hookbus-Event-Id")
        )


class HookBusClient(_Base):
    """A blocking client; one connection pool per instance. Use it as a context manager or
    call :meth:`close`. ``session_id`` defaults to a new id per instance."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout_s: float = 5.0,
        fail_closed: bool = False,
        *,
        session_id: str | None = None,
        cwd: str | None = None,
    ) -> None:
        super().__init__(url, token, timeout_s, fail_closed, session_id=session_id, cwd=cwd)
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s), headers=self._headers())

    def emit(self, event: str, /, **fields: Any) -> Decision:
        """Send ``event`` with ``fields`` (snake_case hook input fields) and return the decision."""
        return self.send(self.hook_input(event, fields))

    def send(self, hook_input: Mapping[str, Any]) -> Decision:
        """Send a complete hook input object as is."""
        try:
            response = self._http.post(self.url, json=dict(hook_input))
        except httpx.TimeoutException:
            return self._fail(f"gateway at {self.url} did not answer within {self.timeout_s:g}s")
        except httpx.HTTPError as exc:
            return self._fail(f"gateway unreachable at {self.url}: {exc or type(exc).__name__}")
        return self._read(response)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


class AsyncHookBusClient(_Base):
    """The asyncio client: same arguments and rules as :class:`HookBusClient`; ``timeout_s``
    bounds the whole request. Use ``async with`` or call :meth:`aclose`."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout_s: float = 5.0,
        fail_closed: bool = False,
        *,
        session_id: str | None = None,
        cwd: str | None = None,
    ) -> None:
        super().__init__(url, token, timeout_s, fail_closed, session_id=session_id, cwd=cwd)
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), headers=self._headers())

    async def emit(self, event: str, /, **fields: Any) -> Decision:
        """Send ``event`` with ``fields`` (snake_case hook input fields) and return the decision."""
        return await self.send(self.hook_input(event, fields))

    async def send(self, hook_input: Mapping[str, Any]) -> Decision:
        """Send a complete hook input object as is."""
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self._http.post(self.url, json=dict(hook_input))
        except (TimeoutError, httpx.TimeoutException):
            return self._fail(f"gateway at {self.url} did not answer within {self.timeout_s:g}s")
        except httpx.HTTPError as exc:
            return self._fail(f"gateway unreachable at {self.url}: {exc or type(exc).__name__}")
        return self._read(response)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()


__all__ = ["AsyncHookBusClient", "Decision", "HookBusClient", "Outcome"]
