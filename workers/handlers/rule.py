"""``rule`` handlers: permission rules evaluated in-process, no subprocess.

The ``deny``, ``ask`` and ``allow`` lists are checked in that order and the first rule that
matches the tool call decides. On PreToolUse the verdict is a ``permissionDecision``; on
PermissionRequest a ``decision.behavior`` (``ask`` has no equivalent there and yields no
decision); on the other tool events a ``deny`` becomes ``decision: "block"``. Events with
no tool call get no decision from a rule handler.

A rule pack runs on every tool call, so each list's shell rules are also compiled into one
alternation: a command that matches none of them is rejected with a single regex pass per
subcommand text, and the rules are only walked one by one to name the one that matched.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from bus.hooks.results import HandlerResult, Outcome
from bus.policy.schema import RuleHandler
from bus.rules.bashsplit import CACHED_COMMAND_CHARS, unjudged
from bus.rules.permissions import (
    SHELL_TOOLS,
    PermissionRule,
    RuleKind,
    parse_rule,
    rule_matches,
    shell_regex,
    shell_texts,
)
from workers.handlers.context import HookContext

_BLOCK_EVENTS = frozenset({"PostToolUse", "PostToolUseFailure"})
_VERDICTS: tuple[RuleKind, ...] = ("deny", "ask", "allow")


@dataclasses.dataclass(frozen=True)
class ShellRules:
    """One list's rules for one shell tool as a single alternation, one named group per rule."""

    combined: re.Pattern[str]
    rules: tuple[tuple[PermissionRule, str], ...]
    #: The list's rules that are not plain shell patterns for this tool.
    others: tuple[tuple[PermissionRule, str], ...]


@dataclasses.dataclass(frozen=True)
class RuleList:
    """One verdict's rules, with a compiled fast path per shell tool."""

    verdict: RuleKind
    rules: tuple[tuple[PermissionRule, str], ...]
    shell: dict[str, ShellRules]

    def first_match(self, tool_name: str, tool_input: dict[str, Any], cwd: str | None) -> str | None:
        candidates = self.rules
        shell = self.shell.get(tool_name)
        if shell is not None and self.verdict != "allow":
            command = tool_input.get("command")
            texts = None
            powershell = tool_name == "PowerShell"
            if isinstance(command, str) and unjudged(command, powershell) is None:
                texts = (
                    _texts(command, powershell)
                    if len(command) <= CACHED_COMMAND_CHARS
                    else _sorted_texts(command, powershell)
                )
            if texts is not None:  # statically known: one regex pass per subcommand text decides
                for text in texts:
                    found = shell.combined.fullmatch(text)
                    if found is not None and found.lastgroup is not None:
                        return shell.rules[int(found.lastgroup[1:])][1]
                candidates = shell.others
        for rule, text in candidates:
            if rule_matches(rule, tool_name, tool_input, cwd, kind=self.verdict):
                return text
        return None


def _sorted_texts(command: str, powershell: bool) -> tuple[str, ...] | None:
    """:func:`shell_texts` in a fixed order."""
    texts = shell_texts(command, powershell)
    return None if texts is None else tuple(sorted(texts))


#: Every deny and ask list of every rule handler on an event asks for the same command's texts:
#: all but the first ask cost a lookup (commands up to ``CACHED_COMMAND_CHARS`` only).
_texts = functools.lru_cache(maxsize=1024)(_sorted_texts)


def _is_shell_rule(rule: PermissionRule, tool: str) -> bool:
    """A plain shell pattern of ``tool`` that one regex matches in linear time."""
    return (
        rule.tool == tool
        and rule.content is not None
        and ":" not in rule.content.split(" ", 1)[0]
        and shell_regex(rule, tool == "PowerShell") is not None
    )


def _compile(verdict: RuleKind, texts: tuple[str, ...]) -> RuleList:
    rules = tuple((parse_rule(text), text) for text in texts)
    shell: dict[str, ShellRules] = {}
    for tool in SHELL_TOOLS:
        mine = tuple(item for item in rules if _is_shell_rule(item[0], tool))
        if mine:
            patterns = [shell_regex(rule, tool == "PowerShell") for rule, _ in mine]
            combined = re.compile(
                "|".join(f"(?P<r{i}>{p.pattern})" for i, p in enumerate(patterns) if p),
                patterns[0].flags if patterns[0] else 0,
            )
            others = tuple(item for item in rules if not _is_shell_rule(item[0], tool))
            shell[tool] = ShellRules(combined, mine, others)
    return RuleList(verdict, rules, shell)


def compile_rules(handler: RuleHandler) -> tuple[RuleList, ...]:
    """The handler's deny, ask and allow lists, compiled once."""
    return _compile_lists(tuple(handler.deny), tuple(handler.ask), tuple(handler.allow))


@functools.lru_cache(maxsize=1024)
def _compile_lists(deny: tuple[str, ...], ask: tuple[str, ...], allow: tuple[str, ...]) -> tuple[RuleList, ...]:
    return tuple(_compile(verdict, texts) for verdict, texts in zip(_VERDICTS, (deny, ask, allow), strict=True))


def evaluate_rules(handler: RuleHandler, hook_input: dict[str, Any]) -> tuple[str, str] | None:
    """``(verdict, rule text)`` of the first matching rule, deny before ask before allow."""
    tool_name = hook_input.get("tool_name")
    if not isinstance(tool_name, str):
        return None
    tool_input = hook_input.get("tool_input")
    if not isinstance(tool_input, dict):
        tool_input = {}
    cwd = hook_input.get("cwd") if isinstance(hook_input.get("cwd"), str) else None
    for rule_list in compile_rules(handler):
        found = rule_list.first_match(tool_name, tool_input, cwd)
        if found is not None:
            return rule_list.verdict, found
    return None


def rule_output(event: str, verdict: str, rule: str, reason: str | None, unjudged: str | None = None) -> dict[str, Any]:
    """The Claude Code output object for a rule verdict on ``event``; ``unjudged`` says why the
    input could not be judged (then only deny and ask rules meet it)."""
    text = f"{reason} (rule: {rule})" if reason else f"hookbus: {verdict} by rule {rule}"
    if unjudged:
        text += f"; {unjudged}, so it cannot be judged and meets every deny and ask rule of its tool"
    if event == "PreToolUse":
        return {
            "hookSpecificOutput": {
                "hookEventName": event,
                "permissionDecision": verdict,
                "permissionDecisionReason": text,
            }
        }
    if event == "PermissionRequest" and verdict in ("allow", "deny"):
        decision: dict[str, Any] = {"behavior": verdict}
        if verdict == "deny":
            decision["message"] = text
        return {"hookSpecificOutput": {"hookEventName": event, "decision": decision}}
    if event in _BLOCK_EVENTS and verdict == "deny":
        return {"decision": "block", "reason": text}
    return {}


async def run_rule(ctx: HookContext) -> HandlerResult:
    """Run a ``rule`` handler."""
    handler = ctx.entry.handler
    assert isinstance(handler, RuleHandler)
    found = evaluate_rules(handler, ctx.hook_input)
    if found is None:
        return HandlerResult(Outcome.OK, output={}, handler_type="rule")
    verdict, rule = found
    tool_name, tool_input = ctx.hook_input.get("tool_name"), ctx.hook_input.get("tool_input")
    command = tool_input.get("command") if tool_name in SHELL_TOOLS and isinstance(tool_input, dict) else None
    why = unjudged(command, tool_name == "PowerShell") if isinstance(command, str) else None
    return HandlerResult(
        Outcome.OK, output=rule_output(ctx.event, verdict, rule, handler.reason, why), handler_type="rule"
    )


run = run_rule

__all__ = ["compile_rules", "evaluate_rules", "rule_output", "run", "run_rule"]
