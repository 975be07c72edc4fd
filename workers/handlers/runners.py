"""The handler runners by type.

Each handler type lives in its own module exposing ``async def run(ctx) -> HandlerResult``;
this table names them. A type whose module cannot be imported (an optional dependency
missing) is reported as a non-blocking error when such a handler runs.
"""

from __future__ import annotations

import importlib
import logging

from bus.hooks.results import HandlerResult, Outcome
from workers.handlers.context import HookContext, Runner

logger = logging.getLogger("hookbus.dispatcher")

RUNNER_MODULES = {
    "command": "workers.handlers.command",
    "rule": "workers.handlers.rule",
    "http": "workers.handlers.http",
    "prompt": "workers.handlers.prompt",
    "agent": "workers.handlers.agent",
    "mcp_tool": "workers.handlers.mcp",
    "function": "workers.handlers.function",
}
#: Handler types whose runner bounds every wait by the deadline it is given (``http``: one
#: ``asyncio.timeout`` of ``min(timeout, remaining)`` around the request), so callers set no
#: second timer over them (about 7 µs of CPU per ``asyncio.timeout`` on uvloop, measured).
SELF_TIMED_TYPES = frozenset({"http"})


def _missing(handler_type: str, why: str) -> Runner:
    async def run(ctx: HookContext) -> HandlerResult:
        return HandlerResult(Outcome.ERROR, reason=f"handler type '{handler_type}' is not available: {why}")

    return run


def default_runners() -> dict[str, Runner]:
    """Runner per handler type."""
    runners: dict[str, Runner] = {}
    for handler_type, module_name in RUNNER_MODULES.items():
        try:
            runners[handler_type] = importlib.import_module(module_name).run
        except (ImportError, AttributeError) as exc:
            logger.debug("no runner for %s: %s", handler_type, exc)
            runners[handler_type] = _missing(handler_type, str(exc))
    return runners


__all__ = ["RUNNER_MODULES", "SELF_TIMED_TYPES", "default_runners"]
