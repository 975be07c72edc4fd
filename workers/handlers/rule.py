"""``rule`` handlers: permission rules evaluated in-process, no subprocess.

The ``deny``, ``ask`` and ``allow`` lists are checked in that order and the first rule that
matches the tool call decides. On PreToolUse the verdict is a ``permissionDecision``; on
PermissionRequest a ``decision.behavior`` (``ask`` has no equivalent there and yields no
decision); on the other tool events a ``deny`` becomes ``decision: "block"``. Events with
no tool call get no decision from a rule handler.

A rule pack runs on every tool call, so each list is compiled once per tool: a shell tool's
plain patterns into one alternation (a single regex pass per subcommand text), a file tool's
path rules into one alternation per anchor (see :class:`bus.rules.paths.PathRules`). The
group that matched names the rule; the list's other rules are tried one by one, and only
those before it in the list, so the rule named is always the first that matches.
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
