"""The permission rules of a ``rule`` handler, compiled once and evaluated in-process.

The ``deny``, ``ask`` and ``allow`` lists are checked in that order and the first rule that
matches the tool call decides. On PreToolUse the verdict is a ``permissionDecision``; on
PermissionRequest a ``decision.behavior`` (``ask`` has no equivalent there and yields no
decision); on the other tool events a ``deny`` becomes ``decision: "block"``. Events with
no tool call get no decision from a rule handler.

A rule pack runs on every tool call, so each list is compiled once per tool: a shell tool's
plain patterns into one alternation per program they name (a subcommand text is matched only
against its own program's, and those whose program is a wildcard), a file tool's
path rules into one alternation per anchor (see :class:`bus.rules.paths.PathRules`). The
group that matched names the rule; the list's other rules are tried one by one, and only
those before it in the list, so the rule named is always the first that matches.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Hashable
from typing import Any, Final, NamedTuple, Protocol

from bus.dialects.mcpnames import TOOL_NAME_READINGS, tool_name_readings
from bus.hooks.results import HandlerResult, Outcome
from bus.policy import verdictcache
from bus.policy.ruleoutput import _decided, _output, _reason_text, rule_output
from bus.rules.paths import PathRules, agent_home
from bus.rules.permissions import (
    EDIT_TOOLS,
    READ_TOOLS,
    SHELL_TOOLS,
    Files,
    PermissionRule,
    RuleKind,
    parse_rule,
    path_rule,
    read_files,
    rule_applies,
    rule_matches,
    rule_param,
)
from bus.rules.shellread import ShellRead, read_shell
from bus.rules.shellrules import FLOATS_ANY, FLOATS_OPTION, shell_regex, shell_start, unreadable_code_unjudged

_VERDICTS: Final[tuple[RuleKind, ...]] = ("deny", "ask", "allow")
_FILE_TOOLS: Final = EDIT_TOOLS | READ_TOOLS


Rule = tuple[int, PermissionRule, str]  # position in its list, the rule, its text


@dataclasses.dataclass(frozen=True)
class ToolRules:
    """One list's rules for one tool: those one alternation decides (group ``r<position>``), the rest."""

    #: The list's rules whose tool part covers the tool, in list order.
    applicable: tuple[Rule, ...]
    #: A shell tool's plain patterns whose program is a wildcard (``mkfs*``) as one regex, or
    #: one that never matches (not for allow lists: every subcommand must match).
    shell: re.Pattern[str] | None = None
    #: The other plain patterns, one regex per program they name (``rm`` for ``rm -rf /``;
    #: lower case for PowerShell): a text is only matched against its first word's.
    by_program: dict[str, re.Pattern[str]] = dataclasses.field(default_factory=dict)
    #: The position of the first rule in :attr:`shell`: the one a command whose program is an
    #: expansion meets first.
    first_shell: int = 0
    #: For a reading with run-time expansions or that gets more words at run time (``git log
    #: $BRANCH``, ``xargs rm -rf``, :attr:`bus.rules.shellread.ShellRead.starts`):
    #: the first position of the patterns whose text before any ``*`` starts with each text
    #: that ends in a space, and the patterns whose first ``*`` takes what follows as
    #: ``<that text>.*`` in one regex; those whose ``*`` is followed by an option in another,
    #: tried on the starts before a ``--`` only (:meth:`bus.rules.shellrules.ShellPattern.extends`).
    start_prefixes: dict[str, int] = dataclasses.field(default_factory=dict)
    starts: re.Pattern[str] | None = None
    option_starts: re.Pattern[str] | None = None
    #: A file tool's path rules, one alternation per anchor.
    paths: PathRules | None = None
    #: The applicable rules the alternation does not decide, tried one by one.
    others: tuple[Rule, ...] = ()


#: Tools without a compiled form (MCP tools, ...) each keep their applicable rules, up to this many.
TOOLS_PER_LIST: Final = 256


@dataclasses.dataclass(frozen=True, eq=False)  # one list is itself only: its verdicts are kept by identity
class RuleList:
    """One verdict's rules, with a compiled fast path per tool."""

    verdict: RuleKind
    rules: tuple[Rule, ...]
    tools: dict[str, ToolRules]
    #: The parameters its rules may name (``Bash(timeout:...)``): what a call's kept verdict depends on.
    params: tuple[str, ...] = ()

    def first_match(
        self,
        tool_name: str,
        tool_input: dict[str, Any],
        cwd: str | None,
        home: str | None = None,
        shell: ShellRead | None = None,
        files: Files | None = None,
    ) -> str | None:
        """The text of the first rule of the list (in its order) that matches the call (``home``:
        the agent's, what ``~`` stands for; ``shell``: a shell tool's command, read; ``files``: a
        file tool's paths, read)."""
        compiled = self.tools.get(tool_name) or self._for_tool(tool_name)
        candidates = compiled.applicable
        found: int | None = None
        if compiled.shell is not None:
            view = shell if shell is not None else _read(tool_name, tool_input)
            if view is not None and view.unjudged is None:  # one regex pass per text decides, whatever the rules
                found = _shell_position(compiled, view.texts, tool_name == "PowerShell")
                if view.dynamic_program or (view.opaque and unreadable_code_unjudged()):
                    found = compiled.first_shell if found is None else min(found, compiled.first_shell)
                if view.starts or view.operand_starts:
                    found = _min(found, _first_start(compiled, view.starts, view.operand_starts))
                candidates = compiled.others
        elif compiled.paths is not None and cwd:
            files = files if files is not None else read_files(tool_name, tool_input, cwd, home)
            too_long, base, absolute = files.located()
            if not too_long and (len(files.paths) <= 1 or self.verdict != "allow"):
                first = compiled.paths.first_at
                positions = [p for p in (first(path, base, home) for path in absolute) if p is not None]
                found = min(positions, default=None)
                candidates = compiled.others
        for position, rule, text in candidates:
            if found is not None and position > found:
                break
            if rule_matches(rule, tool_name, tool_input, cwd, kind=self.verdict, home=home, shell=shell):
                return text
        return None if found is None else self.rules[found][2]

    def _for_tool(self, tool_name: str) -> ToolRules:
        found = ToolRules(tuple(item for item in self.rules if rule_applies(item[1], tool_name, self.verdict)))
        if len(self.tools) < TOOLS_PER_LIST:
            self.tools[tool_name] = found
        return found


def _read(tool_name: str, tool_input: dict[str, Any]) -> ShellRead | None:
    """A shell tool's command, read (:func:`bus.rules.shellread.read_shell`); ``None`` for another
    tool or without a command."""
    command = tool_input.get("command")
    if tool_name not in SHELL_TOOLS or not isinstance(command, str):
        return None
    return read_shell(command, tool_name == "PowerShell")


def _shell_position(compiled: ToolRules, texts: tuple[str, ...], powershell: bool) -> int | None:
    """The first position of a plain shell pattern that matches one of ``texts``."""
    assert compiled.shell is not None
    best = _first_position(compiled.shell, texts)
    for text in texts:
        program = text.split(" ", 1)[0]
        combined = compiled.by_program.get(program.lower() if powershell else program)
        if combined is not None and (found := _first_position(combined, (text,))) is not None:
            best = found if best is None else min(best, found)
    return best


def _program_of(content: str) -> str | None:
    """The program a pattern names when it is literal (``rm`` for ``rm -rf /``), else ``None``:
    a text it matches starts with that word followed by a space, or is that word."""
    head = " ".join(content.split()).split(" ", 1)[0]
    return None if not head or "*" in head or ":" in head else head


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _first_start(compiled: ToolRules, starts: tuple[str, ...], operand_starts: tuple[str, ...]) -> int | None:
    """The first pattern that a text starting with one of ``starts`` can match (or one of
    ``operand_starts``, whose words to come are no options)."""
    every = starts + operand_starts
    best = _first_position(compiled.starts, every) if compiled.starts is not None else None
    if compiled.option_starts is not None:
        best = _min(best, _first_position(compiled.option_starts, starts))
    for start in every:
        best = _min(best, compiled.start_prefixes.get(start))
    return best


def _first_position(combined: re.Pattern[str], texts: tuple[str, ...]) -> int | None:
    best: int | None = None
    for text in texts:
        found = combined.fullmatch(text)
        if found is not None and found.lastgroup is not None:
            position = int(found.lastgroup[1:])
            best = position if best is None else min(best, position)
    return best


def _is_shell_rule(rule: PermissionRule, tool: str) -> bool:
    """A plain shell pattern of ``tool`` that one regex matches in linear time."""
    return (
        rule.tool == tool
        and rule.content is not None
        and ":" not in rule.content.split(" ", 1)[0]
        and rule.content.strip() != "*"  # matches even a command of no subcommands: tried on its own
        and shell_regex(rule.content, tool == "PowerShell") is not None
    )


def _shell_rules(verdict: RuleKind, applicable: tuple[Rule, ...], tool: str) -> ToolRules | None:
    mine = [item for item in applicable if _is_shell_rule(item[1], tool)]
    if not mine or verdict == "allow":
        return None
    powershell = tool == "PowerShell"
    patterns = [(position, rule, shell_regex(rule.content or "*", powershell)) for position, rule, _ in mine]
    flags = next((p.flags for _, _, p in patterns if p is not None), 0)
    branches: dict[str | None, list[str]] = {}
    for position, rule, p in patterns:
        if p is not None:
            program = _program_of(rule.content or "*")
            key = program.lower() if program is not None and powershell else program
            branches.setdefault(key, []).append(f"(?P<r{position}>{p.pattern})")
    rest = branches.pop(None, None)
    combined = re.compile("|".join(rest) if rest else "(?!)", flags)
    chosen = {position for position, _, _ in patterns}
    prefixes: dict[str, int] = {}
    starred: dict[str, list[str]] = {FLOATS_ANY: [], FLOATS_OPTION: []}
    for position, rule, _ in mine:
        first, floats = shell_start(rule.content or "*", powershell)
        for end in (k + 1 for k, c in enumerate(first[:-1]) if c == " "):  # a start ends in a space, before `*`
            prefixes.setdefault(first[:end], position)  # the rules come in order: the first one stays
        if floats in starred:
            starred[floats].append(f"(?P<r{position}>{re.escape(first)}.*)")
    return ToolRules(
        applicable,
        shell=combined,
        by_program={program: re.compile("|".join(found), flags) for program, found in branches.items() if program},
        first_shell=min(chosen),
        start_prefixes=prefixes,
        starts=re.compile("|".join(starred[FLOATS_ANY]), flags) if starred[FLOATS_ANY] else None,
        option_starts=re.compile("|".join(starred[FLOATS_OPTION]), flags) if starred[FLOATS_OPTION] else None,
        others=tuple(item for item in applicable if item[0] not in chosen),
    )


def _path_rules(verdict: RuleKind, applicable: tuple[Rule, ...], tool: str) -> ToolRules | None:
    mine = [(position, rule.content or "") for position, rule, _ in applicable if path_rule(rule, tool, verdict)]
    if not mine:
        return None
    chosen = {position for position, _ in mine}
    paths = PathRules.compile(mine, verdict in ("deny", "ask"))
    return ToolRules(applicable, paths=paths, others=tuple(item for item in applicable if item[0] not in chosen))


def compile_list(verdict: RuleKind, texts: tuple[str, ...]) -> RuleList:
    """One verdict's rules compiled (:func:`compile_lists` keeps them)."""
    rules = tuple((position, parse_rule(text), text) for position, text in enumerate(texts))
    tools: dict[str, ToolRules] = {}
    for tool in SHELL_TOOLS | EDIT_TOOLS | READ_TOOLS:
        applicable = tuple(item for item in rules if rule_applies(item[1], tool, verdict))
        compile_tool = _shell_rules if tool in SHELL_TOOLS else _path_rules
        tools[tool] = compile_tool(verdict, applicable, tool) or ToolRules(applicable)
    params = tuple(sorted({name for _, rule, _ in rules if (name := rule_param(rule)) is not None}))
    return RuleList(verdict, rules, tools, params)


class RuleLists(Protocol):
    """A ``rule`` handler's lists, as the policy holds them."""

    deny: list[str]
    ask: list[str]
    allow: list[str]


def compile_rules(handler: RuleLists) -> tuple[RuleList, ...]:
    """The handler's deny, ask and allow lists, compiled once."""
    return compile_lists(tuple(handler.deny), tuple(handler.ask), tuple(handler.allow))


@functools.lru_cache(maxsize=1024)
def compile_lists(deny: tuple[str, ...], ask: tuple[str, ...], allow: tuple[str, ...]) -> tuple[RuleList, ...]:
    """The deny, ask and allow lists compiled, the empty ones left out (kept for the most recent
    1024 handlers' lists)."""
    verdictcache.forget()  # kept verdicts hold their lists: none outlives a reload
    lists = zip(_VERDICTS, (deny, ask, allow), strict=True)
    return tuple(compile_list(verdict, texts) for verdict, texts in lists if texts)


def first_verdict(
    lists: tuple[RuleList, ...], hook_input: dict[str, Any], call: Call | None = None
) -> tuple[str, str] | None:
    """``(verdict, rule text)`` of the first matching rule of ``lists``, deny before ask before allow
    (``call``: :func:`read_call` of ``hook_input``, when the caller has it).

    An MCP tool whose name may be read several ways (:func:`bus.dialects.mcpnames.tool_name_readings`)
    meets a deny or ask rule that matches any reading, an allow rule only one that matches each."""
    return _verdict_and_read(lists, hook_input, call)[0]


class Call(NamedTuple):
    """What every rule list of an event reads of its tool call, read once for all its handlers."""

    tool_name: str
    tool_input: dict[str, Any]
    cwd: str | None
    home: str | None
    others: tuple[str, ...]
    shell: ShellRead | None
    subject: Hashable  # verdictcache.call_subject; None for an MCP tool read several ways


def read_call(hook_input: dict[str, Any]) -> Call | None:
    """The tool call of ``hook_input`` as rule lists read it; ``None`` when it names no tool."""
    return read_call_files(hook_input)[0]


def read_call_files(hook_input: dict[str, Any]) -> tuple[Call | None, Files | None]:
    """:func:`read_call`, and a file tool's paths as its path rules read them (with a cwd; else
    ``None``), for all the event's handlers."""
    tool_name = hook_input.get("tool_name")
    if not isinstance(tool_name, str):
        return None, None
    tool_input = hook_input.get("tool_input")
    if not isinstance(tool_input, dict):
        tool_input = {}
    command = tool_input.get("command") if tool_name in SHELL_TOOLS else None
    shell = read_shell(command, tool_name == "PowerShell") if isinstance(command, str) else None
    cwd = hook_input.get("cwd")
    cwd = cwd if isinstance(cwd, str) else None
    others = tool_name_readings(hook_input) if TOOL_NAME_READINGS in hook_input else ()
    home = agent_home(hook_input)
    files = read_files(tool_name, tool_input, cwd, home) if cwd and tool_name in _FILE_TOOLS else None
    paths = files.paths if files is not None else None
    subject = None if others else verdictcache.call_subject(tool_name, tool_input, cwd, shell, paths)
    return Call(tool_name, tool_input, cwd, home, others, shell, subject), files


def _verdict_and_read(
    lists: tuple[RuleList, ...], hook_input: dict[str, Any], call: Call | None = None, files: Files | None = None
) -> tuple[tuple[str, str] | None, ShellRead | None]:
    """:func:`first_verdict`, and the shell command read (once: every list matches that read);
    ``call`` and ``files``: :func:`read_call_files` of ``hook_input``, when the caller has them."""
    if call is None:
        call, files = read_call_files(hook_input)
        if call is None:
            return None, None
    tool_name, tool_input, cwd, home, others, shell, subject = call
    key = None if others else verdictcache.call_key(lists, tool_name, tool_input, cwd, home, shell, subject)
    found = verdictcache.kept(key) if key is not None else None
    if found is not None:
        return found[0], shell
    verdict = _first_verdict(lists, tool_name, tool_input, cwd, home, shell, others, files)
    if key is not None:
        verdictcache.keep(key, verdict)
    return verdict, shell


def _first_verdict(
    lists: tuple[RuleList, ...],
    tool_name: str,
    tool_input: dict[str, Any],
    cwd: str | None,
    home: str | None,
    shell: ShellRead | None,
    others: tuple[str, ...],
    files: Files | None = None,
) -> tuple[str, str] | None:
    for rule_list in lists:
        found = rule_list.first_match(tool_name, tool_input, cwd, home, shell, files)
        if others and rule_list.verdict == "allow":
            if found is not None and all(rule_list.first_match(n, tool_input, cwd, home) for n in others):
                return rule_list.verdict, found
            continue
        readings = iter(others)
        while found is None and (name := next(readings, None)) is not None:
            found = rule_list.first_match(name, tool_input, cwd, home)
        if found is not None:
            return rule_list.verdict, found
    return None


def evaluate_rules(handler: RuleLists, hook_input: dict[str, Any]) -> tuple[str, str] | None:
    """``(verdict, rule text)`` of the handler's first matching rule, deny before ask before allow."""
    return first_verdict(compile_rules(handler), hook_input)


def decide_rules(
    lists: tuple[RuleList, ...],
    reason: str | None,
    event: str,
    hook_input: dict[str, Any],
    call: Call | None = None,
    files: Files | None = None,
    note: str = "",
) -> HandlerResult:
    """What a ``rule`` handler with these lists answers to ``event``: its output, and its
    decision as merging it alone would make it (:attr:`HandlerResult.decided`); ``call`` and
    ``files``: :func:`read_call_files` of ``hook_input``, read once for all the event's handlers;
    ``note``: added to the reason of an answer (:func:`bus.hooks.results.with_note`)."""
    found, shell = _verdict_and_read(lists, hook_input, call, files)
    if found is None:
        return HandlerResult(Outcome.OK, output={}, handler_type="rule")
    verdict, rule = found
    # the note goes where with_note() would add it: every place the text is put
    text = _reason_text(verdict, rule, reason, shell.unjudged if shell is not None else None) + note
    output, decided = _output(event, verdict, text), _decided(event, verdict, text)
    return HandlerResult(Outcome.OK, output=output, handler_type="rule", decided=decided, rule=rule)


__all__ = [
    "Call",
    "RuleList",
    "RuleLists",
    "ToolRules",
    "compile_list",
    "compile_lists",
    "compile_rules",
    "decide_rules",
    "evaluate_rules",
    "first_verdict",
    "read_call",
    "read_call_files",
    "rule_output",
]
