"""In-process plugin hooks: a registry of Python callbacks per event (``HOOKS``).

A plugin is a Python module named in the policy's ``hookbus.plugins`` list. Importing it
registers its callbacks with :func:`register_hook`; nothing runs at registration. When an
event arrives, the dispatcher runs the event's callbacks in registration order with the
typed hook input (:class:`bus.hooks.models.HookInput`) and stops at the first one that returns
something other than ``None``: that answer *intercepts* (the first non-``None`` answer wins), and
is read like a ``function`` handler's return value (a string blocks with that reason, a
dict is Claude Code output JSON, ...; see :mod:`workers.handlers.function`).

::

    # my_plugins/guard.py
    from bus.hooks.plugins import register_hook

    def permission_hook(hook_input):
        if hook_input.tool_name == "Bash" and "rm -rf" in (hook_input.tool_input or {}).get("command", ""):
            return "Permission denied: rm -rf is not allowed"
        return None

    register_hook("PreToolUse", permission_hook)

The registry is per process: every dispatcher of a process shares it.
:func:`load_plugins` is idempotent, so several dispatchers (or a reload) may load the same
list; a module whose callbacks were removed with :func:`clear_hooks` is re-imported.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import importlib
import inspect
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable
from types import ModuleType
from typing import Any

from bus.errors import PluginCallbackError, PluginError

logger = logging.getLogger("hookbus.plugins")

#: A plugin callback: called with the hook input, returns ``None`` (no opinion) or an answer.
Callback = Callable[..., Any]

#: The registry: event name -> callbacks in registration order.
HOOKS: dict[str, list[Callback]] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class Interception:
    """What :func:`atrigger_hooks` found: the callbacks that ran and the one that answered."""

    ran: tuple[Callback, ...]
    callback: Callback | None = None
    result: Any = None


def register_hook(event: str, callback: Callback) -> Callback:
    """Append ``callback`` to ``event``'s callbacks; returns it (usable as a decorator helper).

    Any event name is accepted (Claude Code's, the agent-loop events and unknown names alike). Registering the
    same callback twice for one event is a no-op.
    """
    if not callable(callback):
        raise TypeError(f"plugin callback for {event} is not callable: {callback!r}")
    callbacks = HOOKS.setdefault(event, [])
    if callback not in callbacks:
        callbacks.append(callback)
    return callback


def hooks_for(event: str) -> tuple[Callback, ...]:
    """The callbacks registered for ``event``, in registration order."""
    return tuple(HOOKS.get(event, ()))


def clear_hooks(event: str | None = None) -> None:
    """Forget the callbacks of ``event``, or of every event."""
    if event is None:
        HOOKS.clear()
    else:
        HOOKS.pop(event, None)


def callback_name(callback: Callback) -> str:
    """``module.qualname`` of a callback, e.g. ``examples.plugins.permission.permission_hook``."""
    target = callback.func if isinstance(callback, functools.partial) else callback
    module = getattr(target, "__module__", None) or "?"
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}.{name}"


def trigger_hooks(event: str, *args: Any) -> Any:
    """Call ``event``'s callbacks in order; return the first non-``None`` result, else ``None``.

    The synchronous interceptor. A coroutine callback cannot be awaited here: use
    :func:`atrigger_hooks`.
    """
    for callback in hooks_for(event):
        result = callback(*args)
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            raise TypeError(f"{callback_name(callback)} is async; use atrigger_hooks")
        if result is not None:
            return result
    return None


#: Runs a synchronous callable in a worker thread: ``await run_sync(fn, *args)``.
RunSync = Callable[..., Awaitable[Any]]


async def _default_executor(fn: Callable[..., Any], *args: Any) -> Any:
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(None, call)


async def atrigger_hooks(event: str, *args: Any, run_sync: RunSync = _default_executor) -> Interception:
    """:func:`trigger_hooks` for the event loop: async callbacks are awaited, sync ones run in a
    worker thread by ``run_sync`` (never on the loop; by default the loop's executor, in a copy
    of the caller's context). A raising callback raises :class:`PluginCallbackError` and stops
    the chain."""
    ran: list[Callback] = []
    for callback in hooks_for(event):
        ran.append(callback)
        try:
            if inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(
                getattr(callback, "__call__", None)  # noqa: B004 - async callable objects
            ):
                result = await callback(*args)
            else:
                result = await run_sync(callback, *args)
                if inspect.isawaitable(result):
                    result = await _awaited(result)
        except Exception as exc:
            raise PluginCallbackError(callback_name(callback), callback, exc) from exc
        if result is not None:
            return Interception(tuple(ran), callback, result)
    return Interception(tuple(ran))


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def _registered_by(module: str) -> bool:
    return any(callback_name(cb).startswith(module + ".") for cbs in HOOKS.values() for cb in cbs)


def load_plugins(module_names: Iterable[str]) -> list[ModuleType]:
    """Import each plugin module (which registers its callbacks); return the modules.

    Idempotent: a module already imported is not imported again, unless none of its
    callbacks are registered any more (after :func:`clear_hooks`), in which case it is
    reloaded so that it registers them again. Every failure is collected and raised as one
    :class:`PluginError` after the others have been loaded.
    """
    modules: list[ModuleType] = []
    failures: list[str] = []
    for name in module_names:
        try:
            module = sys.modules.get(name)
            if module is None:
                module = importlib.import_module(name)
            elif not _registered_by(name):
                module = importlib.reload(module)
        except Exception as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        logger.info("plugin %s loaded", name)
        modules.append(module)
    if failures:
        raise PluginError("cannot load plugin(s): " + "; ".join(failures))
    return modules


__all__ = [
    "HOOKS",
    "Callback",
    "Interception",
    "PluginError",
    "atrigger_hooks",
    "callback_name",
    "clear_hooks",
    "hooks_for",
    "load_plugins",
    "register_hook",
    "trigger_hooks",
]
