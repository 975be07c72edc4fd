"""``rule`` handlers: permission rules evaluated in-process, no subprocess.

What a rule handler answers (deny before ask before allow, the output per event) and how its
lists are compiled is :mod:`bus.policy.rulelists`; this runner applies it to one event.
"""

from __future__ import annotations

from bus.hooks.results import HandlerResult
from bus.policy.rulelists import compile_rules, decide_rules, evaluate_rules, rule_output
from bus.policy.schema import RuleHandler
from workers.handlers.context import HookContext


async def run_rule(ctx: HookContext) -> HandlerResult:
    """Run a ``rule`` handler."""
    handler = ctx.entry.handler
    assert isinstance(handler, RuleHandler)
    return decide_rules(compile_rules(handler), handler.reason, ctx.event, ctx.hook_input)


run = run_rule

__all__ = ["compile_rules", "evaluate_rules", "rule_output", "run", "run_rule"]
