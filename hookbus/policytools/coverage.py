"""``hookbus policy coverage``: which handlers and rules of a policy decided real traffic.

The records of a window of the decision log are read (as ``hookbus audit export`` reads
them) and set against the policy: each record lists the handlers that ran on its event
(``hooks``, by handler id) and marks those that made the decision (``decided``). For each
handler and each rule of a ``rule`` handler the report counts the events it *decided* and
those it *matched without deciding* (it ran, or its rule was the first to match, and
another handler's answer won, or it was shadow); then the handlers and rules that never
matched in the window, and the tools seen in traffic that no handler of the policy covers.

Which rule of a ``rule`` handler matched is worked out again from the recorded input (the
log's, masked where the log masks), under the policy's ``hookbus.limits`` and the split budget of
a live decision (:mod:`hookbus.replay.judging`): an input that cannot be judged meets the deny
and ask rules, as it did live, and is counted apart. Records written before the log marked
deciders count a handler as deciding when its own answer is the recorded decision (a rule's, or
an exit 2). A report given a time budget stops reading at its end and says it is partial.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

from bus.decisionlog.audit import RecordFilter, Window, read_window
from bus.hooks.decisions import Decision
from bus.hooks.events import event_spec
from bus.hooks.merge import merge_results
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.loading import HandlerEntry, Policy
from bus.policy.packs import pack_sources
from bus.policy.schema import RuleHandler
from bus.redis.connection import connect, redis_errors
from bus.redis.keys import Keyspace
from bus.stream.protocol import LogRecord
from hookbus.policytools.cases import line_map, line_of
from hookbus.policytools.runner import handler_labels
from hookbus.replay.judging import Budget, Logged, Unjudged, judge_logged
from workers.engine.evaluation import selected
from workers.handlers.rule import evaluate_rules, rule_output


@dataclasses.dataclass
class Counted:
    """How often one handler or rule took part: decided, or matched without deciding."""

    label: str
    where: str
    decided: int = 0
    matched: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class CoverageReport:
    """What the window's traffic exercised of one policy."""

    revision: str
    sources: list[str]
    since_ms: int | None
    until_ms: int | None
    tenants: list[str]
    events: int = 0
    handlers: dict[str, Counted] = dataclasses.field(default_factory=dict)
    rules: dict[tuple[str, str, str], Counted] = dataclasses.field(default_factory=dict)
    #: Tool events per tool name, and those of them that no handler of the policy would run on.
    tools: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    uncovered: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    #: Handler ids in the log that the policy does not have (another revision's, or plugins).
    other_handlers: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    #: Records whose input cannot be judged (too long, too deep, not split in time).
    unjudged: Unjudged = dataclasses.field(default_factory=Unjudged)
    #: The time budget, and why the report stopped before the end of the window (``partial``), if it did.
    budget_s: float | None = None
    stopped: str | None = None

    @property
    def partial(self) -> bool:
        return self.stopped is not None

    @property
    def never_matched(self) -> list[Counted]:
        every = [*self.handlers.values(), *self.rules.values()]
        return [c for c in every if not c.decided and not c.matched]

    def uncovered_tools(self) -> list[tuple[str, int]]:
        """Tools seen in traffic on which no handler ever ran, most frequent first."""
        return [(tool, n) for tool, n in self.uncovered.most_common() if n == self.tools[tool]]

    def to_json(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "sources": self.sources,
            "since_ms": self.since_ms,
            "until_ms": self.until_ms,
            "tenants": self.tenants,
            "events": self.events,
            "partial": self.partial,
            "stopped": self.stopped,
            "budget_s": self.budget_s,
            "unjudged": self.unjudged.to_json(),
            "handlers": [{"id": hid, **c.to_json()} for hid, c in self.handlers.items()],
            "rules": [
                {"handler": hid, "kind": kind, "rule": text, **c.to_json()}
                for (hid, kind, text), c in self.rules.items()
            ],
            "never_matched": [c.to_json() for c in self.never_matched],
            "uncovered_tools": [{"tool": tool, "events": n} for tool, n in self.uncovered_tools()],
            "other_handlers": dict(self.other_handlers),
        }

    def to_text(self) -> str:
        scope = ", ".join(self.tenants) or "all tenants"
        lines = [
            f"coverage of revision {self.revision} ({', '.join(self.sources)}) by {self.events} logged events ({scope})"
        ]
        if self.stopped:
            lines.append(f"partial: {self.stopped}")
        if self.unjudged.events:
            lines.append(self.unjudged.to_text())
        width = max((len(c.where) + len(c.label) for c in [*self.handlers.values(), *self.rules.values()]), default=20)
        lines.append(f"{'handlers':<{width + 3}} {'decided':>8} {'matched':>8}")
        lines += [_row(c, width) for c in self.handlers.values()]
        if self.rules:
            lines.append("rules")
            lines += [_row(c, width) for c in self.rules.values()]
        never = self.never_matched
        lines.append(f"never matched: {len(never)}")
        lines += [f"  {c.where} {c.label}" for c in never]
        uncovered = self.uncovered_tools()
        lines.append(f"tools no handler covers: {len(uncovered)}")
        lines += [f"  {tool} ({n} events)" for tool, n in uncovered]
        if self.other_handlers:
            lines.append(f"handlers in the log that this policy does not have: {len(self.other_handlers)}")
        return "\n".join(lines)


def _row(counted: Counted, width: int) -> str:
    name = f"{counted.where} {counted.label}"
    return f"  {name:<{width + 1}} {counted.decided:>8} {counted.matched:>8}"


def _label(entry: HandlerEntry) -> str:
    handler = entry.handler
    names = [handler.reason] if isinstance(handler, RuleHandler) and handler.reason else sorted(handler_labels(entry))
    what = f" {names[0][:60]}" if names else ""
    matcher = f"[{entry.matcher}]" if entry.matcher not in (None, "", "*") else ""
    return f"{entry.event}{matcher} {entry.handler.type}{what} [{entry.handler_id[:8]}]"


class _Counter:
    def __init__(self, policy: Policy, report: CoverageReport) -> None:
        self.policy, self.report = policy, report
        lines = {f.source: line_map(f.text) for f in policy.files}
        lines.update({source: line_map(text) for f in policy.files for source, text in pack_sources(f.packs)})
        for event in sorted(policy.events()):
            for entry in policy.entries(event):
                loc: tuple[str | int, ...] = ("hooks", event, entry.group_index, "hooks", entry.handler_index)
                where = f"{entry.source}:{line_of(lines.get(entry.source, {}), loc)}"
                report.handlers[entry.handler_id] = Counted(_label(entry), where)
                if isinstance(entry.handler, RuleHandler):
                    for kind in ("deny", "ask", "allow"):
                        for i, text in enumerate(getattr(entry.handler, kind)):
                            at = line_of(lines.get(entry.source, {}), (*loc, kind, i))
                            key = (entry.handler_id, kind, text)
                            report.rules[key] = Counted(f"{kind} {text}", f"{entry.source}:{at}")

    def add(self, log_id: str, record: LogRecord, logged: Logged | None) -> None:
        """Count one record; ``logged`` is its input as judged (``None``: not a JSON object)."""
        self.report.events += 1
        if logged is None:
            self._add(record, {})
            return
        if logged.unjudged is not None:
            self.report.unjudged.add(log_id, record, logged.unjudged)
        with logged.judged():
            self._add(record, logged.hook_input if logged.evaluable else None)

    def _add(self, record: LogRecord, hook_input: dict[str, Any] | None) -> None:
        """Count one record; ``hook_input`` ``None``: it is not evaluated (only what the record says counts)."""
        for hook in record.hooks:
            handler_id = str(hook.get("id", ""))
            entry = self.policy.entry(handler_id)
            counted = self.report.handlers.get(handler_id)
            if entry is None or counted is None:
                self.report.other_handlers[handler_id] += 1
                continue
            decided = _decided(record, hook, entry, hook_input)
            if decided:
                counted.decided += 1
            else:
                counted.matched += 1
            if hook_input is None or not isinstance(entry.handler, RuleHandler):
                continue
            if found := evaluate_rules(entry.handler, hook_input):
                rule = self.report.rules.get((handler_id, found[0], found[1]))
                if rule is not None:
                    if decided:
                        rule.decided += 1
                    else:
                        rule.matched += 1
        if record.tool_name and event_spec(record.event).matcher_field == "tool_name":
            self.report.tools[record.tool_name] += 1
            agent = record.agent or "claude"
            if hook_input is not None and not any(
                selected(e, record.event, hook_input, agent) for e in self.policy.entries(record.event)
            ):
                self.report.uncovered[record.tool_name] += 1


def _decided(record: LogRecord, hook: dict[str, Any], entry: HandlerEntry, hook_input: dict[str, Any] | None) -> bool:
    """Whether this handler made the record's decision (the record says so; older records: worked out)."""
    if "decided" in hook or record.decision == Decision.NONE or hook.get("shadow"):
        return bool(hook.get("decided"))
    if any("decided" in other for other in record.hooks):
        return False  # a record that marks deciders and did not mark this one
    if isinstance(entry.handler, RuleHandler):
        if hook_input is None:
            return False
        found = evaluate_rules(entry.handler, hook_input)
        if found is None:
            return False
        output = rule_output(record.event, found[0], found[1], entry.handler.reason)
        return merge_results(record.event, [HandlerResult(Outcome.OK, output=output)]).decision == record.decision
    return hook.get("outcome") == Outcome.BLOCK.value and record.decision in (Decision.BLOCK, Decision.DENY)


async def read_coverage(
    policy: Policy,
    redis_url: str,
    keys: Keyspace,
    window: Window,
    *,
    tenants: Sequence[str] = (),
    budget_s: float | None = None,
) -> CoverageReport:
    """The coverage of ``policy`` by the records of ``window`` (of ``tenants``, if given), read
    for at most ``budget_s`` seconds (then the report is partial)."""
    report = CoverageReport(policy.revision, list(policy.sources), window.since_ms, window.until_ms, sorted(tenants))
    report.budget_s = budget_s
    counter = _Counter(policy, report)
    budget = Budget.start(budget_s)
    redis = connect(redis_url, socket_timeout_s=10.0)
    try:
        with redis_errors(redis_url):
            async for log_id, record in read_window(redis, keys, window, RecordFilter.of(tenants=tenants)):
                if budget.spent():
                    report.stopped = budget.stopped(report.events)
                    break
                counter.add(log_id, record, await judge_logged(record, policy.settings))
    finally:
        await redis.aclose()
    return report


__all__ = ["Counted", "CoverageReport", "read_coverage"]
