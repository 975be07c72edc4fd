"""What an event's input can be judged on, worked out before its handlers run.

Splitting a long shell command is the one piece of decision work whose cost grows with the
input. A command over ``hookbus.limits.commandBytes`` is not split at all; a long one is split
in a worker thread of its own, within a time budget, so the dispatcher's event loop goes on
serving every other event (and tenant) meanwhile. Either way the answer is recorded for the
event (:func:`bus.rules.bashsplit.prepare`): its commands, or why it cannot be judged, which every
rule and ``if`` of the event then sees without splitting it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from bus.rules.bashsplit import Judged, prepare, reset_prepared, split_within
from bus.rules.limits import INLINE_SPLIT_CHARS, SPLIT_BUDGET_S, Limits, reset_limits, set_limits
from bus.rules.permissions import SHELL_TOOLS
from workers.handlers.threads import ThreadHandoff

T = TypeVar("T")

#: Two threads: a long command each while the event loop keeps the GIL's other turns.
_threads = ThreadHandoff(2, "hookbus-judge")


async def judge_command(
    hook_input: Mapping[str, Any], limits: Limits, remaining_s: float
) -> dict[tuple[str, bool], Judged] | None:
    """The judgement of the event's shell command when it is too long to split inline, else ``None``."""
    tool = hook_input.get("tool_name")
    tool_input = hook_input.get("tool_input")
    if tool not in SHELL_TOOLS or not isinstance(tool_input, dict):
        return None
    command = tool_input.get("command")
    if not isinstance(command, str):
        return None
    key = (command, tool == "PowerShell")
    if why := limits.command_too_long(command):
        return {key: why}
    if len(command) <= INLINE_SPLIT_CHARS:
        return None
    budget_s = min(SPLIT_BUDGET_S, max(remaining_s / 2, 0.05))
    result: Judged
    try:
        # The thread stops itself at its budget; the wait also covers its turn in the queue.
        async with asyncio.timeout(budget_s + 0.05):
            result = await _threads.run(split_within, command, key[1], budget_s)
    except TimeoutError:
        result = f"the command could not be split within {budget_s:g} s"
    return {key: result}


async def offload(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in one of these threads (CPU-bound work on a large input: masking a record)."""
    result: T = await _threads.run(fn, *args)
    return result


class judged:
    """Evaluate the event under these judgements and limits (in the current context)."""

    __slots__ = ("_found", "_limits", "_limits_token", "_token")

    def __init__(self, found: dict[tuple[str, bool], Judged] | None, limits: Limits) -> None:
        self._found = found
        self._limits = limits

    def __enter__(self) -> None:
        # A class, not a generator: this runs around every event's evaluation.
        self._token = prepare(self._found) if self._found else None
        self._limits_token = set_limits(self._limits)

    def __exit__(self, *exc: object) -> None:
        reset_limits(self._limits_token)
        if self._token is not None:
            reset_prepared(self._token)


__all__ = ["judge_command", "judged", "offload"]
