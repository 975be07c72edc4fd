"""The handler runners by type: which function runs a ``command``, a ``rule``, ..."""

from __future__ import annotations

from bus.policy import Policy
from bus.schema import CommandHandler
from bus.settings import Settings
from workers.command import run_command
from workers.context import HookContext, Runner
from workers.rule import run_rule
from bus.results import HandlerResult


async def _command(ctx: HookContext) -> HandlerResult:
    handler = ctx.entry.handler
    assert isinstance(handler, CommandHandler)
    return await run_command(
        handler, ctx.event, ctx.request.payload, ctx.hook_input,
        timeout_s=min(ctx.timeout_s, ctx.request.remaining_s()), event_id=ctx.request.event_id,
    )


def default_runners(settings: Settings, policy: Policy) -> dict[str, Runner]:
    """Runner per handler type for a dispatcher."""
    return {"command": _command, "rule": run_rule}


__all__ = ["default_runners"]
