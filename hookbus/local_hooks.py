"""An in-process hook engine for your agent loop, composed with the central bus.

Modelled on two classic agent-loop hook designs: a plugin registry (``register_hook`` /
``trigger_hooks``, where the first callback that returns something other than None
intercepts) and a LocalHooks engine's ``emit`` (handlers run in registration order, a
block ends the run at once, a modification updates the context for the next handler).
``emit`` runs the LOCAL callbacks first, then asks hookbus with the (possibly modified)
input:

    engine = LocalHooks(HookBusClient("http://127.0.0.1:8787"))
    engine.register("PreToolUse", lambda hook_input: None)          # no opinion
    decision = engine.emit("PreToolUse", tool_name="Bash", tool_input={"command": "ls"})

What a callback given to ``emit`` receives and may return. It gets one argument, the hook
input ``dict`` (``hook_event_name`` plus the fields; the client adds ``session_id``, ``cwd``
and ``transcript_path`` when it sends). It returns:

* ``None`` - no opinion;
* a ``str`` (or any other non-None, non-dict value) - block, with that text as the reason
  (an interception);
* an agent-loop result dict: ``{"action": "continue" | "block" | "modify", "message": ...,
  "modifications": {"args": {...}}}`` (``args`` is the new tool input);
* a Claude Code hook output dict (``{"decision": "block", ...}``, ``{"hookSpecificOutput":
  {"permissionDecision": "deny", "updatedInput": {...}}}``, ...) or a :class:`Decision`.

Composition rules: a local block returns at once and the central bus is not asked (a
block ends the run); a local ``updated_input`` replaces ``tool_input`` for the
callbacks after it and is what the central bus sees; the central decision then applies on
top: any block wins, the most restrictive permission wins (deny > defer > ask > allow), a
central ``updated_input`` wins over a local one, and ``additional_context`` /
``system_message`` of both are joined (local first). A callback that raises is logged and
skipped (fail open), or blocks when the engine is ``fail_closed``. ``trigger_hooks`` is
the plain registry call: local only, positional arguments, exceptions propagate.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

from hookbus.client import AsyncHookBusClient, Decision, HookBusClient

logger = logging.getLogger("hookbus.local_hooks")

Callback = Callable[..., Any]


def as_decision(result: Any) -> Decision | None:
    """What a local callback's return value means (None: no opinion)."""
    if result is None or isinstance(result, Decision):
        return result
    if not isinstance(result, Mapping):
        return Decision(blocked=True, reason=str(result), outcome="local")
    if "action" in result:
        action = result.get("action")
        if action == "block":
            message = result.get("message")
            return Decision(
                blocked=True,
                reason=str(message) if message else "blocked by a local hook",
                outcome="local",
                raw=dict(result),
            )
        args = (result.get("modifications") or {}).get("args")
        if action == "modify" and isinstance(args, Mapping):
            return Decision(updated_input=dict(args), outcome="local", raw=dict(result))
        return None
    return Decision.from_output(result, outcome="local")


class LocalHooks:
    """Local callbacks per event, optionally backed by a hookbus client (sync or async)."""

    def __init__(
        self, client: HookBusClient | AsyncHookBusClient | None = None, *, fail_closed: bool | None = None
    ) -> None:
        self.client = client
        self.fail_closed = client.fail_closed if fail_closed is None and client is not None else bool(fail_closed)
        self._hooks: dict[str, list[Callback]] = {}

    def register(self, event: str, callback: Callback) -> Callback:
        """Add ``callback`` to ``event`` (after those already there); returns it."""
        self._hooks.setdefault(event, []).append(callback)
        return callback

    register_hook = register

    def callbacks(self, event: str) -> list[Callback]:
        """The callbacks registered for ``event``, in order (a copy)."""
        return list(self._hooks.get(event, ()))

    def trigger_hooks(self, event: str, *args: Any) -> Any:
        """The plain registry call: each callback with ``args``; the first non-None result intercepts."""
        for callback in self._hooks.get(event, ()):
            result = callback(*args)
            if result is not None:
                return result
        return None

    @staticmethod
    def _apply(state: Decision, hook_input: dict[str, Any], result: Any) -> Decision:
        local = as_decision(result)
        if local is None:
            return state
        if local.updated_input is not None:
            hook_input["tool_input"] = local.updated_input
        return state.combine(local)

    def _step(
        self, event: str, state: Decision, hook_input: dict[str, Any], callback: Callback, result: Any
    ) -> Decision:
        """Fold one callback's result (or the exception it raised) into the decision so far."""
        if isinstance(result, Exception):
            return self._failed(event, state, callback, result)
        return self._apply(state, hook_input, result)

    def _failed(self, event: str, state: Decision, callback: Callback, exc: Exception) -> Decision:
        name = getattr(callback, "__qualname__", repr(callback))
        logger.warning("hookbus: local %s hook %s failed: %s", event, name, exc, exc_info=True)
        if not self.fail_closed:
            return state
        return state.combine(Decision(blocked=True, reason=f"local hook {name} failed: {exc}", outcome="local"))

    def emit(self, event: str, /, **fields: Any) -> Decision:
        """Run the local callbacks, then (unless one blocked) the central bus; see the module doc."""
        if isinstance(self.client, AsyncHookBusClient):
            raise TypeError("this engine has an AsyncHookBusClient: use 'await engine.aemit(...)'")
        hook_input: dict[str, Any] = {**fields, "hook_event_name": event}
        state = Decision(outcome="local")
        for callback in self.callbacks(event):
            try:
                result = callback(hook_input)
                if inspect.isawaitable(result):
                    getattr(result, "close", lambda: None)()
                    raise TypeError("async callback: use 'await engine.aemit(...)'")
            except Exception as exc:  # a local hook never crashes the agent
                result = exc
            state = self._step(event, state, hook_input, callback, result)
            if state.blocked:
                return state
        if self.client is None:
            return state
        return state.combine(self.client.emit(event, **_fields(hook_input)))

    async def aemit(self, event: str, /, **fields: Any) -> Decision:
        """:meth:`emit` for asyncio: callbacks may be coroutine functions; any client works."""
        hook_input: dict[str, Any] = {**fields, "hook_event_name": event}
        state = Decision(outcome="local")
        for callback in self.callbacks(event):
            try:
                result = callback(hook_input)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                result = exc
            state = self._step(event, state, hook_input, callback, result)
            if state.blocked:
                return state
        if self.client is None:
            return state
        if isinstance(self.client, AsyncHookBusClient):
            return state.combine(await self.client.emit(event, **_fields(hook_input)))
        return state.combine(self.client.emit(event, **_fields(hook_input)))


def _fields(hook_input: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in hook_input.items() if k != "hook_event_name"}


__all__ = ["Callback", "LocalHooks", "as_decision"]
