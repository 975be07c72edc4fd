"""``function`` handlers: a Python callable named ``module:attr``, run in the dispatcher.

The callable is imported once per process (successes and failures are cached; an import
that fails is a non-blocking ``ERROR`` naming the reason, on every event, never a crash) and
is called with one argument, the typed hook input (:class:`bus.hooks.models.HookInput`, a fresh
copy per call). A coroutine function is awaited on the loop; any other callable runs in a
worker thread of hookbus's own (:mod:`workers.handlers.threads`, a cheaper hand-off than the loop's
executor, and not the loop's default executor, which DNS lookups need), as are imports and
plugin callbacks, so a slow or blocking function never stalls the dispatcher. A thread cannot
be killed: on timeout the answer is dropped, the thread runs on.

The return value (see :func:`result_from_return`) may be

* ``None`` — no opinion;
* a :class:`bus.hooks.models.HookOutput` or a dict — Claude Code output JSON, checked with
  :func:`bus.hooks.output.check_output` like an http hook's body;
* a string — block with that reason (as a plugin interceptor's string does): a ``deny`` on PreToolUse and
  PermissionRequest, ``decline`` on Elicitation, ``decision: "block"`` elsewhere; an empty
  string is no opinion;
* an agent-loop ``HookResult`` dict — ``{"action": "continue" | "block" | "modify", "message",
  "modifications": {"args", "messages"}}``: ``block`` as a string return with ``message``,
  ``modifications.args`` → PreToolUse ``updatedInput`` (a full replacement),
  ``modifications.messages`` → PreSampling ``updatedMessages``.

An exception raised by the callable is a non-blocking ``ERROR`` (``failMode: closed`` is
applied by the engine). Plugin callbacks (:mod:`bus.hooks.plugins`) are run by
:func:`run_plugins` and read the same way.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import time
from collections.abc import Callable
from typing import Any, Final

from pydantic import ValidationError

from bus.errors import OutputSchemaError, PluginCallbackError
from bus.hooks.models import HookInput, HookOutput
from bus.hooks.output import UNIVERSAL_FIELDS, check_output
from bus.hooks.plugins import atrigger_hooks, callback_name, hooks_for
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.schema import FunctionHandler
from bus.runtime.metrics import Metrics
from workers.handlers.context import HookContext
from workers.handlers.threads import ThreadHandoff

#: Threads for synchronous functions, imports and plugin callbacks (per process).
MAX_THREADS: Final = 32
_ACTIONS: Final = frozenset({"continue", "block", "modify"})
#: Where each agent-loop ``modifications`` key goes: event -> hookSpecificOutput field.
_MODIFICATIONS: Final = {"args": ("PreToolUse", "updatedInput"), "messages": ("PreSampling", "updatedMessages")}

_threads = ThreadHandoff(MAX_THREADS, "hookbus-function")
#: ``module:attr`` -> the callable, or the reason it cannot be had.
_resolved: dict[str, Callable[..., Any] | str] = {}


def _import(name: str) -> Callable[..., Any] | str:
    module_name, _, attr_path = name.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for attr in attr_path.split("."):
            target = getattr(target, attr)
    except (Exception, SystemExit) as exc:  # a module that exits on import must not stop the dispatcher
        return f"cannot import function {name!r}: {type(exc).__name__}: {exc}"
    if not callable(target):
        return f"function {name!r} is not callable (it is {type(target).__name__})"
    return target  # type: ignore[no-any-return]


async def resolve(name: str) -> Callable[..., Any] | str:
    """The callable named ``module:attr`` (imported once, in a worker thread), or why not."""
    found = _resolved.get(name)
    if found is None:
        found = _resolved[name] = await _threads.run(_import, name)
    return found


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    """Await ``fn(*args)``: coroutine functions on the loop, anything else in a worker thread."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):  # noqa: B004
        return await fn(*args)
    result = await _threads.run(fn, *args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def run(ctx: HookContext) -> HandlerResult:
    """Run one ``function`` handler on one event."""
    handler = ctx.entry.handler
    assert isinstance(handler, FunctionHandler)
    fn = await resolve(handler.function)
    if isinstance(fn, str):
        return HandlerResult(Outcome.ERROR, reason=fn)
    try:
        hook_input = HookInput.model_validate(ctx.given_input)
    except ValidationError as exc:
        return HandlerResult(Outcome.ERROR, reason=f"hook input is not valid: {exc.errors()[0]['msg']}")
    try:
        value = await call(fn, hook_input)
    except (Exception, SystemExit) as exc:
        return HandlerResult(Outcome.ERROR, reason=f"{handler.function} raised {type(exc).__name__}: {exc}")
    return result_from_return(ctx.event, value)


async def run_plugins(event: str, hook_input: dict[str, Any], timeout_s: float, metrics: Metrics) -> HandlerResult:
    """Run ``event``'s plugin callbacks (first non-None answer intercepts) as one result.

    The result's type is ``function``; ``handler_id`` is ``plugin:<module>.<fn>`` of the
    callback that answered or raised, or of every callback that ran, comma-separated, when
    none did. The whole chain is bounded by ``timeout_s`` (``TIMEOUT`` past it).
    """
    names = ",".join(callback_name(cb) for cb in hooks_for(event))
    started = time.perf_counter()
    try:
        typed = HookInput.model_validate(hook_input)
        async with asyncio.timeout(timeout_s):
            found = await atrigger_hooks(event, typed, run_sync=_threads.run)
    except ValidationError as exc:
        result = HandlerResult(Outcome.ERROR, reason=f"hook input is not valid: {exc.errors()[0]['msg']}")
    except PluginCallbackError as exc:
        result = HandlerResult(Outcome.ERROR, reason=f"plugin {exc}")
        names = callback_name(exc.callback)
    except TimeoutError:
        result = HandlerResult(Outcome.TIMEOUT, reason=f"plugins timed out after {timeout_s:.3g}s")
    else:
        result = result_from_return(event, found.result)
        names = callback_name(found.callback) if found.callback is not None else names
    result.handler_type, result.handler_id = "function", f"plugin:{names}"
    result.duration_s = time.perf_counter() - started
    metrics.child(metrics.hook_duration, "function").observe(result.duration_s)
    if result.failed:
        metrics.hook_errors.labels("function", result.outcome.value).inc()
    return result


def result_from_return(event: str, value: Any) -> HandlerResult:
    """Read a function's (or plugin callback's) return value as a handler result for ``event``."""
    try:
        if value is None:
            return HandlerResult(Outcome.OK)
        if isinstance(value, HookOutput):
            return HandlerResult(Outcome.OK, output=check_output(event, value.to_wire()))
        if isinstance(value, str):
            return HandlerResult(Outcome.OK, output=block_output(event, value)) if value else HandlerResult(Outcome.OK)
        if isinstance(value, dict):
            if "action" in value and UNIVERSAL_FIELDS.isdisjoint(value):
                return _seed_result(event, value)
            return HandlerResult(Outcome.OK, output=check_output(event, value))
    except OutputSchemaError as exc:
        return HandlerResult(Outcome.ERROR, reason=f"function output failed schema validation: {exc}")
    return HandlerResult(
        Outcome.ERROR,
        reason=f"function returned {type(value).__name__}; expected None, a string, a dict or a HookOutput",
    )


def block_output(event: str, reason: str) -> dict[str, Any]:
    """Claude Code output that blocks ``event`` with ``reason``."""
    if event == "PreToolUse":
        specific: dict[str, Any] = {"permissionDecision": "deny", "permissionDecisionReason": reason}
    elif event == "PermissionRequest":
        specific = {"decision": {"behavior": "deny", "message": reason}}
    elif event in ("Elicitation", "ElicitationResult"):
        specific = {"action": "decline"}
    else:
        return check_output(event, {"decision": "block", "reason": reason})
    return check_output(event, {"hookSpecificOutput": {"hookEventName": event, **specific}})


def _seed_result(event: str, value: dict[str, Any]) -> HandlerResult:
    """An agent-loop ``{action, message, modifications}`` result as Claude Code output for ``event``."""
    action = value["action"]
    if action not in _ACTIONS:
        return HandlerResult(Outcome.ERROR, reason=f"unknown action {action!r} (expected continue, block or modify)")
    if action == "block":
        message = value.get("message")
        return HandlerResult(
            Outcome.OK,
            output=block_output(
                event, message if isinstance(message, str) and message else "Blocked by a function hook"
            ),
        )
    modifications = value.get("modifications") or {}
    if action == "continue" or not modifications:
        return HandlerResult(Outcome.OK)
    if not isinstance(modifications, dict):
        return HandlerResult(Outcome.ERROR, reason="modifications must be an object")
    specific: dict[str, Any] = {}
    for key, change in modifications.items():
        where = _MODIFICATIONS.get(key)
        if where is None:
            return HandlerResult(Outcome.ERROR, reason=f"unknown modification {key!r} (expected args or messages)")
        if where[0] != event:
            return HandlerResult(
                Outcome.ERROR, reason=f"modifications.{key} is only supported on {where[0]}, not on {event}"
            )
        specific[where[1]] = change
    return HandlerResult(
        Outcome.OK, output=check_output(event, {"hookSpecificOutput": {"hookEventName": event, **specific}})
    )


__all__ = ["MAX_THREADS", "block_output", "call", "resolve", "result_from_return", "run", "run_plugins"]
