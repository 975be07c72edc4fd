"""What an event's input can be judged on, worked out before its handlers run.

Splitting a long shell command is the one piece of decision work whose cost grows with the
input. A command over ``hookbus.limits.commandBytes`` is not split at all; a long one is split
in a worker thread, within a time budget that runs from when it was queued, so the
dispatcher's event loop goes on serving every other event meanwhile. The threads are shared
fairly between tenants (:class:`workers.engine.fairthreads.FairThreads`): one tenant's long
commands never wait behind another's. A command of more simple commands than
``hookbus.limits.subcommands`` cannot be judged either: every rule and ``if`` of the event
reads each of them, so the count bounds the work left on the event loop. Either way the answer
is recorded for the event (:func:`bus.rules.bashsplit.prepare`): its commands, or why it cannot
be judged, which every rule and ``if`` of the event then sees without splitting it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from bus.rules.bashsplit import Judged, parse_commands, prepare, reset_prepared, split_within
from bus.rules.limits import INLINE_SPLIT_CHARS, SPLIT_BUDGET_S, Limits, reset_limits, set_limits
from bus.rules.permissions import SHELL_TOOLS
from bus.rules.shellread import read_ahead
from workers.engine.fairthreads import FairThreads, Refused

T = TypeVar("T")

#: Two threads: a long command each while the event loop keeps the GIL's other turns. A tenant
#: has at most one call running and this many waiting; past that its inputs cannot be judged.
_threads = FairThreads(2, 8, "hookbus-judge")


async def judge_command(
    hook_input: Mapping[str, Any], limits: Limits, remaining_s: float, tenant: str = ""
) -> dict[tuple[str, bool], Judged] | None:
    """The judgement of the event's shell command when it is too long to split inline or has too
    many simple commands to judge, else ``None``."""
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
        if len(command) <= limits.subcommands:  # a simple command takes a character at least
            return None
        commands = parse_commands(command, powershell=key[1])  # cached: the rules find it again
        why = limits.too_many_subcommands(len(commands)) if commands is not None else None
        return {key: why} if why else None
    budget_s = min(SPLIT_BUDGET_S, max(remaining_s / 2, 0.05))
    result: Judged | Refused
    try:
        # The thread stops itself at what is left of the budget; the wait covers its turn in the queue.
        async with asyncio.timeout(budget_s + 0.05):
            result = await _threads.run(tenant, budget_s, _split, command, key[1], limits)
    except TimeoutError:
        result = Refused(f"it was not split within {budget_s:g} s")
    if isinstance(result, Refused):
        return {key: f"the command could not be split ({result.why})"}
    if isinstance(result, tuple) and (why := limits.too_many_subcommands(len(result))):
        return {key: why}
    return {key: result}


def _split(budget_s: float, command: str, powershell: bool, limits: Limits) -> Judged:
    """The command split and, when it can be judged, read ahead (its readings and the scripts
    they run), all in the thread: matching it on the event loop then finds the work done."""
    found = split_within(command, powershell, budget_s)
    if isinstance(found, tuple) and limits.too_many_subcommands(len(found)) is None:
        with judged({(command, powershell): found}, limits):
            read_ahead(command, powershell)
    return found


async def offload(tenant: str, budget_s: float, fn: Callable[..., T], *args: Any) -> T | Refused:
    """``fn(remaining_s, *args)`` in one of these threads, within ``budget_s`` from now (CPU-bound
    work on a large input: masking a record); :class:`Refused` when it cannot run in time."""
    try:
        async with asyncio.timeout(budget_s + 0.05):
            return await _threads.run(tenant, budget_s, fn, *args)
    except TimeoutError:
        return Refused(f"it was not done within {budget_s:g} s")


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


__all__ = ["Refused", "judge_command", "judged", "offload"]
