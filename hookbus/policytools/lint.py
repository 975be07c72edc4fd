"""``hookbus policy lint``: what a valid policy can still get wrong, each with its file and line.

``policy check`` says whether a policy loads; lint says where it will not do what it says:

* ``unreachable-rule`` (error): a rule that can never decide, because a stronger rule that
  covers it runs on the same calls (an ``allow`` under a ``deny`` of the same or a wider
  pattern, in its own handler or in another one its matcher reaches), or because its tool
  is not one its group's matcher lets through;
* ``redundant-rule`` (warning): a rule after one of its own list that covers it (a rule after
  a ``*``): it is never the first match;
* ``unknown-tool`` (warning): a matcher naming no tool that Claude Code or any supported
  agent has (agents' tools arrive under Claude Code's names, :mod:`bus.dialects`);
* ``duplicate-handler`` (warning): the same handler listed twice (it runs once);
* ``if-never-matches`` (error): an ``if`` whose tool its group's matcher never lets through,
  or an ``if`` on an event that never evaluates one;
* ``ask-unsupported``: an ``ask`` where an agent the handler runs for cannot ask, from the
  dialects' declarations (an error where the agent cannot, a warning where it can in part);
* ``timeout-past-deadline`` (warning): a timeout longer than the event's deadline;
* ``async-decision`` (error): ``async`` on a handler whose answer is a decision (a ``rule``,
  ``prompt`` or ``agent`` handler): async handlers never decide;
* ``unread-counter`` (warning): a session counter no ``when:`` or budget reads (``policy check``'s
  note). What ``policy check`` refuses in session policy (an unknown fact or counter, a fact no
  event sets, a counter that counts no event, a condition that can never hold) fails lint too,
  each with its file and line.

Covering is worked out on the rules' text: ``Tool`` and ``Tool(*)`` cover every call of the
tool, and ``Tool(a*)`` covers ``Tool(ab *)`` (``*`` of the covering rule stands for any text).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Literal

from bus.dialects import DIALECTS
from bus.dialects.base import Support
from bus.errors import PolicyError
from bus.hooks.events import IF_EVENTS, event_spec
from bus.hooks.matching import Matcher, compile_matcher
from bus.policy.loading import HandlerEntry, Policy, PolicyFile, merge_policy, read_policy_files
from bus.policy.packs import pack_sources
from bus.policy.schema import Loc, RuleHandler
from bus.rules.permissions import PermissionRule, parse_rule
from hookbus.policytools.cases import line_map, line_of

Severity = Literal["error", "warning"]
#: Claude Code's built-in tools (the reference's list, with older names still seen).
CLAUDE_TOOLS: Final = frozenset(
    "Bash PowerShell Edit MultiEdit Write Read Glob Grep LS NotebookEdit NotebookRead Agent Task Workflow "
    "WebFetch WebSearch AskUserQuestion ExitPlanMode SubagentHandback TodoWrite Skill SlashCommand "
    "BashOutput KillShell KillBash".split()
)
#: ``policy check``'s notes that lint reports as warnings: what the note says, and the finding's rule.
_NOTED: Final = (("is not read by any when: or budget", "unread-counter"),)
_NOTE: Final = re.compile(r"(?P<file>.+?)(?::(?P<line>\d+))?: (?P<message>.*)")
#: Decision strength of a rule list: a stronger list's match wins the merge.
_STRENGTH: Final = {"deny": 3, "ask": 2, "allow": 1}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing lint found."""

    file: str
    line: int | None
    severity: Severity
    rule: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.severity}: {self.message} [{self.rule}]"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def known_tools() -> frozenset[str]:
    """Every tool name a handler can see: Claude Code's, and every dialect's tools in Claude Code's terms."""
    found = set(CLAUDE_TOOLS)
    for dialect in DIALECTS.values():
        found.update(dialect.tools.values())
    return frozenset(found)


@functools.lru_cache(maxsize=4096)
def _pattern(content: str) -> re.Pattern[str]:
    text = content[:-2] + " *" if content.endswith(":*") else content  # the legacy prefix form
    return re.compile(".*".join(re.escape(part) for part in re.split(r"\*+", text)), re.DOTALL)


def covers(wide: PermissionRule, narrow: PermissionRule) -> bool:
    """Whether every call ``narrow`` matches is matched by ``wide`` too (judged on their text)."""
    if wide.tool != narrow.tool:
        return False
    if wide.content is None or wide.content.strip("*") == "":
        return True
    if narrow.content is None:
        return False
    if wide.content.endswith(" *") and narrow.content == wide.content[:-2]:
        return True  # `git push *` also matches a bare `git push`
    if wide.tool in ("Read", "Edit") and _anchor(wide.content) != _anchor(narrow.content):
        return False  # `**/id_rsa` is below the cwd, `//**/id_rsa` anywhere, `~/x` below home
    return _pattern(wide.content).fullmatch(narrow.content) is not None


def _anchor(content: str) -> str:
    content = content.strip()
    if content.startswith("//"):
        return "root"
    return "home" if content == "~" or content.startswith("~/") else "cwd"


@dataclasses.dataclass(frozen=True)
class _Rule:
    entry: HandlerEntry
    kind: str
    index: int
    text: str
    rule: PermissionRule

    @property
    def loc(self) -> Loc:
        return (*_loc(self.entry), self.kind, self.index)


def _loc(entry: HandlerEntry) -> Loc:
    return ("hooks", entry.event, entry.group_index, "hooks", entry.handler_index)


def _matcher(entry: HandlerEntry) -> Matcher:
    return compile_matcher(entry.matcher, entry.event)


class _Linter:
    def __init__(self, files: Sequence[PolicyFile], policy: Policy) -> None:
        self.files, self.policy = files, policy
        self.lines = {f.source: line_map(f.text) for f in files}
        self.lines_of_files = frozenset(self.lines)
        self.lines.update({source: line_map(text) for f in files for source, text in pack_sources(f.packs)})
        self.findings: list[Finding] = []
        self.tools = known_tools()

    def add(self, source: str, loc: Loc, severity: Severity, rule: str, message: str) -> None:
        self.findings.append(Finding(source, line_of(self.lines.get(source, {}), loc), severity, rule, message))

    def line(self, item: _Rule) -> int | None:
        return line_of(self.lines.get(item.entry.source, {}), item.loc)

    def run(self) -> list[Finding]:
        entries = [entry for f in self.files for entry in f.entries]
        seen: dict[str, HandlerEntry] = {}
        for entry in entries:
            if (first := seen.setdefault(entry.handler_id, entry)) is not entry:
                if entry.source == first.source and entry.source not in self.lines_of_files:
                    continue  # a pack two files include: it runs once, as it should
                where = f"{first.source}:{line_of(self.lines[first.source], _loc(first))}"
                self.add(
                    entry.source,
                    _loc(entry),
                    "warning",
                    "duplicate-handler",
                    f"the same handler as {where}: it runs once",
                )
                continue
            self.handler(entry)
        self.rules([entry for entry in entries if seen[entry.handler_id] is entry])
        for note in (note for f in self.files for note in f.notes):
            rule = next((rule for text, rule in _NOTED if text in note), None)
            if rule is not None and (found := _NOTE.fullmatch(note)) is not None:
                line = int(found["line"]) if found["line"] else None
                self.findings.append(Finding(found["file"], line, "warning", rule, found["message"]))
        return sorted(self.findings, key=lambda f: (f.file, f.line or 0))

    def handler(self, entry: HandlerEntry) -> None:
        handler, event, loc = entry.handler, entry.event, _loc(entry)
        spec = event_spec(event)
        if spec.matcher_field == "tool_name" and entry.matcher is not None:
            self.matcher(entry)
        if handler.if_ is not None:
            self.condition(entry)
        runs_for = handler.agents or self.policy.settings.agents or ()
        if _asks(entry):
            for agent in runs_for:
                capability = DIALECTS[agent].capabilities["ask"]
                if capability.support is not Support.YES:
                    severity: Severity = "error" if capability.support is Support.NO else "warning"
                    note = f": {capability.note}" if capability.note else ""
                    message = f"asks, and {agent} cannot ask ({capability.support.value}{note})"
                    self.add(entry.source, (*loc, "ask"), severity, "ask-unsupported", message)
        deadline_s = self.policy.settings.deadline_for(event)
        if handler.timeout is not None and spec.blocking and not handler.async_ and handler.timeout > deadline_s:
            message = (
                f"timeout {handler.timeout:g} s is longer than {event}'s deadline of {deadline_s:g} s: "
                "the handler is cut off at the deadline"
            )
            self.add(entry.source, (*loc, "timeout"), "warning", "timeout-past-deadline", message)
        if handler.async_ and handler.type in ("rule", "prompt", "agent"):
            message = f"async on a {handler.type} handler: its answer is a decision, and async handlers never decide"
            self.add(entry.source, (*loc, "async"), "error", "async-decision", message)

    def matcher(self, entry: HandlerEntry) -> None:
        matcher = _matcher(entry)
        loc = ("hooks", entry.event, entry.group_index, "matcher")
        if matcher.kind == "exact":
            for name in sorted(matcher.names):
                if name.startswith("mcp__") and "__" in name[5:]:
                    continue
                if name not in self.tools:
                    why = " (an MCP server's tools need a regex: mcp__server__.*)" if name.startswith("mcp__") else ""
                    message = f"matcher {name!r} names no tool that Claude Code or any supported agent has{why}"
                    self.add(entry.source, loc, "warning", "unknown-tool", message)
        elif matcher.kind == "regex" and "mcp" not in (matcher.source or ""):
            if not any(matcher.matches(tool) for tool in self.tools):
                message = f"matcher {matcher.source!r} matches no tool that Claude Code or any supported agent has"
                self.add(entry.source, loc, "warning", "unknown-tool", message)

    def condition(self, entry: HandlerEntry) -> None:
        loc = (*_loc(entry), "if")
        if entry.event not in IF_EVENTS:
            message = f"'if' is evaluated only on tool events: this handler never runs on {entry.event}"
            self.add(entry.source, loc, "error", "if-never-matches", message)
            return
        try:
            rule = parse_rule(str(entry.handler.if_))
        except ValueError:
            return  # policy check reports it
        if not _matcher(entry).matches(rule.tool):
            message = (
                f"if {entry.handler.if_!r} is about {rule.tool}, which matcher {entry.matcher!r} never lets through"
            )
            self.add(entry.source, loc, "error", "if-never-matches", message)

    def rules(self, entries: list[HandlerEntry]) -> None:
        found: list[_Rule] = []
        for entry in entries:
            if isinstance(entry.handler, RuleHandler):
                for kind in ("deny", "ask", "allow"):
                    for i, text in enumerate(getattr(entry.handler, kind)):
                        try:
                            found.append(_Rule(entry, kind, i, text, parse_rule(text)))
                        except ValueError:
                            pass  # policy check reports it
        for item in found:
            tool, matcher = item.rule.tool, item.entry.matcher
            if event_spec(item.entry.event).matcher_field == "tool_name" and not _matcher(item.entry).matches(tool):
                message = f"{item.kind} rule {item.text!r} never applies: matcher {matcher!r} never lets {tool} through"
                self.add(item.entry.source, item.loc, "error", "unreachable-rule", message)
                continue
            if (wider := self.stronger(item, found)) is not None:
                where = f"{wider.entry.source}:{self.line(wider)}"
                covering = f"{wider.kind} rule {wider.text!r} ({where})"
                message = f"{item.kind} rule {item.text!r} never decides: {covering} covers it"
                self.add(item.entry.source, item.loc, "error", "unreachable-rule", message)
            elif (earlier := _earlier(item, found)) is not None:
                message = f"{item.kind} rule {item.text!r} is never the first match: {earlier.text!r} above covers it"
                self.add(item.entry.source, item.loc, "warning", "redundant-rule", message)

    def stronger(self, item: _Rule, found: list[_Rule]) -> _Rule | None:
        """A rule of a stronger list that covers ``item`` and runs whenever it does."""
        for other in found:
            if _STRENGTH[other.kind] <= _STRENGTH[item.kind] or other.entry.event != item.entry.event:
                continue
            if other.entry is not item.entry and not _runs_whenever(other.entry, item):
                continue
            if covers(other.rule, item.rule):
                return other
        return None


def _runs_whenever(entry: HandlerEntry, item: _Rule) -> bool:
    """Whether ``entry`` runs on every call that ``item``'s handler judges with ``item``."""
    handler, theirs = entry.handler, item.entry.handler
    if handler.shadow or handler.async_ or handler.if_ is not None or handler.once:
        return False
    if handler.agents is not None and not set(theirs.agents or DIALECTS) <= set(handler.agents):
        return False
    return _matcher(entry).matches(item.rule.tool)


def _earlier(item: _Rule, found: list[_Rule]) -> _Rule | None:
    for other in found:
        if other.entry is item.entry and other.kind == item.kind and other.index < item.index:
            if covers(other.rule, item.rule):
                return other
    return None


def _asks(entry: HandlerEntry) -> bool:
    """Whether ``entry`` asks for sure: a rule handler's ``ask`` list on PreToolUse, enforced.

    A command, http or function handler *may* ask; ``hookbus policy check`` warns about those."""
    handler = entry.handler
    return isinstance(handler, RuleHandler) and bool(handler.ask) and entry.event == "PreToolUse" and not handler.shadow


def lint_files(paths: Sequence[str | Path]) -> list[Finding]:
    """Every finding in the policy files at ``paths`` (layered in order); raises PolicyError when they do not load."""
    files = read_policy_files(list(paths))
    if problems := [problem for f in files for problem in f.problems]:
        raise PolicyError(problems)
    return _Linter(files, merge_policy(files)).run()


__all__ = ["CLAUDE_TOOLS", "Finding", "covers", "known_tools", "lint_files"]
